"""Measurements the notebooks show, kept out of the modules that teach the code they measure.

* :class:`StepTimer` — a Callback that notes the time at the end of every training step
  (``Model.train`` and ``LLMTrainer``); the first step includes graph compilation.
* :func:`measure_training_speed` — chapter 02: the same ``Model.train`` run timed in GRAPH
  or PYNATIVE mode (and at an ``amp_level``).
* :func:`compare_train_steps` — chapter 05: seconds per optimizer step of ``Model.train``'s
  step (``nn.TrainOneStepCell``) against ``LLMTrainer``'s ``TrainStep``, GRAPH and PyNative.
* :func:`alternate_train_steps` — chapter 08: seconds per optimizer step of several
  ``LLMTrainer`` objects (LoRA and full fine-tuning), timed in alternating rounds.
"""
from __future__ import annotations

import time
from typing import Callable

import mindspore as ms
import numpy as np
from mindspore import nn
from mindspore.train import Callback

from .classifier import build_model
from .runtime import MODES, execution_mode, turn_order
from .training import AdamW, LossCell, TrainStep
from .validate import is_int

def _wait_for(outputs) -> None:
    """Block until the step's outputs are computed: with asynchronous dispatch (PyNative's
    default) a step's operators may still be queued when its callback runs."""
    for out in outputs if isinstance(outputs, (tuple, list)) else (outputs,):
        if isinstance(out, ms.Tensor):
            out.asnumpy()


class StepTimer(Callback):
    """Wall-clock time at the start of training and at the end of every step, taken after
    the step's outputs (its loss) are computed."""

    def __init__(self):
        super().__init__()
        self.times: list[float] = []

    def on_train_begin(self, run_context):
        self.times = [time.perf_counter()]

    def on_train_step_end(self, run_context):
        _wait_for(run_context.original_args().net_outputs)
        self.times.append(time.perf_counter())

    @property
    def first_step_seconds(self) -> float:
        """The first step, graph compilation included (0.0 before any step)."""
        return self.times[1] - self.times[0] if len(self.times) > 1 else 0.0

    @property
    def mean_step_seconds(self) -> float:
        """Mean time of the steps after the first (0.0 with fewer than 2 steps)."""
        return (self.times[-1] - self.times[1]) / (len(self.times) - 2) if len(self.times) > 2 else 0.0

    def steps_per_second(self) -> float:
        """Speed after the first step (which may include compiling the graph)."""
        if len(self.times) < 3:
            raise ValueError("Need at least 2 timed steps to measure a speed.")
        return (len(self.times) - 2) / (self.times[-1] - self.times[1])


def measure_training_speed(make_net, make_dataset, mode: str, steps: int, lr: float = 1e-3,
                           seed: int = 0, amp_level: str = "O0") -> dict:
    """Train a fresh ``make_net()`` with ``classifier.build_model`` for ``steps`` batches of
    a fresh ``make_dataset()`` in ``mode`` and time it. (Factories, because a dataset
    pipeline node may feed only one consumer, and each mode must start from the same
    initial weights.)

    Returns ``first_step_s`` (includes compiling the graph in GRAPH mode), ``steps_per_s``
    over the remaining steps, and ``total_s``. The previous execution mode is restored.
    Only compare numbers measured side by side in one run; they are noisy.
    """
    if mode not in MODES:
        raise ValueError(f"Unknown mode {mode!r}; use 'graph' or 'pynative'.")
    if not is_int(steps) or steps < 2:
        raise ValueError("steps must be an int >= 2 (one step to warm up, the rest to time).")
    data = make_dataset()
    if data.get_dataset_size() < steps:
        raise ValueError(f"The dataset gives only {data.get_dataset_size()} batches; need {steps}. "
                         "Use more examples or fewer steps.")
    with execution_mode(mode):
        ms.set_seed(seed)
        model = build_model(make_net(), lr=lr, amp_level=amp_level)
        timer = StepTimer()
        model.train(1, data.take(steps), callbacks=[timer], dataset_sink_mode=False)
    t = timer.times
    return {"mode": mode, "steps": steps, "first_step_s": timer.first_step_seconds,
            "steps_per_s": timer.steps_per_second(), "total_s": t[-1] - t[0]}


# kind -> (cell, execution mode)
STEPS = {"TrainOneStepCell (graph)": ("TrainOneStepCell", "graph"),
         "TrainStep (graph)": ("TrainStep", "graph"),
         "TrainStep (pynative)": ("TrainStep", "pynative")}
STEP_KINDS = tuple(STEPS)


