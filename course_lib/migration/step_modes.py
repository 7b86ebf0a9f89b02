"""One training step of the course's tiny LLM, executed four ways, so that each neighbouring
pair differs in ONE thing:

* ``pynative``  — the step written as a plain function (``train_step_function``: loss and
                  gradients with ``ms.value_and_grad``, global-norm clipping, AdamW), called
                  eagerly in PYNATIVE mode, operator by operator;
* ``jit``       — the same function under ``@ms.jit`` (``jit_train_step``), called in PYNATIVE
                  mode: compiled into one graph on the first call;
* ``jit@graph`` — the same ``@ms.jit`` function, called while the context is GRAPH_MODE;
  every kind builds its model, optimizer and step in PyNative mode (``run_mode``), so this
  pair differs in the calling mode only;
* ``graph``     — ``course_lib.training.TrainStep`` (a TrainOneStepCell with clipping) in
                  GRAPH_MODE: the whole Cell is compiled.

PyNative dispatches operators asynchronously by default; ``ms.runtime.launch_blocking()``
makes it synchronous, and ``mindspore.runtime`` has no call that switches it off again (MindSpore
2.7 ``mindspore/runtime/executor.py`` l.26-42). ``compare_in_fresh_processes`` therefore runs
every (kind, dispatch) pair in a new Python process. All runs compute the same losses from
the same weights and batches (checked in chapter 14); they differ in how long the first call
takes (compilation) and how fast later steps run.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from .compile_stats import CompileCounter

MODES = ("pynative", "jit", "graph")                  # compare_modes' default (benchmarks)
STEP_KINDS = ("pynative", "jit", "jit@graph", "graph")
DISPATCHES = ("async", "blocking")
# (before, after, the one thing that changes) — chapter 14's chain of ratios. "graph" (the
# TrainStep Cell) is not in it: its code differs from the function's in several places.
ONE_CHANGE = (("pynative", "jit", "compile the function (@ms.jit); both called in PyNative"),
              ("jit", "jit@graph", "call the same @ms.jit function in GRAPH mode"))


def train_step_function(loss_net, optimizer, clip: float = 1.0):
    """``TrainStep`` as a plain function: loss and gradients of the optimizer's parameters,
    global-norm clipping, update. Returns (loss, grad_norm). Eager as it is; compiled
    under ``ms.jit`` (``jit_train_step``)."""
    import mindspore as ms
    from mindspore import ops
    from ..training import global_norm
    grad_fn = ms.value_and_grad(loss_net, None, optimizer.parameters)

    def step(input_ids, labels):
        loss, grads = grad_fn(input_ids, labels)
        norm = global_norm(grads)
        grads = ops.clip_by_global_norm(grads, clip)
        return ops.depend(loss, optimizer(grads)), norm

    return step


def jit_train_step(loss_net, optimizer, clip: float = 1.0):
    """``train_step_function`` compiled: ``ms.jit`` turns the whole step into one graph on
    its first call (the same as decorating ``step`` with ``@ms.jit``)."""
    import mindspore as ms
    return ms.jit(train_step_function(loss_net, optimizer, clip))


def copy_model(model):
    """A new course model with the same config and the same weights (fresh graph caches)."""
    from mindspore import Tensor
    twin = type(model)(model.config)
    source = dict(model.parameters_and_names())
    for name, p in twin.parameters_and_names():
        p.set_data(Tensor(source[name].asnumpy()))
    return twin


@dataclass
class ModeResult:
    mode: str
    losses: list = field(default_factory=list)
    seconds: list = field(default_factory=list)
    compiles: int = 0
    dispatch: str = "async"
    steady_runs: list = field(default_factory=list)   # each fresh process's steady seconds

    @property
    def first_seconds(self) -> float:
        return self.seconds[0]

    @property
    def steady_seconds(self) -> float:
        """Median seconds per step after the first (which includes compilation); with
        several runs of this kind (``steady_runs``), the median of their medians."""
        if self.steady_runs:
            return float(np.median(self.steady_runs))
        rest = self.seconds[1:] or self.seconds
        return float(np.median(rest))


def run_mode(mode: str, make_model: Callable[[], object], batches: Sequence, lr: float = 1e-3,
             clip: float = 1.0) -> ModeResult:
    """Train ``make_model()`` on ``batches`` [(inputs, labels) int32 arrays] with AdamW,
    executing the step as ``mode`` (one of ``STEP_KINDS``); record loss, wall time and
    compilations per step. Runs with this process's dispatch. Every kind builds the model,
    optimizer and step in PyNative mode, so that only the call runs in the kind's mode."""
    from mindspore import Tensor
    from ..runtime import execution_mode
    from ..training import AdamW, LossCell, TrainStep
    if mode not in STEP_KINDS:
        raise ValueError(f"Unknown mode {mode!r}; choose one of {STEP_KINDS}.")
    result = ModeResult(mode)
    with execution_mode("pynative"):     # built alike: jit -> jit@graph changes the call only
        model = make_model()
        optimizer = AdamW(model.trainable_params(), lr)
        loss_net = LossCell(model)
        if mode == "graph":
            step = TrainStep(loss_net, optimizer, clip=clip)
        elif mode == "pynative":
            step = train_step_function(loss_net, optimizer, clip)
        else:
            step = jit_train_step(loss_net, optimizer, clip)
    with execution_mode("graph" if mode in ("graph", "jit@graph") else "pynative"):
        with CompileCounter() as counter:
            for inputs, labels in batches:
                start = time.perf_counter()
                loss, _ = step(Tensor(inputs), Tensor(labels))
                result.losses.append(float(loss.asnumpy()))
                result.seconds.append(time.perf_counter() - start)
        result.compiles = counter.count
    return result


