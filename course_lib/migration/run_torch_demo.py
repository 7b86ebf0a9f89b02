"""Run the PyTorch demo (``torch_demo``) in its own process and measure what happens.

    python -m course_lib.migration.run_torch_demo --backend mindtorch --inputs inputs.npz

Backends:
* ``torch``     — the real PyTorch (the reference);
* ``mindtorch`` — ``import mindtorch`` first (what ``import mindnlp`` does as its first step),
                  so the *unchanged* ``import torch`` in ``torch_demo`` resolves to mindnlp's
                  torch API over MindSpore;
* ``mindspore`` — the hand translation in ``native_demo``.

Why a separate process: mindtorch patches hundreds of ``mindspore.Tensor`` methods process-wide
(chapter 11 counts 287 replaced and 134 added),
after which ordinary MindSpore code (and the real torch) can no longer be used there.

``time_steps`` times the training loops phase by phase (gradients, update, loss read) in a
fresh process per (backend, dispatch); ``compare_speed`` runs them one after the other.

The parent writes the shared inputs once (``prepare_inputs``: initial weights + batches,
so no child re-reads the corpus); ``run_demo`` runs ``measure`` in a fresh process
(``runtime.run_isolated``) and gets its result back. ``measure_torch_api("torch", ...)`` and ``measure_mindspore`` may also
run in the parent (a notebook kernel that never imports mindnlp).
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from ..runtime import run_isolated, turn_order
from .demo_data import DemoConfig, initial_weights, training_batches

BACKENDS = ("torch", "mindtorch", "mindspore")


def _error(exc: BaseException) -> str:
    """``Type: first line`` plus the line of ``torch_demo`` that triggered it."""
    import traceback
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}"[:160]
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.endswith("torch_demo.py")]
    return f"{text}  [at `{frames[-1].line}`]" if frames else text


def prepare_inputs(path, cfg: DemoConfig | None = None, steps: int = 20, seed: int = 0,
                   batches=None):
    """Write the shared starting point (initial weights + batches) to ``path`` (.npz).
    The parent does the slow part (reading and tokenizing the corpus) once; children
    only load arrays. ``batches`` (list of (inputs, labels) int arrays) overrides the corpus."""
    cfg = cfg or DemoConfig()
    batches = training_batches(cfg, steps) if batches is None else batches
    arrays = {f"w/{k}": v for k, v in initial_weights(cfg, seed).items()}
    arrays["inputs"] = np.stack([x for x, _ in batches])
    arrays["labels"] = np.stack([y for _, y in batches])
    arrays["config"] = np.array([cfg.vocab_size, cfg.hidden, cfg.heads, cfg.layers, cfg.max_len,
                                 cfg.batch_size])
    np.savez(path, **arrays)
    return path


def load_inputs(path):
    """-> (cfg, weights {torch name: array}, batches [(inputs, labels)])."""
    with np.load(path) as z:
        cfg = DemoConfig(*[int(v) for v in z["config"]])
        weights = {k[2:]: z[k] for k in z.files if k.startswith("w/")}
        batches = list(zip(z["inputs"], z["labels"]))
    return cfg, weights, batches


# --------------------------------------------------------------------------------------
# Child side: PyTorch-API backends (real torch or mindtorch)
# --------------------------------------------------------------------------------------
def _snapshot(model) -> dict:
    return {k: np.array(v.detach().numpy(), copy=True) for k, v in model.state_dict().items()}


def _changed(model, before: dict) -> float:
    return float(max(np.abs(v.detach().numpy() - before[k]).max()
                     for k, v in model.state_dict().items()))


def _attempt(run):
    """``(result, None)`` or ``(None, "Type: message [at line]")``: the error is the measurement."""
    try:
        return run(), None
    except Exception as exc:  # noqa: BLE001
        return None, _error(exc)


def _probe_unchanged_loops(fresh, batches, lr) -> dict:
    """The textbook loop (zero_grad / backward / AdamW.step) and the hand-written SGD loop
    with backward(), both unchanged."""
    from . import torch_demo
    model = fresh()
    before = _snapshot(model)
    losses, error = _attempt(lambda: torch_demo.train_textbook(model, batches[:3]))
    out = {"textbook_losses": losses, "textbook_error": error,
           "textbook_weights_changed": _changed(model, before)}
    model = fresh()
    out["sgd_losses"], out["sgd_error"] = _attempt(
        lambda: torch_demo.train_sgd(model, batches[:2], lr))
    return out


def _probe_optimizer_steps(backend: str, torch, fresh, batch) -> dict:
    """``Optimizer.step()`` of AdamW and SGD when gradients ARE present."""
    from . import torch_demo
    out = {}
    for name in ("AdamW", "SGD"):
        model = fresh()
        params = list(model.parameters())
        if backend == "mindtorch":
            torch.autograd.value_and_grad(lambda i, l: torch_demo.lm_loss(model, i, l), params)(*batch)
        else:
            torch_demo.lm_loss(model, *batch).backward()
        before = _snapshot(model)
        opt = getattr(torch.optim, name)(params, lr=1e-3)
        try:                      # here, not in _attempt: the error names this line
            opt.step()
            out[f"{name}_step"] = f"ok (max weight change {_changed(model, before):.1e})"
        except Exception as exc:  # noqa: BLE001
            out[f"{name}_step"] = _error(exc)
    return out


def measure_torch_api(backend: str, cfg: DemoConfig, weights: dict, batches_np: list,
                      lr: float) -> dict:
    """Probe and train ``torch_demo`` on real PyTorch or (backend="mindtorch") on mindtorch.
    Only call with "mindtorch" in a process of its own."""
    if backend == "mindtorch":
        import mindtorch  # noqa: F401  -- from here on `import torch` means mindtorch
    import torch
    if (backend == "torch") == ("mindtorch" in str(torch.__file__)):
        raise RuntimeError(f"backend {backend!r} requested but `import torch` gives {torch.__file__}; "
                           "run the mindtorch backend in a fresh process (run_demo does).")
    from . import torch_demo

    batches = [(torch.tensor(x), torch.tensor(y)) for x, y in batches_np]

    def fresh():
        model = torch_demo.TinyGPT(cfg.vocab_size, cfg.hidden, cfg.heads, cfg.layers, cfg.max_len)
        model.load_state_dict({k: torch.tensor(v) for k, v in weights.items()}, strict=True)
        return model

    out = {"backend": backend, "torch_file": torch.__file__, "torch_version": torch.__version__}
    model = fresh()
    with torch.no_grad():
        logits = model(batches[0][0])
    out["first_logits"] = [float(v) for v in logits[0, -1].numpy()]
    # 1. Does loss.backward() fill .grad?
    torch_demo.lm_loss(model, *batches[0]).backward()
    params = list(model.parameters())
    out["backward_grads"] = sum(p.grad is not None for p in params)
    out["num_params"] = len(params)
    out.update(_probe_unchanged_loops(fresh, batches, lr))                     # 2. and 3.
    out.update(_probe_optimizer_steps(backend, torch, fresh, batches[0]))      # 4.
    # 5. The run that trains: the workaround on mindtorch, plain backward() on PyTorch.
    train = torch_demo.train_workaround if backend == "mindtorch" else torch_demo.train_sgd
    out["train_loop"] = train.__name__
    start = time.perf_counter()
    out["train_losses"] = train(fresh(), batches, lr)
    out["train_seconds"] = time.perf_counter() - start
    return out


# --------------------------------------------------------------------------------------
# Child side: native MindSpore
# --------------------------------------------------------------------------------------
def measure_mindspore(cfg: DemoConfig, weights: dict, batches: list, lr: float) -> dict:
    """The same training with the native MindSpore translation (PyNative mode)."""
    import mindspore as ms
    from mindspore import Tensor
    from . import native_demo

    if ms.get_context("mode") != ms.PYNATIVE_MODE:
        raise RuntimeError("measure_mindspore compares eager loops: call cl.setup(mode='pynative') first.")
    model = native_demo.build(cfg)
    native_demo.load_torch_named(model, weights)
    logits = model(Tensor(batches[0][0].astype(np.int32)))
    out = {"backend": "mindspore", "mindspore_version": ms.__version__,
           "first_logits": [float(v) for v in logits[0, -1].asnumpy()],
           "train_loop": "native_demo.train_sgd"}
    tensors = [(Tensor(x.astype(np.int32)), Tensor(y.astype(np.int32))) for x, y in batches]
    start = time.perf_counter()
    out["train_losses"] = native_demo.train_sgd(model, tensors, lr)
    out["train_seconds"] = time.perf_counter() - start
    return out


def measure(backend: str, inputs_path, lr: float) -> dict:
    """Child entry point: load the shared inputs and measure one backend in THIS process."""
    if backend not in BACKENDS:
        raise ValueError(f"Unknown backend {backend!r}; choose one of {BACKENDS}.")
    cfg, weights, batches = load_inputs(inputs_path)
    if backend == "mindspore":
        import course_lib as cl
        cl.setup(mode="pynative", seed=0, quiet=True)
        return measure_mindspore(cfg, weights, batches, lr)
    return measure_torch_api(backend, cfg, weights, batches, lr)


# --------------------------------------------------------------------------------------
# Speed, phase by phase (child side)
# --------------------------------------------------------------------------------------
PHASES = ("gradients", "update", "loss read")


def _timed_torch_api(torch, torch_demo, model, batches, lr, workaround: bool):
    """The statements of ``torch_demo.train_workaround`` (``workaround``) or
    ``torch_demo.train_sgd``, with a clock read between the phases."""
    params = list(model.parameters())
    step = (torch.autograd.value_and_grad(lambda i, l: torch_demo.lm_loss(model, i, l), params)
            if workaround else None)
    losses, times = [], {k: [] for k in PHASES}
    for inputs, labels in batches:
        t0 = time.perf_counter()
        for p in params:
            p.grad = None
        if workaround:
            loss = step(inputs, labels)               # attaches p.grad for every p in params
        else:
            loss = torch_demo.lm_loss(model, inputs, labels)
            loss.backward()
        t1 = time.perf_counter()
        with torch.no_grad():
            for p in params:
                p -= lr * p.grad
        t2 = time.perf_counter()
        losses.append(loss.item())
        t3 = time.perf_counter()
        for k, a, b in zip(PHASES, (t0, t1, t2), (t1, t2, t3)):
            times[k].append(b - a)
    return losses, times


def _timed_native(model, batches, lr):
    """The statements of ``native_demo.train_sgd``, with a clock read between the phases."""
    import mindspore as ms
    from mindspore import ops
    from . import native_demo
    params = model.trainable_params()
    grad_fn = ms.value_and_grad(lambda i, l: native_demo.lm_loss(model, i, l), None, params)
    losses, times = [], {k: [] for k in PHASES}
    for inputs, labels in batches:
        t0 = time.perf_counter()
        loss, grads = grad_fn(inputs, labels)
        t1 = time.perf_counter()
        for p, g in zip(params, grads):
            ops.assign_sub(p, lr * g)
        t2 = time.perf_counter()
        losses.append(float(loss.asnumpy()))
        t3 = time.perf_counter()
        for k, a, b in zip(PHASES, (t0, t1, t2), (t1, t2, t3)):
            times[k].append(b - a)
    return losses, times


def time_steps(backend: str, inputs_path, lr: float, blocking: bool, steps: int | None = None) -> dict:
    """Child entry point: train ``backend`` on the first ``steps`` shared batches in THIS
    (fresh) process with the loop its training run uses (real torch: ``train_sgd``;
    mindtorch: ``train_workaround``; native: ``native_demo.train_sgd``), and time each step
    and its phases: gradients (forward + backward), update, loss read. MindSpore backends use
    PyNative's default asynchronous dispatch or, with ``blocking``, synchronous dispatch
    (``ms.runtime.launch_blocking()``). Inputs become tensors before the clock starts.
    With asynchronous dispatch the phases mean little (operators are still queued when a
    phase "ends"); only the step total does."""
    if backend not in BACKENDS:
        raise ValueError(f"Unknown backend {backend!r}; choose one of {BACKENDS}.")
    cfg, weights, batches = load_inputs(inputs_path)
    batches = batches[:steps] if steps else batches
    if backend in ("mindtorch", "mindspore"):
        import mindspore as ms
        if blocking:
            ms.runtime.launch_blocking()
    if backend == "mindspore":
        import course_lib as cl
        from mindspore import Tensor
        from . import native_demo
        cl.setup(mode="pynative", seed=0, quiet=True)
        model = native_demo.build(cfg)
        native_demo.load_torch_named(model, weights)
        tensors = [(Tensor(x.astype(np.int32)), Tensor(y.astype(np.int32))) for x, y in batches]
        losses, times = _timed_native(model, tensors, lr)
    else:
        if backend == "mindtorch":
            import mindtorch  # noqa: F401  -- from here on `import torch` means mindtorch
        import torch
        from . import torch_demo
        model = torch_demo.TinyGPT(cfg.vocab_size, cfg.hidden, cfg.heads, cfg.layers, cfg.max_len)
        model.load_state_dict({k: torch.tensor(v) for k, v in weights.items()}, strict=True)
        tensors = [(torch.tensor(x), torch.tensor(y)) for x, y in batches]
        losses, times = _timed_torch_api(torch, torch_demo, model, tensors, lr,
                                         workaround=backend == "mindtorch")
    return {"backend": backend, "blocking": bool(blocking), "losses": losses,
            "step_seconds": [sum(t) for t in zip(*times.values())], "phase_seconds": times}


def median_ms(values, skip_first: bool = True) -> float:
    """Median milliseconds, leaving out the first step (one-off setup) when there are others."""
    rest = values[1:] if skip_first and len(values) > 1 else values
    return 1000 * float(np.median(rest))


# --------------------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------------------
def compare(results: dict, reference: str = "torch") -> dict:
    """Max |difference| of first-position logits and of the loss curve vs ``reference``."""
    ref = results[reference]
    out = {}
    for name, r in results.items():
        if name == reference:
            continue
        out[name] = {
            "logits_max_diff": float(np.abs(np.subtract(r["first_logits"], ref["first_logits"])).max()),
            "loss_max_diff": float(np.abs(np.subtract(r["train_losses"], ref["train_losses"])).max()),
        }
    return out


def run_demo(backend: str, inputs_path, lr: float = 0.3, timeout: float = 900) -> dict:
    """Measure ``backend`` in a fresh process (``runtime.run_isolated``; inputs from
    ``prepare_inputs``); raises with the child's stderr if it fails."""
    if backend not in BACKENDS:
        raise ValueError(f"Unknown backend {backend!r}; choose one of {BACKENDS}.")
    env = {"HF_HUB_OFFLINE": "1", "DIFFUSERS_VERBOSITY": "error", "PYTHONWARNINGS": "ignore"}
    return run_isolated(measure, backend=backend, inputs_path=str(inputs_path), lr=float(lr),
                        timeout=timeout, env=env)


