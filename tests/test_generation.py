"""course_lib.generation: logits processors vs Hugging Face's, batched left-padded
generation == one prompt at a time, KV cache on == off, EOS, seeds, dynamic batching."""
import numpy as np
import pytest
import torch
import mindspore as ms

from course_lib import baichuan, internlm
from course_lib.baichuan import BaichuanForCausalLM
from course_lib.generation import (apply_repetition_penalty, apply_top_k, apply_top_p,
                                   decode_step, generate, generate_text, left_pad, prefill)
from course_lib.internlm import InternLMForCausalLM

PROMPTS = [[11, 12, 13, 14, 15, 16, 17], [20, 21], [30, 31, 32, 33]]


@pytest.fixture(scope="module")
def alibi_model():
    import course_lib as cl
    cl.seed_everything(0)
    return BaichuanForCausalLM(baichuan.tiny(hidden_size=32, num_layers=2, num_heads=4))


@pytest.fixture(scope="module")
def rope_model():
    import course_lib as cl
    cl.seed_everything(0)
    return InternLMForCausalLM(internlm.tiny(hidden_size=32, num_layers=2, num_heads=4))


# ------------------------------------------------------------ processors vs transformers
def _scores(seed=0, shape=(3, 50)):
    return np.random.default_rng(seed).normal(0, 2, shape).astype(np.float32)


@pytest.mark.parametrize("k", [1, 5, 20])
def test_top_k_matches_hf(k):
    from transformers.generation.logits_process import TopKLogitsWarper
    s = _scores(k)
    ref = TopKLogitsWarper(k)(None, torch.from_numpy(s)).numpy()
    np.testing.assert_array_equal(apply_top_k(s, k), ref)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9, 0.99])
def test_top_p_matches_hf(p):
    from transformers.generation.logits_process import TopPLogitsWarper
    s = _scores(int(p * 100))
    ref = TopPLogitsWarper(p)(None, torch.from_numpy(s)).numpy()
    np.testing.assert_array_equal(np.isinf(apply_top_p(s, p)), np.isinf(ref))


def test_repetition_penalty_matches_hf():
    from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor
    s = _scores(7)
    ids = np.array([[1, 4, 4, 9], [0, 2, 3, 49], [5, 6, 7, 8]])
    seen = np.zeros_like(s, bool)
    for r, row in enumerate(ids):
        seen[r, row] = True
    ref = RepetitionPenaltyLogitsProcessor(1.3)(torch.from_numpy(ids), torch.from_numpy(s)).numpy()
    np.testing.assert_allclose(apply_repetition_penalty(s, seen, 1.3), ref, rtol=1e-6)


# ------------------------------------------------------------ batching and the cache
def test_left_pad_layout():
    ids, mask = left_pad([[1, 2, 3], [4]], pad_id=0)
    np.testing.assert_array_equal(ids, [[1, 2, 3], [0, 0, 4]])
    np.testing.assert_array_equal(mask, [[1, 1, 1], [0, 0, 1]])


@pytest.mark.parametrize("which", ["alibi", "rope"])
def test_padded_prefill_logits_equal_unpadded(which, alibi_model, rope_model):
    model = alibi_model if which == "alibi" else rope_model
    batched = prefill(model, PROMPTS).logits
    for i, p in enumerate(PROMPTS):
        np.testing.assert_allclose(batched[i], prefill(model, [p]).logits[0], atol=2e-5)


@pytest.mark.parametrize("which", ["alibi", "rope"])
def test_batched_greedy_equals_unbatched_and_cache_equals_no_cache(which, alibi_model, rope_model):
    model = alibi_model if which == "alibi" else rope_model
    batched = generate(model, PROMPTS, 6)
    alone = [generate(model, [p], 6)[0] for p in PROMPTS]
    no_cache = generate(model, PROMPTS, 6, use_cache=False)
    assert batched == alone == no_cache
    assert all(len(o) == 6 for o in batched)


def test_decode_steps_equal_full_recompute_after_rows_leave(alibi_model):
    # Dynamic batching: drop the middle row, keep decoding the others from the cache.
    cached = prefill(alibi_model, PROMPTS, use_cache=True)
    fresh = prefill(alibi_model, PROMPTS, use_cache=False)
    for state in (cached, fresh):
        decode_step(alibi_model, state, [100, 101, 102])
        state.select_rows([0, 2])
        decode_step(alibi_model, state, [103, 104])
    assert cached.rows == [0, 2]
    np.testing.assert_allclose(cached.logits, fresh.logits, atol=2e-5)
    alone = prefill(alibi_model, [PROMPTS[2] + [102, 104]]).logits[0]
    np.testing.assert_allclose(cached.logits[1], alone, atol=2e-5)


