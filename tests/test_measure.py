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


def test_compare_train_steps_times_each_kind_in_its_mode_interleaved_reversed_every_other_round(monkeypatch):
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
    expected += [(k, modes[k]) for k in kinds]                      # round 1: all three,
    expected += [(k, modes[k]) for k in reversed(kinds)]            # round 2: reversed
    for r in range(2, 4):                                           # rounds 3-4: graph only
        expected += [(k, modes[k]) for k in (kinds[:2] if r % 2 == 0 else kinds[1::-1])]
    assert calls == expected


def test_compare_train_steps_rejects_bad_counts():
    with pytest.raises(ValueError, match="steps must be an int >= 1"):
        measure.compare_train_steps(_model, _data, steps=0)
    with pytest.raises(ValueError, match="between 1 and steps"):
        measure.compare_train_steps(_model, _data, steps=4, pynative_steps=5)
    with pytest.raises(ValueError, match="need >= 41"):
        measure.compare_train_steps(_model, _data, steps=40)


def test_measure_training_speed_times_model_train_in_the_mode_asked(monkeypatch, tokenizer):
    from course_lib import classifier as C
    ticks, modes = iter(range(100)), []
    real_build = measure.build_model

    def build(net, **kwargs):
        modes.append(ms.get_context("mode"))
        return real_build(net, **kwargs)

    monkeypatch.setattr(measure.time, "perf_counter", lambda: float(next(ticks)))
    monkeypatch.setattr(measure, "build_model", build)
    examples = [("很好看" * (i % 5 + 1), i % 2) for i in range(64)]
    make_net = lambda: C.SentimentClassifier(tokenizer.vocab_size, 16, embed_dim=16,  # noqa: E731
                                             num_heads=2, ffn_dim=32)
    make_data = lambda: C.review_dataset(examples, tokenizer, 16, 8)  # noqa: E731
    result = measure.measure_training_speed(make_net, make_data, "graph", steps=3)
    # one tick at train begin and one per step: times 0, 1, 2, 3
    assert result == {"mode": "graph", "steps": 3, "first_step_s": 1.0, "steps_per_s": 1.0,
                      "total_s": 3.0}
    assert modes == [ms.GRAPH_MODE] and ms.get_context("mode") == ms.PYNATIVE_MODE
    with pytest.raises(ValueError, match="Unknown mode 'eager'"):
        measure.measure_training_speed(make_net, make_data, "eager", steps=3)
    with pytest.raises(ValueError, match="gives only 8 batches; need 20"):
        measure.measure_training_speed(make_net, make_data, "graph", steps=20)


def test_step_timer_reports_first_and_mean_step():
    timer = measure.StepTimer()
    timer.times = [10.0, 14.0, 15.0, 17.0]          # compile step 4 s, then 1 s and 2 s
    assert timer.first_step_seconds == 4.0 and timer.mean_step_seconds == 1.5
    assert timer.steps_per_second() == pytest.approx(2 / 3)
    timer.times = [10.0, 14.0]
    assert timer.mean_step_seconds == 0.0
    with pytest.raises(ValueError, match="at least 2 timed steps"):
        timer.steps_per_second()



def test_step_timer_waits_for_the_step_outputs_before_noting_the_time(monkeypatch):
    """Under asynchronous dispatch a step's loss may still be queued when the callback runs:
    the timer reads it (which waits for it) before it takes the time."""
    events, clock = [], iter(range(100))

    class Pending(ms.Tensor):
        def asnumpy(self):
            events.append("waited")
            return super().asnumpy()

    monkeypatch.setattr(measure.time, "perf_counter", lambda: events.append("time") or next(clock))
    args = type("Args", (), {"net_outputs": (Pending(np.ones(1, np.float32)), 3)})()
    context = type("Context", (), {"original_args": lambda self: args})()
    timer = measure.StepTimer()
    timer.on_train_begin(context)
    timer.on_train_step_end(context)
    assert events == ["time", "waited", "time"] and timer.times == [0, 1]


class _FakeTrainer:
    """total_steps / step / train(steps) like LLMTrainer; each step costs ``cost`` fake seconds."""

    def __init__(self, name, cost, total, clock, calls):
        self.name, self.cost, self.total_steps, self.step = name, cost, total, 0
        self.clock, self.calls = clock, calls

    def train(self, steps):
        self.calls.append((self.name, steps))
        self.step += steps
        self.clock[0] += self.cost * steps


def test_alternate_train_steps_warms_up_then_alternates_rounds_reversed_every_other(monkeypatch):
    clock, calls = [0.0], []
    trainers = {"lora": _FakeTrainer("lora", 0.5, 7, clock, calls),
                "full": _FakeTrainer("full", 2.0, 9, clock, calls)}
    monkeypatch.setattr(measure.time, "perf_counter", lambda: clock[0])
    seconds = measure.alternate_train_steps(trainers, rounds=3, steps=2)
    assert seconds == {"lora": 0.5, "full": 2.0}
    assert calls == [("lora", 1), ("full", 1), ("lora", 2), ("full", 2), ("full", 2), ("lora", 2),
                     ("lora", 2), ("full", 2)]


def test_alternate_train_steps_refuses_a_schedule_too_short():
    clock, calls = [0.0], []
    trainers = {"lora": _FakeTrainer("lora", 1.0, 6, clock, calls),
                "full": _FakeTrainer("full", 1.0, 7, clock, calls)}
    with pytest.raises(ValueError, match=r"needs 7 scheduled steps left .*'lora': 6"):
        measure.alternate_train_steps(trainers, rounds=3, steps=2)
    with pytest.raises(ValueError, match="rounds must be an int >= 1"):
        measure.alternate_train_steps(trainers, rounds=0)
    assert calls == []
