"""Counting graph compilations and the dynamic-shape strategies (tiny model, short stream)."""
import numpy as np
import pytest
from mindspore import nn, ops

from course_lib import baichuan
from course_lib.baichuan import BaichuanForCausalLM
from course_lib.migration import compile_stats as cs, native_demo, step_modes
from course_lib.migration.demo_data import DemoConfig
from course_lib.pipelines import IGNORE_INDEX
from course_lib.runtime import execution_mode
from course_lib.training import EvalCell

CFG = baichuan.tiny(vocab_size=200, hidden_size=32, num_layers=1, num_heads=4,
                    intermediate_size=64, max_seq_len=64)
# The stream experiments use chapter 13's GPT (shape-dependent tensors built with device
# ops, so declared dynamic shapes work); the step-mode test uses the course's Baichuan.
GPT = DemoConfig(vocab_size=CFG.vocab_size, hidden=32, heads=4, layers=1, max_len=32)


class _Tiny(nn.Cell):
    def __init__(self):
        super().__init__()
        self.dense = nn.Dense(8, 8)

    def construct(self, x, y):
        return ops.relu(self.dense(x)).sum() + y.sum()


def _xy(T):
    from mindspore import Tensor
    return Tensor(np.ones((T, 8), np.float32)), Tensor(np.ones((T,), np.float32))


def test_counter_agrees_with_mindspores_ir_dump(tmp_path):
    """Two independent counts: our cache watcher and MindSpore's own IR files."""
    with execution_mode("graph"):
        net = _Tiny()

        def run():
            for T in (3, 5, 3, 7, 5):
                net(*_xy(T))

        with cs.CompileCounter() as counter:
            from_ir = cs.count_compiles_from_ir(run, tmp_path / "ir")
    assert counter.count == from_ir == 3          # one graph per distinct shape


def test_length_stream_and_padding():
    seqs = [list(range(1, n + 1)) for n in (3, 9, 5, 12, 7, 4)]
    batches = cs.length_stream(seqs, batch_size=2, n_batches=5, max_len=10, seed=0)
    for inputs, labels in batches:
        real = labels != IGNORE_INDEX
        assert inputs.shape == labels.shape and inputs.dtype == np.int32
        assert real[:, 0].all() and real.sum(1).max() == inputs.shape[1]   # longest row fills it
        assert inputs.shape[1] <= 10
        assert (inputs[~real] == 0).all()
    x, y = cs.pad_batch(*batches[0], 16)
    assert x.shape[1] == 16 and (y[:, batches[0][0].shape[1]:] == IGNORE_INDEX).all()
    assert cs.bucket_length(17, (16, 32)) == 32
    with pytest.raises(ValueError, match="exceeds the largest bucket 32"):
        cs.bucket_length(33, (16, 32))
    with pytest.raises(ValueError, match="Need at least batch_size=8"):
        cs.length_stream(seqs, batch_size=8, n_batches=1, max_len=10)


def _batch(rng, lengths):
    """One right-padded batch with rows of the given real lengths."""
    T = max(lengths)
    inputs = np.zeros((len(lengths), T), np.int32)
    labels = np.full((len(lengths), T), IGNORE_INDEX, np.int32)
    for row, n in enumerate(lengths):
        inputs[row, :n] = rng.integers(3, CFG.vocab_size, n)
        labels[row, :n] = rng.integers(3, CFG.vocab_size, n)
    return inputs, labels


ROUNDS = 2                       # replays of each strategy's stream, in turns (run_streams)


@pytest.fixture(scope="module")
def stream_results():
    rng = np.random.default_rng(1)
    # lengths 10, 20, 10, 30, 20: three distinct shapes, two buckets (16, 32)
    batches = [_batch(rng, rows) for rows in ([10, 4], [20, 7], [3, 10], [30, 12], [20, 20])]
    model = native_demo.build(GPT)
    return batches, cs.run_streams(lambda: EvalCell(model), batches, buckets=(16, 32), rounds=ROUNDS)