def test_eos_stops_a_row_and_is_returned(alibi_model):
    first = generate(alibi_model, PROMPTS, 5)
    eos = first[1][2]                    # the third token row 1 would produce
    out = generate(alibi_model, PROMPTS, 5, eos_id=eos)
    assert out[1] == first[1][:first[1].index(eos) + 1]
    for o, f in zip(out, first):         # every row stops at its first eos
        cut = f.index(eos) + 1 if eos in f else len(f)
        assert o == f[:cut]


def test_sampling_is_seeded_and_top_k_1_is_greedy(alibi_model):
    kw = dict(do_sample=True, temperature=0.9, top_k=40, top_p=0.95, repetition_penalty=1.1)
    a = generate(alibi_model, PROMPTS, 5, seed=3, **kw)
    assert a == generate(alibi_model, PROMPTS, 5, seed=3, **kw)
    assert a != generate(alibi_model, PROMPTS, 5, seed=4, **kw)
    assert generate(alibi_model, PROMPTS, 5, do_sample=True, top_k=1, seed=5) == \
        generate(alibi_model, PROMPTS, 5)


def _hf_greedy_with_penalty(model, prompt, n, penalty):
    """Reference: full forward each step + transformers' RepetitionPenaltyLogitsProcessor."""
    from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor
    process = RepetitionPenaltyLogitsProcessor(penalty)
    ids = list(prompt)
    for _ in range(n):
        logits = model(ms.Tensor([ids], ms.int32)).asnumpy()[:, -1]
        scores = process(torch.tensor([ids]), torch.from_numpy(logits))
        ids.append(int(scores.argmax(-1)))
    return ids[len(prompt):]


def test_repetition_penalty_matches_transformers_and_changes_greedy_output(alibi_model):
    plain = generate(alibi_model, [PROMPTS[0]], 12)[0]
    penal = generate(alibi_model, [PROMPTS[0]], 12, repetition_penalty=5.0)[0]
    assert penal == _hf_greedy_with_penalty(alibi_model, PROMPTS[0], 12, 5.0)
    assert plain == _hf_greedy_with_penalty(alibi_model, PROMPTS[0], 12, 1.0)
    assert penal != plain
    repeats = lambda seq: len(seq) - len(set(seq))  # noqa: E731
    assert repeats(penal) < repeats(plain)
    assert not set(penal) & set(PROMPTS[0])


def test_generate_text_roundtrip_and_restores_graph_mode(alibi_model, tokenizer):
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        texts = generate_text(alibi_model, tokenizer, ["人民日报", "经济"], max_new_tokens=4)
        assert ms.get_context("mode") == ms.GRAPH_MODE
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    assert texts[0].startswith("人民日报") and texts[1].startswith("经济")
    only = generate_text(alibi_model, tokenizer, "经济", max_new_tokens=4, include_prompt=False)
    assert texts[1] == "经济" + only[0]


def test_errors_say_what_to_do(alibi_model):
    with pytest.raises(ValueError, match="at least one token"):
        generate(alibi_model, [[1, 2], []], 3)
    with pytest.raises(ValueError, match="list of token-id lists"):
        generate(alibi_model, [1, 2, 3], 3)
    with pytest.raises(ValueError, match="temperature"):
        generate(alibi_model, PROMPTS, 3, do_sample=True, temperature=0)
    with pytest.raises(ValueError, match="top_p"):
        generate(alibi_model, PROMPTS, 3, top_p=1.5)
    with pytest.raises(ValueError, match="max_seq_len"):
        generate(alibi_model, PROMPTS, 10_000)


# ------------------------------------------------------------ the compiled engine (default)
@pytest.mark.parametrize("which", ["alibi", "rope"])
def test_engine_logits_equal_full_recompute(which, alibi_model, rope_model):
    """KV cache == recompute: after prefill and two steps, the engine's logits (cache of
    fixed slots, written in place) equal a no-cache forward of the whole sequence."""
    from course_lib.generation import compiled_prefill
    model = alibi_model if which == "alibi" else rope_model
    engine = compiled_prefill(model, PROMPTS, 64)
    fresh = prefill(model, PROMPTS, use_cache=False)
    np.testing.assert_allclose(engine.logits, fresh.logits, atol=2e-5)
    for tokens in ([100, 101, 102], [103, 104, 105]):
        decode_step(model, engine, tokens)
        decode_step(model, fresh, tokens)
        np.testing.assert_allclose(engine.logits, fresh.logits, atol=2e-5)


