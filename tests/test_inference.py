"""course_lib.inference: dynamic batching gives exactly the tokens of one-at-a-time
generation (greedy and seeded sampling, ALiBi and RoPE models, rows joining and leaving
mid-flight), and the static-shape decode step — eager or graph-compiled — agrees too."""
import numpy as np
import pytest

from course_lib import baichuan, internlm
from course_lib import experiments as exp
from course_lib import inference as inf
from course_lib.baichuan import BaichuanForCausalLM
from course_lib.generation import decode_step, engine_kind, generate, prefill
from course_lib.internlm import InternLMForCausalLM

PROMPTS = [[11, 12, 13, 14, 15, 16, 17], [20, 21], [30, 31, 32, 33], [40],
           [50, 51, 52, 53, 54, 55, 56, 57, 58]]
BUDGETS = [4, 2, 5, 3, 3]
ARRIVALS = [0.0, 0.0, 0.02, 0.05, 0.05]


@pytest.fixture(scope="module")
def models():
    import course_lib as cl
    cl.seed_everything(0)
    alibi = BaichuanForCausalLM(baichuan.tiny(hidden_size=32, num_layers=2, num_heads=4))
    rope = InternLMForCausalLM(internlm.tiny(hidden_size=32, num_layers=2, num_heads=4))
    return {"alibi": alibi, "rope": rope}


def alone(model, **kw):
    return [generate(model, [p], b, **kw)[0] for p, b in zip(PROMPTS, BUDGETS)]


def test_merge_states_rows_continue_as_if_alone(models):
    model = models["alibi"]
    running = prefill(model, PROMPTS[:2])
    decode_step(model, running, [100, 101])
    joining = prefill(model, PROMPTS[2:4])
    merged = inf.merge_states(running, joining)
    assert merged.rows == [0, 1, 0, 1] and merged.input_ids.shape[0] == 4
    assert merged.cache.seq_len == merged.attention_mask.shape[1]
    decode_step(model, merged, [102, 103, 104, 105])
    expected = [PROMPTS[0] + [100, 102], PROMPTS[1] + [101, 103],
                PROMPTS[2] + [104], PROMPTS[3] + [105]]
    for i, seq in enumerate(expected):
        np.testing.assert_allclose(merged.logits[i], prefill(model, [seq]).logits[0], atol=2e-5)


@pytest.mark.parametrize("which", ["alibi", "rope"])
def test_dynamic_batching_equals_one_at_a_time_greedy(which, models):
    model = models[which]
    eos = generate(model, [PROMPTS[2]], 2)[0][1]     # request 2 stops early, at its 2nd token
    reference = alone(model, eos_id=eos)
    assert len(reference[2]) == 2
    # All arrive at once: 3 start, requests 3 and 4 join as soon as rows leave (EOS/budget).
    requests = inf.make_requests(PROMPTS, BUDGETS)
    report = inf.serve(model, requests, max_batch=3, eos_id=eos)
    assert [report.tokens_by_id()[i] for i in range(5)] == reference
    assert report.passes[0] == ("prefill", 3) and max(report.batch_sizes) == 3
    assert any(kind == "prefill" for kind, _ in report.passes[1:])   # joining mid-flight
    assert len(report.pass_seconds) == len(report.passes) and min(report.pass_seconds) > 0
    assert len(report.decode_seconds) == len(report.batch_sizes) and sum(report.pass_seconds) < report.seconds


def test_max_batch_one_is_one_pass_per_token(models):
    model = models["alibi"]
    requests = inf.make_requests(PROMPTS[:3], BUDGETS[:3])
    one = inf.serve(model, requests, max_batch=1)
    assert set(one.batch_sizes) == {1}
    assert len(one.passes) == sum(BUDGETS[:3])       # 1 prefill + (budget - 1) steps each
    assert [one.tokens_by_id()[i] for i in range(3)] == alone(model)[:3]