@pytest.mark.slow
def test_static_compiles_once_per_distinct_length(stream_results):
    batches, r = stream_results
    lengths = [b[0].shape[1] for b in batches]
    assert r["static"].compiles == len(set(lengths)) == 3
    first_seen = [lengths.index(T) == i for i, T in enumerate(lengths)]
    assert [bool(c.compiled) for c in r["static"].records] == first_seen
    assert r["static"].extra_compute == 0.0 and r["static"].padding_share > 0.0


@pytest.mark.slow
def test_bucketed_and_dynamic_compile_less(stream_results):
    batches, r = stream_results
    buckets_used = {cs.bucket_length(b[0].shape[1], (16, 32)) for b in batches}
    assert r["bucketed"].compiles == len(buckets_used)
    assert r["bucketed"].extra_compute > 0.0 and r["dynamic"].extra_compute == 0.0
    assert r["dynamic"].compiles == 1 and r["dynamic"].records[0].compiled == 1
    assert 1 <= r["auto"].compiles <= r["static"].compiles


@pytest.mark.slow
def test_the_steady_time_replays_the_same_calls_without_compiling(stream_results):
    """Each strategy's steady time is the median of its replays of every batch of the stream
    on the warm Cell: the same calls for every strategy (static's first pass compiled 3 of
    its 5, so a median over its non-compiling calls would cover only 2), and none compiles."""
    batches, r = stream_results
    for s, res in r.items():
        assert len(res.replay_seconds) == ROUNDS * len(batches) and res.replay_compiles == 0, s
        assert res.steady_seconds == float(np.median(res.replay_seconds)), s
    cold = cs.run_stream(lambda: EvalCell(native_demo.build(GPT)), batches[:2], "static",
                         replay=False)
    assert cold.replay_seconds == [] and np.isnan(cold.steady_seconds)


def test_run_streams_replays_the_strategies_in_turns_reversed_every_other_round(monkeypatch):
    """The order of the replays: every strategy once per round, the order reversed every
    other round (a change in load then falls on all of them); each stream's cold pass first."""
    order = []
    monkeypatch.setattr(cs, "run_stream", lambda make, batches, s, replay, **kw:
                        order.append(("cold", s)) or cs.StreamResult(s))
    monkeypatch.setattr(cs, "replay_once", lambda result: order.append(("replay", result.strategy)))
    results = cs.run_streams(None, [], ("a", "b", "c"), rounds=3)
    assert list(results) == ["a", "b", "c"]
    assert order == [("cold", "a"), ("cold", "b"), ("cold", "c"),
                     *[("replay", s) for s in "abc" + "cba" + "abc"]]
    with pytest.raises(ValueError, match="rounds must be a positive int"):
        cs.run_streams(None, [], rounds=0)


@pytest.mark.slow
def test_every_strategy_computes_the_same_losses(stream_results):
    _, r = stream_results
    for s in ("bucketed", "dynamic", "auto"):
        assert cs.same_outputs(r["static"], r[s]), s
    rows = cs.summary_table(r.values())
    assert [row["strategy"] for row in rows] == list(cs.STRATEGIES)


def test_unknown_strategy():
    with pytest.raises(ValueError, match="Unknown strategy 'jit'"):
        cs.run_stream(lambda: None, [], "jit")


@pytest.mark.slow
def test_three_step_modes_agree():
    rng = np.random.default_rng(3)
    batch = (rng.integers(0, CFG.vocab_size, (2, 16)).astype(np.int32),
             rng.integers(0, CFG.vocab_size, (2, 16)).astype(np.int32))
    batches = [batch] * 3                                    # same batch: loss must fall
    model = BaichuanForCausalLM(CFG)
    results = step_modes.compare_modes(lambda: step_modes.copy_model(model), batches, lr=1e-2)
    losses = {r.mode: r.losses for r in results}
    np.testing.assert_allclose(losses["jit"], losses["pynative"], rtol=1e-5)
    np.testing.assert_allclose(losses["graph"], losses["pynative"], rtol=1e-5)
    assert losses["graph"][-1] < losses["graph"][0]          # the updates are applied
    by_mode = {r.mode: r for r in results}
    assert by_mode["graph"].compiles == 1 and by_mode["jit"].compiles >= 1
    assert [row["mode"] for row in step_modes.ratio_table(results)] == list(step_modes.MODES)
    with pytest.raises(ValueError, match="Unknown mode 'eager'"):
        step_modes.run_mode("eager", lambda: model, batches)


