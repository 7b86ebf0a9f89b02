"""The PyTorch demo on three backends: real torch (reference), mindtorch (own process),
native MindSpore translation. Small random batches keep it fast."""
import numpy as np
import pytest

from course_lib.migration import native_demo, run_torch_demo as rtd
from course_lib.migration.demo_data import DemoConfig, initial_weights

CFG = DemoConfig(vocab_size=300, hidden=32, heads=4, layers=1, max_len=16, batch_size=4)
LR = 0.3


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    rng = np.random.default_rng(0)
    row = rng.integers(0, CFG.vocab_size, (CFG.batch_size, CFG.max_len + 1))
    batches = [(row[:, :-1], row[:, 1:])] * 3        # one batch three times: loss must fall
    path = tmp_path_factory.mktemp("demo") / "inputs.npz"
    rtd.prepare_inputs(path, CFG, batches=batches)
    return path


@pytest.fixture(scope="module")
def torch_result(inputs):
    cfg, weights, batches = rtd.load_inputs(inputs)
    return rtd.measure_torch_api("torch", cfg, weights, batches, LR)


def test_inputs_round_trip(inputs):
    cfg, weights, batches = rtd.load_inputs(inputs)
    assert cfg == CFG and len(batches) == 3
    ref = initial_weights(CFG)
    assert weights.keys() == ref.keys() and all(np.array_equal(weights[k], ref[k]) for k in ref)


def test_real_torch_trains_and_every_probe_works(torch_result):
    r = torch_result
    assert "mindtorch" not in r["torch_file"]
    assert r["backward_grads"] == r["num_params"]
    assert r["textbook_error"] is None and r["textbook_weights_changed"] > 0
    assert r["AdamW_step"].startswith("ok") and r["SGD_step"].startswith("ok")
    assert r["sgd_losses"] == r["train_losses"][:2]


def test_native_mindspore_translation_matches_torch(inputs, torch_result):
    cfg, weights, batches = rtd.load_inputs(inputs)
    ms_result = rtd.measure_mindspore(cfg, weights, batches, LR)
    diffs = rtd.compare({"torch": torch_result, "mindspore": ms_result})["mindspore"]
    assert diffs["logits_max_diff"] < 1e-5
    assert diffs["loss_max_diff"] < 1e-4
    assert ms_result["train_losses"][-1] < ms_result["train_losses"][0]   # it learns


@pytest.mark.slow
def test_mindtorch_in_own_process(inputs, torch_result):
    """Pins today's measured behaviour of mindtorch (mindnlp 0.5.1) on CPU; if a new
    version changes it, the notebook's prose must be revisited."""
    r = rtd.run_demo("mindtorch", inputs, LR, timeout=600)
    assert "mindtorch" in r["torch_file"]
    diffs = rtd.compare({"torch": torch_result, "mindtorch": r})["mindtorch"]
    assert diffs["logits_max_diff"] < 1e-5          # forward: same numbers as PyTorch
    assert diffs["loss_max_diff"] < 1e-4            # workaround loop: same training
    assert r["backward_grads"] == 0                 # loss.backward() leaves every .grad None
    assert r["textbook_error"] and r["textbook_weights_changed"] == 0.0
    assert "zero_grad" in r["textbook_error"]       # fails before backward() and step()
    assert "NoneType" in r["sgd_error"]
    assert "addcdiv" in r["AdamW_step"]             # AdamW.step with real grads fails on CPU


def test_load_torch_named_is_strict():
    weights = initial_weights(CFG)
    model = native_demo.build(CFG)
    native_demo.load_torch_named(model, weights)  # complete: fine
    with pytest.raises(KeyError, match="not set from the weights.*ln_f.gamma"):
        native_demo.load_torch_named(model, {k: v for k, v in weights.items() if k != "ln_f.weight"})
    bad = dict(weights, **{"head.weight": weights["head.weight"][:, :8]})
    with pytest.raises(ValueError, match="head.weight: shape"):
        native_demo.load_torch_named(model, bad)
    with pytest.raises(KeyError, match="not a parameter"):
        native_demo.load_torch_named(model, dict(weights, **{"extra.weight": weights["ln_f.weight"]}))


def test_unknown_backend_is_a_clear_error(inputs):
    with pytest.raises(ValueError, match="Unknown backend 'jax'"):
        rtd.run_demo("jax", inputs)


def test_speed_rounds_alternate_and_keep_every_round(monkeypatch):
    """``compare_speed(rounds=3)``: every run once per round, the order reversed every other
    round; one result per run carrying all three rounds, whose medians ``rounds_ms`` reads
    (first step left out)."""
    calls, ms = [], iter([10, 20, 30, 40, 50, 60])

    def fake_run(func, backend, blocking, **kw):
        calls.append((backend, blocking))
        t = next(ms) / 1000
        return {"backend": backend, "blocking": blocking, "losses": [1.0],
                "step_seconds": [9.0, t, t], "phase_seconds": {"gradients": [9.0, t / 2, t / 2]}}

    monkeypatch.setattr(rtd, "run_isolated", fake_run)
    runs = (("mindspore", True), ("mindtorch", True))
    out = rtd.compare_speed("unused.npz", runs=runs, rounds=3)
    assert calls == [runs[0], runs[1], runs[1], runs[0], runs[0], runs[1]]
    assert [(r["backend"], r["blocking"]) for r in out] == list(runs)
    assert [len(r["rounds"]) for r in out] == [3, 3]
    assert rtd.rounds_ms(out[0]) == pytest.approx([10, 40, 50])
    assert rtd.rounds_ms(out[1]) == pytest.approx([20, 30, 60])
    assert rtd.rounds_ms(out[1], "gradients") == pytest.approx([10, 15, 30])