def _first_batches(make_data, n: int) -> list:
    batches = []
    for input_ids, labels in make_data().create_tuple_iterator(num_epochs=1):
        batches.append((input_ids, labels))
        if len(batches) == n:
            break
    if len(batches) < n:
        raise ValueError(f"make_data() yields {len(batches)} batches; need >= {n}.")
    return batches


def _build_step(kind: str, make_model, lr: float) -> nn.Cell:
    model = make_model()
    optimizer = AdamW(model.trainable_params(), lr)
    if STEPS[kind][0] == "TrainOneStepCell":
        return nn.TrainOneStepCell(LossCell(model), optimizer)
    return TrainStep(LossCell(model), optimizer, clip=1.0)


def _seconds(cell, mode: str, batch) -> float:
    with execution_mode(mode):
        start = time.perf_counter()
        out = cell(*batch)
        (out[0] if isinstance(out, tuple) else out).asnumpy()   # wait for the result
        return time.perf_counter() - start


def compare_train_steps(make_model: Callable[[], nn.Cell], make_data: Callable[[], object],
                        steps: int = 20, pynative_steps: int | None = None,
                        lr: float = 1e-3) -> dict[str, float]:
    """Median seconds per optimizer step of the SAME model and batches trained by

    * ``"TrainOneStepCell (graph)"``: ``nn.TrainOneStepCell(LossCell(model), AdamW)``, the
      step ``Model.train`` runs (no clipping, no gradient norm);
    * ``"TrainStep (graph)"``: LLMTrainer's step (+ global-norm clipping, norm returned);
    * ``"TrainStep (pynative)"``: the same step executed op by op.

    The steps are INTERLEAVED (one of each kind per round, after a compiling warm-up call
    each; the order reversed every other round), so a busy machine slows all kinds alike;
    ``pynative_steps`` (default ``steps``) times the slow eager kind in the first rounds only.
    ``make_model``/``make_data`` build fresh objects (seed inside ``make_model``)."""
    pynative_steps = steps if pynative_steps is None else pynative_steps
    if not is_int(steps) or steps < 1:
        raise ValueError(f"steps must be an int >= 1 (timed steps after one untimed warm-up "
                         f"call), got {steps!r}.")
    if not is_int(pynative_steps) or not 1 <= pynative_steps <= steps:
        raise ValueError(f"pynative_steps must be an int between 1 and steps ({steps}), "
                         f"got {pynative_steps!r}.")
    batches = _first_batches(make_data, steps + 1)
    cells = {kind: _build_step(kind, make_model, lr) for kind in STEPS}
    timings: dict[str, list[float]] = {kind: [] for kind in STEPS}
    for kind, (_, mode) in STEPS.items():      # compile (graph) / first-run overheads, untimed
        _seconds(cells[kind], mode, batches[0])
    for i, batch in enumerate(batches[1:]):
        for kind in turn_order(STEPS, i):              # the order reversed every other round
            mode = STEPS[kind][1]
            if mode == "graph" or i < pynative_steps:
                timings[kind].append(_seconds(cells[kind], mode, batch))
    return {kind: float(np.median(t)) for kind, t in timings.items()}


def alternate_train_steps(trainers: dict, rounds: int = 5, steps: int = 10) -> dict[str, float]:
    """Median seconds per optimizer step of each ``LLMTrainer`` in ``trainers`` (name ->
    trainer), timed in ALTERNATING rounds: one untimed step each first (it compiles the GRAPH
    step), then ``rounds`` rounds in which every trainer runs ``steps`` steps in turn, the
    order reversed every other round (``runtime.turn_order``). Load that comes and goes hits
    every trainer alike, which two runs timed one after the other cannot promise. Each
    trainer's schedule needs ``1 + rounds * steps`` steps left."""
    for name, value in (("rounds", rounds), ("steps", steps)):
        if not is_int(value) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}.")
    need = 1 + rounds * steps
    short = {n: t.total_steps - t.step for n, t in trainers.items() if t.total_steps - t.step < need}
    if short:
        raise ValueError(f"Each trainer needs {need} scheduled steps left (1 warm-up + {rounds} x "
                         f"{steps}); these have fewer: {short}. Build them with steps >= {need}.")
    for trainer in trainers.values():
        trainer.train(steps=1)                      # compiles; not timed
    timings: dict[str, list[float]] = {name: [] for name in trainers}
    for r in range(rounds):
        for name in turn_order(trainers, r):
            trainer = trainers[name]
            start = time.perf_counter()
            trainer.train(steps=steps)
            timings[name].append((time.perf_counter() - start) / steps)
    return {name: float(np.median(t)) for name, t in timings.items()}