def compare_modes(make_model, batches, lr: float = 1e-3, clip: float = 1.0,
                  modes: Sequence[str] = MODES) -> list[ModeResult]:
    """Run every mode one after the other in this process (side by side, same load, this
    process's dispatch)."""
    return [run_mode(m, make_model, batches, lr, clip) for m in modes]


def ratio_table(results: Sequence[ModeResult], baseline: str = "pynative") -> list[dict]:
    """Steady-state speed-up and first-call cost relative to ``baseline`` (ratios only)."""
    base = next(r for r in results if r.mode == baseline)
    return [{"mode": r.mode, "compiles": r.compiles,
             "first call s": round(r.first_seconds, 2),
             "steady s/step": round(r.steady_seconds, 3),
             f"speed-up vs {baseline}": round(base.steady_seconds / r.steady_seconds, 1)}
            for r in results]


# --------------------------------------------------------------------------------------
# Every (kind, dispatch) in a fresh process
# --------------------------------------------------------------------------------------
def save_inputs(path, model, batches) -> Path:
    """Write what a fresh process needs to rebuild ``model`` with the same weights and to
    train on ``batches``: ``<path>.npz`` (weights, inputs, labels) and ``<path>.json``
    (the model's class and config). Returns the .npz path."""
    path = Path(path).with_suffix(".npz")
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {f"w/{name}": p.asnumpy() for name, p in model.parameters_and_names()}
    arrays["inputs"] = np.stack([np.asarray(x) for x, _ in batches])
    arrays["labels"] = np.stack([np.asarray(y) for _, y in batches])
    np.savez(path, **arrays)
    cls = type(model)
    path.with_suffix(".json").write_text(json.dumps({
        "model": f"{cls.__module__}:{cls.__qualname__}",
        "config": f"{type(model.config).__module__}:{type(model.config).__qualname__}",
        "config_fields": dataclasses.asdict(model.config)}))
    return path


def _resolve(name: str):
    module, _, qualname = name.partition(":")
    return getattr(importlib.import_module(module), qualname)