@pytest.mark.parametrize("which", ["alibi", "rope"])
def test_device_greedy_equals_host_step_by_step(which, alibi_model, rope_model):
    """The default greedy path (argmax on the device, ids fed back without the host) gives
    the ids of the step-by-step loop that brings every step's logits to the host."""
    from course_lib.generation import compiled_prefill, greedy_decode
    model = alibi_model if which == "alibi" else rope_model
    state = compiled_prefill(model, PROMPTS, 64)
    device = greedy_decode(model, state, np.argmax(state.logits, -1), 7).tolist()
    state = compiled_prefill(model, PROMPTS, 64)
    host = []
    for _ in range(8):
        host.append(np.argmax(state.logits, -1).tolist())
        decode_step(model, state, host[-1])
    assert device == np.asarray(host).T.tolist()


def test_engine_buffers_left_by_other_calls_change_nothing(alibi_model):
    """Engines (and their cache buffers) are reused across calls of the same batch size and
    bucket: what an earlier, longer generation left in the slots must not leak."""
    short = generate(alibi_model, [[5, 6]], 4)
    generate(alibi_model, [[7, 8, 9, 10, 11, 12, 13, 14]], 30)           # same bucket
    assert generate(alibi_model, [[5, 6]], 4) == short == \
        generate(alibi_model, [[5, 6]], 4, use_cache=False)


def test_greedy_with_penalty_or_eos_takes_the_same_engine(alibi_model):
    """Greedy + repetition penalty runs the host loop on the same compiled engine; greedy +
    EOS stops on the device path. Both agree with the cache-free recompute."""
    for kw in (dict(repetition_penalty=1.3), dict(eos_id=generate(alibi_model, PROMPTS, 3)[0][1])):
        assert generate(alibi_model, PROMPTS, 6, **kw) == generate(alibi_model, PROMPTS, 6,
                                                                   use_cache=False, **kw)


LONG_PROMPTS = [[40 + i for i in range(13)], [60 + i for i in range(9)], [80, 81, 82]]


@pytest.mark.parametrize("which", ["alibi", "rope"])
def test_whole_prompt_prefill_equals_recompute_and_columns(which, alibi_model, rope_model):
    """A prompt of >= PREFILL_MIN columns goes through the engine in ONE call (left-padded
    to 16 columns here): its logits, and those of the steps after it, equal a no-cache
    forward of the whole sequence and the column-by-column prefill."""
    from course_lib import generation
    from course_lib.generation import compiled_prefill
    model = alibi_model if which == "alibi" else rope_model
    block = compiled_prefill(model, LONG_PROMPTS, 64, width=16)
    assert block.input_ids.shape == (3, 16) and generation.PREFILL_MIN <= 13
    fresh = prefill(model, LONG_PROMPTS, use_cache=False)
    np.testing.assert_allclose(block.logits, fresh.logits, atol=2e-5)
    for tokens in ([100, 101, 102], [103, 104, 105]):
        decode_step(model, block, tokens)
        decode_step(model, fresh, tokens)
        np.testing.assert_allclose(block.logits, fresh.logits, atol=2e-5)
    assert generate(model, LONG_PROMPTS, 12) == generate(model, LONG_PROMPTS, 12, use_cache=False)


def test_engine_sees_weights_changed_between_calls():
    """The engine's folded weights are recomputed from the live parameters at every
    generation: change a layer's weights (as training or load_checkpoint would) and the
    next ``generate`` follows them (it equals the cache-free recompute, and it changed)."""
    import course_lib as cl
    cl.seed_everything(1)
    model = InternLMForCausalLM(internlm.tiny(hidden_size=32, num_layers=2, num_heads=4))
    before = generate(model, PROMPTS, 8)
    rng = np.random.default_rng(0)
    for p in model.trainable_params():
        if "layers.1" in p.name or "lm_head" in p.name or "norm" in p.name:
            p.set_data(ms.Tensor(rng.normal(0, 0.3, p.shape).astype(np.float32)))
    after = generate(model, PROMPTS, 8)
    assert after != before
    assert after == generate(model, PROMPTS, 8, use_cache=False)


def test_engine_applies_unmerged_lora_adapters():
    """A model with unmerged LoRA adapters (lora.LoRADense) decodes with W + B·A·alpha/r:
    same ids as the cache-free forward through the LoRA layers, and not those of the base."""
    import course_lib as cl
    from course_lib.lora import inject_lora, lora_layers
    cl.seed_everything(2)
    model = InternLMForCausalLM(internlm.tiny(hidden_size=32, num_layers=2, num_heads=4))
    base = generate(model, PROMPTS, 8)
    inject_lora(model, ["q_proj", "v_proj", "o_proj", "down_proj"], r=4, alpha=8)
    rng = np.random.default_rng(0)
    for layer in lora_layers(model).values():
        layer.lora_B.set_data(ms.Tensor(rng.normal(0, 0.5, layer.lora_B.shape).astype(np.float32)))
    with_lora = generate(model, PROMPTS, 8)
    assert with_lora != base
    assert with_lora == generate(model, PROMPTS, 8, use_cache=False)


