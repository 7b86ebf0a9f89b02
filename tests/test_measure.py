"""course_lib.measure: what is timed, in which mode, in which order, and what is reported."""
import mindspore as ms
import numpy as np
import pytest

from course_lib import measure
from course_lib.pipelines import BlockSource, make_dataset
from tiny_lm import TinyLM

# fake seconds each kind takes per call; the report must be exactly these medians
COST = {"TrainOneStepCell (graph)": 1.0, "TrainStep (graph)": 2.0, "TrainStep (pynative)": 5.0}


def _data():
    rows = np.random.default_rng(0).integers(0, 64, (40, 9)).astype(np.int32)
    return make_dataset(BlockSource(rows), 4, seed=1)


def _model():
    ms.set_seed(0)
    return TinyLM()


def test_compare_train_steps_times_each_kind_in_its_mode_interleaved(monkeypatch):
    clock, calls = [0.0], []
    real_build = measure._build_step

    def build(kind, make_model, lr):
        cell = real_build(kind, make_model, lr)

        def step(*batch):
            calls.append((kind, ms.get_context("mode")))
            clock[0] += COST[kind]
            return cell(*batch)
        return step

    monkeypatch.setattr(measure, "_build_step", build)
    monkeypatch.setattr(measure.time, "perf_counter", lambda: clock[0])
    seconds = measure.compare_train_steps(_model, _data, steps=4, pynative_steps=2)
    assert seconds == COST
    kinds = list(measure.STEP_KINDS)
    graph, eager = ms.GRAPH_MODE, ms.PYNATIVE_MODE
    modes = {kinds[0]: graph, kinds[1]: graph, kinds[2]: eager}
    expected = [(k, modes[k]) for k in kinds]                       # warm-up, one each
    expected += [(k, modes[k]) for k in kinds]                      # round 1: all three
    expected += [(k, modes[k]) for _ in range(3) for k in kinds[:2]]   # rounds 2-4: graph only
    assert calls == expected


def test_compare_train_steps_rejects_bad_counts():
    with pytest.raises(ValueError, match="int >= 2"):
        measure.compare_train_steps(_model, _data, steps=1)
    with pytest.raises(ValueError, match="need >= 41"):
        measure.compare_train_steps(_model, _data, steps=40)
