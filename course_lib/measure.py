"""Measurements the notebooks show, kept out of the modules that teach the code they measure.

* :func:`compare_train_steps` — chapter 05: seconds per optimizer step of ``Model.train``'s
  step (``nn.TrainOneStepCell``) against ``LLMTrainer``'s ``TrainStep``, GRAPH and PyNative.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np
from mindspore import nn

from .runtime import execution_mode
from .training import AdamW, LossCell, TrainStep
from .validate import is_int

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
    each), so a busy machine slows all kinds alike; ``pynative_steps`` (default ``steps``)
    limits the slow eager kind to the first rounds. ``make_model``/``make_data`` build
    fresh objects (seed inside ``make_model``)."""
    pynative_steps = steps if pynative_steps is None else pynative_steps
    for name, value in (("steps", steps), ("pynative_steps", pynative_steps)):
        if not is_int(value) or value < 2:
            raise ValueError(f"{name} must be an int >= 2 (a warm-up call, then timing), "
                             f"got {value!r}.")
    batches = _first_batches(make_data, steps + 1)
    cells = {kind: _build_step(kind, make_model, lr) for kind in STEPS}
    timings: dict[str, list[float]] = {kind: [] for kind in STEPS}
    for kind, (_, mode) in STEPS.items():      # compile (graph) / first-run overheads, untimed
        _seconds(cells[kind], mode, batches[0])
    for i, batch in enumerate(batches[1:]):
        for kind, (_, mode) in STEPS.items():
            if mode == "graph" or i < pynative_steps - 1:
                timings[kind].append(_seconds(cells[kind], mode, batch))
    return {kind: float(np.median(t)) for kind, t in timings.items()}
