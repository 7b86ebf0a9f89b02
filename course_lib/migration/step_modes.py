"""One training step of the course's tiny LLM, three ways to execute it:

* ``pynative`` — ``course_lib.training.TrainStep`` run eagerly, op by op (PYNATIVE mode);
* ``jit``      — the same step written as a function decorated with ``@ms.jit``, called
                 from PYNATIVE mode: the function is compiled into one graph;
* ``graph``    — ``TrainStep`` (a TrainOneStepCell with clipping) in GRAPH_MODE: the whole
                 Cell is compiled.

All three compute the same losses from the same weights and batches (checked); they differ
in how long the first call takes (compilation) and how fast later steps run.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from .compile_stats import CompileCounter

MODES = ("pynative", "jit", "graph")


def jit_train_step(loss_net, optimizer, clip: float = 1.0):
    """``TrainStep`` as a plain function under ``@ms.jit``: loss and gradients of the
    optimizer's parameters, global-norm clipping, update. Returns (loss, grad_norm)."""
    import mindspore as ms
    from mindspore import ops
    from ..training import global_norm
    grad_fn = ms.value_and_grad(loss_net, None, optimizer.parameters)

    @ms.jit
    def step(input_ids, labels):
        loss, grads = grad_fn(input_ids, labels)
        norm = global_norm(grads)
        grads = ops.clip_by_global_norm(grads, clip)
        return ops.depend(loss, optimizer(grads)), norm

    return step


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

    @property
    def first_seconds(self) -> float:
        return self.seconds[0]

    @property
    def steady_seconds(self) -> float:
        """Median seconds per step after the first (which includes compilation)."""
        rest = self.seconds[1:] or self.seconds
        return float(np.median(rest))


def run_mode(mode: str, make_model: Callable[[], object], batches: Sequence, lr: float = 1e-3,
             clip: float = 1.0) -> ModeResult:
    """Train ``make_model()`` on ``batches`` [(inputs, labels) int32 arrays] with AdamW,
    executing the step in ``mode``; record loss, wall time and compilations per step."""
    from mindspore import Tensor
    from ..runtime import execution_mode
    from ..training import AdamW, LossCell, TrainStep
    if mode not in MODES:
        raise ValueError(f"Unknown mode {mode!r}; choose one of {MODES}.")
    result = ModeResult(mode)
    with execution_mode("graph" if mode == "graph" else "pynative"):
        model = make_model()
        optimizer = AdamW(model.trainable_params(), lr)
        loss_net = LossCell(model)
        step = (jit_train_step(loss_net, optimizer, clip) if mode == "jit"
                else TrainStep(loss_net, optimizer, clip=clip))
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
    """Run every mode one after the other in this process (side by side, same load)."""
    return [run_mode(m, make_model, batches, lr, clip) for m in modes]


def ratio_table(results: Sequence[ModeResult], baseline: str = "pynative") -> list[dict]:
    """Steady-state speed-up and first-call cost relative to ``baseline`` (ratios only)."""
    base = next(r for r in results if r.mode == baseline)
    return [{"mode": r.mode, "compiles": r.compiles,
             "first call s": round(r.first_seconds, 2),
             "steady s/step": round(r.steady_seconds, 3),
             f"speed-up vs {baseline}": round(base.steady_seconds / r.steady_seconds, 1)}
            for r in results]