def load_inputs(path):
    """-> (make_model, batches): ``make_model()`` builds the saved model with its weights."""
    from mindspore import Tensor
    path = Path(path)
    meta = json.loads(path.with_suffix(".json").read_text())
    fields = dict(meta["config_fields"])
    if "rope_scaling" in fields:
        fields["rope_scaling"] = tuple(tuple(kv) for kv in fields["rope_scaling"])
    config = _resolve(meta["config"])(**fields)
    model_cls = _resolve(meta["model"])
    with np.load(path) as z:
        weights = {k[2:]: z[k] for k in z.files if k.startswith("w/")}
        batches = list(zip(z["inputs"], z["labels"]))

    def make_model():
        model = model_cls(config)
        for name, p in model.parameters_and_names():
            p.set_data(Tensor(weights[name]))
        return model
    return make_model, batches


def measure_kind(mode: str, dispatch: str, inputs_path: str, lr: float, clip: float) -> dict:
    """Child entry point: one ``run_mode`` in THIS (fresh) process, with PyNative's default
    asynchronous dispatch or with ``ms.runtime.launch_blocking()``."""
    if dispatch not in DISPATCHES:
        raise ValueError(f"Unknown dispatch {dispatch!r}; choose one of {DISPATCHES}.")
    import mindspore as ms
    import course_lib as cl
    if dispatch == "blocking":
        ms.runtime.launch_blocking()
    cl.setup(mode="pynative", seed=0, quiet=True)
    make_model, batches = load_inputs(inputs_path)
    r = run_mode(mode, make_model, batches, lr, clip)
    return {"mode": r.mode, "losses": r.losses, "seconds": r.seconds, "compiles": r.compiles}


def compare_in_fresh_processes(model, batches, directory, lr: float = 1e-3, clip: float = 1.0,
                               kinds: Sequence[str] = STEP_KINDS,
                               dispatches: Sequence[str] = DISPATCHES, rounds: int = 1,
                               timeout: float = 900) -> list[ModeResult]:
    """Every kind under every dispatch, each in a new process (one after the other, so they
    never compete for the CPU), from ``model``'s current weights; ``rounds`` times, the
    (kind, dispatch) runs taking turns: in the given order in even rounds, reversed in odd
    ones (``runtime.turn_order``), so that no run always goes first or last. One result per
    (kind, dispatch), ordered dispatch by dispatch: the first round's losses, step times
    and compilations, and every round's steady time in ``steady_runs``."""
    from ..runtime import run_isolated, turn_order
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}.")
    inputs = save_inputs(Path(directory) / "step_inputs", model, batches)
    pairs = [(kind, dispatch) for kind in kinds for dispatch in dispatches]
    found: dict = {}
    for r in range(rounds):
        for kind, dispatch in turn_order(pairs, r):
            out = run_isolated(measure_kind, mode=kind, dispatch=dispatch,
                               inputs_path=str(inputs), lr=float(lr), clip=float(clip),
                               timeout=timeout)
            run = ModeResult(out["mode"], out["losses"], out["seconds"], out["compiles"],
                             dispatch)
            first = found.setdefault((kind, dispatch), run)
            first.steady_runs.append(run.steady_seconds)
    return [found[(kind, dispatch)] for dispatch in dispatches for kind in kinds]


def _by(results, mode, dispatch):
    return next(r for r in results if r.mode == mode and r.dispatch == dispatch)


def one_change_ratios(results: Sequence[ModeResult]) -> list[dict]:
    """For each link of ``ONE_CHANGE`` and each dispatch measured: steady time before /
    after (> 1: the change made the step faster)."""
    dispatches = [d for d in DISPATCHES if any(r.dispatch == d for r in results)]
    return [{"change": what, "from": a, "to": b,
             **{d: _by(results, a, d).steady_seconds / _by(results, b, d).steady_seconds
                for d in dispatches}}
            for a, b, what in ONE_CHANGE]


def dispatch_ratios(results: Sequence[ModeResult]) -> dict:
    """Per kind: steady time with the default asynchronous dispatch / with launch_blocking."""
    kinds = [k for k in STEP_KINDS if any(r.mode == k for r in results)]
    return {k: _by(results, k, "async").steady_seconds / _by(results, k, "blocking").steady_seconds
            for k in kinds}