def test_dynamic_batching_sampling_is_per_request_seeded(models):
    model = models["rope"]
    kw = dict(do_sample=True, temperature=0.8, top_k=20, top_p=0.9, repetition_penalty=1.2)
    requests = inf.make_requests(PROMPTS[:3], BUDGETS[:3], ARRIVALS[:3])
    report = inf.serve(model, requests, max_batch=2, seed=7, **kw)
    expected = [generate(model, [p], b, seed=7 + i, **kw)[0]
                for i, (p, b) in enumerate(zip(PROMPTS[:3], BUDGETS[:3]))]
    assert [report.tokens_by_id()[i] for i in range(3)] == expected


def test_report_timing_is_consistent(models):
    report = inf.serve(models["alibi"], inf.make_requests(PROMPTS[:3], BUDGETS[:3], ARRIVALS[:3]), 2)
    assert report.tokens == sum(BUDGETS[:3])
    assert report.throughput == pytest.approx(report.tokens / report.seconds)
    for c in report.completions:
        assert c.request.arrival <= c.first_token_at <= c.finished_at
        assert c.latency >= c.time_to_first_token >= 0
    assert "tokens/s" in str(report)


def test_arrival_helpers():
    times = inf.poisson_arrivals(200, rate=10, seed=0)
    assert times[0] == 0 and all(b >= a for a, b in zip(times, times[1:]))
    assert 200 / times[-1] == pytest.approx(10, rel=0.25)
    reqs = inf.make_requests([[1, 2], [3]], [4, 5], [0.0, 1.0])
    assert [(r.id, r.prompt_ids, r.max_new_tokens, r.arrival) for r in reqs] == \
        [(0, (1, 2), 4, 0.0), (1, (3,), 5, 1.0)]


def test_clear_errors(models):
    model = models["alibi"]
    with pytest.raises(ValueError, match="empty prompt"):
        inf.Request(0, (), 4)
    with pytest.raises(ValueError, match="max_batch must be >= 1"):
        inf.serve(model, inf.make_requests([[1]], 2), max_batch=0)
    with pytest.raises(ValueError, match="unique"):
        inf.serve(model, [inf.Request(1, (1,), 2), inf.Request(1, (2,), 2)])
    with pytest.raises(ValueError, match="exceeds max_seq_len"):
        inf.serve(model, inf.make_requests([[1] * 10], 10_000))
    with pytest.raises(ValueError, match="2 prompts but 3 budgets"):
        inf.make_requests([[1], [2]], [1, 2, 3])
    with pytest.raises(ValueError, match="rate must be > 0"):
        inf.poisson_arrivals(3, 0)


@pytest.mark.parametrize("which", ["alibi", "rope"])
@pytest.mark.parametrize("mode", ["pynative", "graph"])
def test_static_decode_step_gives_the_same_tokens(which, mode, models):
    model = models[which]
    expected = generate(model, PROMPTS, 5)
    run = exp.static_generate(model, PROMPTS, 5, mode=mode)
    assert run.tokens == expected
    assert run.mode == mode and len(run.step_seconds) == 3 and run.compile_seconds > 0


@pytest.mark.parametrize("engine", ["layers", "folded"])
def test_static_generate_runs_the_engine_it_is_given(engine, models):
    model = models["rope"]
    run = exp.static_generate(model, PROMPTS, 4, mode="graph", engine=engine)
    assert run.engine == engine
    assert run.tokens == generate(model, PROMPTS, 4)
    assert exp.static_generate(model, PROMPTS, 3, mode="pynative").engine == \
        engine_kind(model)


def test_static_decode_stops_rows_at_eos(models):
    model = models["alibi"]
    eos = generate(model, [PROMPTS[0]], 3)[0][2]
    assert exp.static_generate(model, PROMPTS, 4, mode="pynative", eos_id=eos).tokens == \
        generate(model, PROMPTS, 4, eos_id=eos)


def test_static_generate_errors(models):
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        exp.static_generate(models["alibi"], PROMPTS, 0)
    with pytest.raises(ValueError, match="exceeds max_seq_len"):
        exp.static_generate(models["alibi"], PROMPTS, 10_000)


@pytest.mark.slow
def test_dispatch_timing_runs_in_a_fresh_process():
    import mindspore as ms
    ms_before = ms.get_context("mode")
    value = exp.pynative_dispatch_ms(blocking=True, steps=2, batch=2)
    assert value > 0
    assert ms.get_context("mode") == ms_before        # nothing changed in this process