SPEED_RUNS = (("mindspore", True), ("mindtorch", True), ("mindspore", False), ("mindtorch", False))


def compare_speed(inputs_path, lr: float = 0.3, steps: int | None = None,
                  runs=SPEED_RUNS, rounds: int = 1, timeout: float = 900) -> list[dict]:
    """``time_steps`` for each (backend, blocking) of ``runs``, each in a fresh process,
    one after the other; with ``rounds`` > 1 every run goes again, in reversed order every
    other round. One dict per run: round 1's result plus ``"rounds"``, every round's."""
    env = {"HF_HUB_OFFLINE": "1", "DIFFUSERS_VERBOSITY": "error", "PYTHONWARNINGS": "ignore"}
    runs = list(runs)
    by_run = {run: [] for run in runs}
    for r in range(rounds):
        for b, blocking in turn_order(runs, r):
            by_run[(b, blocking)].append(
                run_isolated(time_steps, backend=b, inputs_path=str(inputs_path), lr=float(lr),
                             blocking=bool(blocking), steps=steps, timeout=timeout, env=env))
    return [dict(results[0], rounds=results) for results in by_run.values()]


def rounds_ms(result: dict, phase: str | None = None) -> list[float]:
    """Each round's median milliseconds per step (first step left out) of a
    ``compare_speed`` result, for the whole step or one phase."""
    return [median_ms(r["step_seconds"] if phase is None else r["phase_seconds"][phase])
            for r in result["rounds"]]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=BACKENDS, required=True)
    ap.add_argument("--inputs", required=True, help=".npz written by prepare_inputs()")
    ap.add_argument("--lr", type=float, default=0.3)
    args = ap.parse_args(argv)
    result = measure(args.backend, args.inputs, args.lr)
    print(json.dumps(result, indent=1), flush=True)


if __name__ == "__main__":
    main()