def test_every_kind_builds_in_pynative_so_only_the_call_changes_mode(monkeypatch):
    """jit -> jit@graph must differ in the calling mode only: the model, optimizer and step are
    built in PyNative for every kind, and the steps run in the kind's mode."""
    import mindspore as ms
    built, called = {}, {}
    real_counter = step_modes.CompileCounter

    class Spy(real_counter):
        def __enter__(self):
            called[kind] = ms.get_context("mode")
            return super().__enter__()

    monkeypatch.setattr(step_modes, "CompileCounter", Spy)
    batch = (np.ones((1, 4), np.int32), np.ones((1, 4), np.int32))

    def fake_step(x, y):                          # the step itself does not matter here
        return ms.Tensor(0.0), None
    monkeypatch.setattr(step_modes, "train_step_function", lambda *a: fake_step)
    monkeypatch.setattr(step_modes, "jit_train_step", lambda *a: fake_step)
    monkeypatch.setattr("course_lib.training.TrainStep", lambda *a, **k: fake_step)
    monkeypatch.setattr("course_lib.training.LossCell", lambda m: m)
    for kind in step_modes.STEP_KINDS:
        def make_model():
            built[kind] = ms.get_context("mode")
            return _Tiny()
        step_modes.run_mode(kind, make_model, [batch])
    assert set(built.values()) == {ms.PYNATIVE_MODE}
    assert called == {"pynative": ms.PYNATIVE_MODE, "jit": ms.PYNATIVE_MODE,
                      "jit@graph": ms.GRAPH_MODE, "graph": ms.GRAPH_MODE}


def test_step_inputs_round_trip(tmp_path):
    """A fresh process rebuilds the same model (class, config, weights) and batches."""
    rng = np.random.default_rng(4)
    batches = [(rng.integers(0, CFG.vocab_size, (2, 8)).astype(np.int32),) * 2 for _ in range(2)]
    model = BaichuanForCausalLM(CFG)
    make_model, loaded = step_modes.load_inputs(step_modes.save_inputs(tmp_path / "in", model, batches))
    twin = make_model()
    assert type(twin) is type(model) and twin.config == model.config
    for (name, p), (_, q) in zip(model.parameters_and_names(), twin.parameters_and_names()):
        np.testing.assert_array_equal(p.asnumpy(), q.asnumpy(), err_msg=name)
    assert all(np.array_equal(a, b) for (a, _), (b, _) in zip(batches, loaded))


@pytest.mark.slow
def test_fresh_process_kinds_agree(tmp_path):
    """Each (kind, dispatch) in its own process: the same losses; the one-change ratios
    name the kinds they compare."""
    rng = np.random.default_rng(5)
    batch = (rng.integers(0, CFG.vocab_size, (2, 16)).astype(np.int32),
             rng.integers(0, CFG.vocab_size, (2, 16)).astype(np.int32))
    model = BaichuanForCausalLM(CFG)
    runs = step_modes.compare_in_fresh_processes(model, [batch] * 2, tmp_path, lr=1e-2,
                                                 timeout=600)
    assert [(r.mode, r.dispatch) for r in runs] == [(k, d) for d in step_modes.DISPATCHES
                                                    for k in step_modes.STEP_KINDS]
    for r in runs:
        np.testing.assert_allclose(r.losses, runs[0].losses, rtol=1e-5)
    assert [r["to"] for r in step_modes.one_change_ratios(runs)] == ["jit", "jit@graph"]
    assert set(step_modes.dispatch_ratios(runs)) == set(step_modes.STEP_KINDS)