@pytest.mark.parametrize("which", ["alibi", "rope"])
def test_in_place_cache_write_equals_recompute(which, alibi_model, rope_model, monkeypatch):
    """Large caches are written with ScatterNdAdd into zeroed slots (no copy of the buffer):
    forced here for the tiny models, the engine's logits after prefill and steps, a
    whole-prompt prefill and a generation after a longer one (stale slots) all equal the
    cache-free recompute. Fails if a slot is added into twice or not cleared."""
    from course_lib import engine
    from course_lib.generation import compiled_prefill
    model = alibi_model if which == "alibi" else rope_model
    monkeypatch.setattr(engine, "ADD_IN_PLACE_BYTES", 0)
    model.__dict__.pop("_decode_engines", None)           # engines built with the add
    try:
        state = compiled_prefill(model, PROMPTS, 64)
        assert state.cache.engine.add_in_place
        fresh = prefill(model, PROMPTS, use_cache=False)
        for tokens in ([100, 101, 102], [103, 104, 105]):
            decode_step(model, state, tokens)
            decode_step(model, fresh, tokens)
            np.testing.assert_allclose(state.logits, fresh.logits, atol=2e-5)
        generate(model, [[7, 8, 9, 10, 11, 12, 13, 14]], 30)            # leaves slots full
        for prompts in ([[5, 6]], LONG_PROMPTS, PROMPTS):
            assert generate(model, prompts, 12) == generate(model, prompts, 12, use_cache=False)
    finally:
        model.__dict__.pop("_decode_engines", None)


def test_folded_weights_follow_in_place_updates():
    """The folded engine refolds only when ``folded.fingerprint`` changed: an optimizer-like
    in-place update inside a compiled graph (no ``set_data``) must be seen — the next
    ``generate`` equals the cache-free recompute and differs from before — and so must a
    change of ONE element of one matrix (the fingerprint differs)."""
    import course_lib as cl
    from course_lib import folded
    from course_lib.runtime import execution_mode

    class Update(ms.nn.Cell):
        def __init__(self, param, value):
            super().__init__()
            self.param, self.value = param, ms.Tensor(value)

        def construct(self):
            return ms.ops.assign(self.param, self.value)

    cl.seed_everything(3)
    model = InternLMForCausalLM(internlm.tiny(hidden_size=32, num_layers=2, num_heads=4))
    before = generate(model, PROMPTS, 8, engine="folded")
    weights = model.__dict__["_decode_weights"]
    stamp = weights.folded_from.copy()
    param = model.model.layers[1].self_attn.o_proj.weight
    rng = np.random.default_rng(0)
    with execution_mode("graph"):
        Update(param, rng.normal(0, 0.5, param.shape).astype(np.float32))()
    after = generate(model, PROMPTS, 8, engine="folded")
    assert after != before and after == generate(model, PROMPTS, 8, use_cache=False)
    one = param.asnumpy().copy()
    one[3, 5] += 1e-3
    with execution_mode("graph"):
        Update(param, one)()
    assert not np.array_equal(folded.fingerprint(model), weights.folded_from)
    assert not np.array_equal(stamp, weights.folded_from)


def test_graph_repeater_runs_the_same_graph_and_refuses_other_shapes():
    """``runtime.graph_repeater``: later calls run the compiled graph on new inputs and give
    what calling the Cell gives; inputs of other shapes are refused; in PyNative mode it
    is the Cell itself."""
    from course_lib.runtime import execution_mode, graph_repeater

    class Affine(ms.nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = ms.Parameter(ms.Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)))

        def construct(self, x, shift):
            return ms.ops.matmul(x, self.w) + shift

    cell, rng = Affine(), np.random.default_rng(0)
    inputs = [(ms.Tensor(rng.normal(size=(2, 3)).astype(np.float32)),
               ms.Tensor(rng.normal(size=(2, 4)).astype(np.float32))) for _ in range(3)]
    with execution_mode("graph"):
        first, again = graph_repeater(cell, *inputs[0])
        assert again is not cell
        for x, shift in inputs[1:]:
            np.testing.assert_array_equal(again(x, shift).asnumpy(), cell(x, shift).asnumpy())
            np.testing.assert_allclose(again(x, shift).asnumpy(),
                                       x.asnumpy() @ cell.w.asnumpy() + shift.asnumpy(), rtol=1e-6)
        with pytest.raises(ValueError, match="differ from the compiled graph"):
            again(ms.Tensor(np.ones((5, 3), np.float32)), inputs[0][1])
    with execution_mode("pynative"):
        assert graph_repeater(cell, *inputs[0])[1] is cell