def test_rounds_give_one_result_per_kind_with_every_steady_time(tmp_path, monkeypatch):
    """``rounds=3``: one result per (kind, dispatch); the runs take turns, their order
    reversed every other round (async first, then blocking first, then async first);
    its steady time is the median of the three processes' steady times, not the first's."""
    from course_lib import runtime
    calls = []
    times = iter([0.30, 0.10, 0.90, 0.20, 0.50, 0.70])      # two runs taking turns, 3 rounds

    def fake_run(func, **kw):
        calls.append((kw["mode"], kw["dispatch"]))
        t = next(times)
        return {"mode": kw["mode"], "losses": [1.0, 0.5], "seconds": [2.0, t, t], "compiles": 1}
    monkeypatch.setattr(runtime, "run_isolated", fake_run)
    batch = (np.zeros((1, 4), np.int32), np.zeros((1, 4), np.int32))
    runs = step_modes.compare_in_fresh_processes(BaichuanForCausalLM(CFG), [batch], tmp_path,
                                                 kinds=("graph",), rounds=3)
    a, b = ("graph", "async"), ("graph", "blocking")
    assert calls == [a, b, b, a, a, b]
    assert [(r.mode, r.dispatch) for r in runs] == [("graph", "async"), ("graph", "blocking")]
    assert runs[0].steady_runs == [0.30, 0.20, 0.50] and runs[0].steady_seconds == 0.30
    assert runs[1].steady_runs == [0.10, 0.90, 0.70] and runs[1].steady_seconds == 0.70
    assert runs[0].first_seconds == 2.0
    with pytest.raises(ValueError, match="rounds"):
        step_modes.compare_in_fresh_processes(BaichuanForCausalLM(CFG), [batch], tmp_path, rounds=0)


def test_graph_bias_equals_the_host_bias():
    """The bias built by graph operators has exactly the host-built numbers (causal mask,
    with and without ALiBi, with and without earlier positions)."""
    from course_lib import layers
    slopes = layers.alibi_slopes(4)
    for T, S in ((5, 5), (3, 8), (1, 6)):
        for s in (None, slopes):
            np.testing.assert_array_equal(cs.graph_attention_bias(T, S, None, s).asnumpy(),
                                          layers.attention_bias(T, S, None, s).asnumpy())


@pytest.mark.slow
def test_the_host_built_bias_is_what_stops_a_declared_dynamic_shape():
    """Chapter 14, section 2.1: the course's Baichuan cannot declare a dynamic length;
    the same model with only its attention bias built by graph operators can (one graph,
    the same losses as one graph per length)."""
    from course_lib import layers
    rng = np.random.default_rng(6)
    stream = [(rng.integers(0, CFG.vocab_size, (2, T)).astype(np.int32),
               rng.integers(0, CFG.vocab_size, (2, T)).astype(np.int32)) for T in (5, 7, 9)]
    model = BaichuanForCausalLM(CFG)
    static = cs.run_stream(lambda: EvalCell(model), stream, "static")
    with pytest.raises(AttributeError):
        cs.run_stream(lambda: EvalCell(model), stream, "dynamic")
    with cs.bias_from_graph_ops():
        dynamic = cs.run_stream(lambda: EvalCell(model), stream, "dynamic")
    assert layers.attention_bias is not cs.graph_attention_bias          # restored
    assert dynamic.compiles == 1 and cs.same_outputs(static, dynamic)


def test_python_scalars_are_graph_constants():
    """A Python float argument is baked into the graph: each new value recompiles;
    ms.mutable or a Tensor makes it a graph input."""
    import mindspore as ms
    from mindspore import Tensor

    class Scale(nn.Cell):
        def construct(self, x, t):
            return ops.softmax(x / t, -1)

    x = Tensor(np.ones((2, 5), np.float32))
    counts = []
    with execution_mode("graph"):
        for wrap in (float, ms.mutable, lambda t: Tensor(t, ms.float32)):
            net = Scale()
            with cs.CompileCounter() as counter:
                for t in (0.5, 0.7, 1.0, 0.7):
                    net(x, wrap(t))
            counts.append(counter.count)
    assert counts == [3, 1, 1]
