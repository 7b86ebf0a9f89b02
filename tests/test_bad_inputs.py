"""Bad and edge inputs over the API a learner touches: each must raise the named exception
with a message that says what is wrong (a key phrase is asserted), or be handled
correctly. Rows marked ``was="silent"`` used to return a WRONG result without complaint;
``was="vague"`` rows used to fail deep inside MindSpore without saying what to do.

``test_case_counts`` prints how many bad inputs each entry point is tried with.
"""
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from mindspore import Tensor

import course_lib as cl
from course_lib import data, export, generation, lora, pipelines, runtime, training, zoo
from course_lib.callbacks import CheckpointSaver, restore_checkpoint
from course_lib.internlm import InternLMForCausalLM, tiny
from course_lib.tokenizer import load_tokenizer, train_tokenizer
from course_lib.trainer import LLMTrainer

V = 64   # vocabulary of the test model


def small_cfg(**changes):
    return tiny(vocab_size=V, hidden_size=16, intermediate_size=32, num_heads=2,
                max_seq_len=32, **changes)


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bad")
    cl.seed_everything(0)
    model = InternLMForCausalLM(small_cfg())
    blocks = np.random.default_rng(0).integers(0, V, (8, 9)).astype(np.int32)
    bad_labels = blocks.copy()
    bad_labels[:, 3] = -1
    corrupt = tmp / "corrupt.bin"
    corrupt.write_bytes(b"\x00\x01 not a real file")
    cl.seed_everything(1)
    adapter_model = InternLMForCausalLM(small_cfg())
    lora.inject_lora(adapter_model, ["q_proj"], r=2)
    for layer in lora.lora_layers(adapter_model).values():   # a trained (non-zero) adapter
        layer.lora_B.set_data(Tensor(np.full(layer.lora_B.shape, 0.1, np.float32)))
    adapter = lora.save_adapter(adapter_model, tmp / "adapter.safetensors")
    return SimpleNamespace(
        tmp=tmp, model=model, tok=load_tokenizer(), corrupt=corrupt, adapter=adapter,
        data=lambda b=blocks: pipelines.make_dataset(pipelines.BlockSource(b), 4, shuffle=False),
        bad_label_data=lambda: pipelines.make_dataset(
            pipelines.PairSource(blocks[:, :-1], bad_labels[:, 1:]), 4, shuffle=False),
        ids=lambda *row: Tensor(np.asarray([row], np.int32)))


def _trainer(c, **kw):
    return LLMTrainer(c.model, kw.pop("train", None) or c.data(), mode="pynative", **kw)


def _file_as_cache(c, monkeypatch):
    monkeypatch.setenv("COURSE_CACHE_DIR", str(c.corrupt))
    return runtime.cache_dir("corpora")


def _unmerge_unmerged(c):
    cl.seed_everything(1)   # the very base the adapter was trained on, never merged
    return lora.unmerge_lora(InternLMForCausalLM(small_cfg()), c.adapter)


def _case(name, call, exc, phrase, was="clear"):
    return pytest.param(call, exc, phrase, was, id=name)


# (name, call(ctx, monkeypatch), exception, key phrase of the message, before the fix)
CASES = [
    # --- setup / runtime
    _case("setup seed str", lambda c, m: cl.setup(mode="graph", seed="42"), TypeError,
          "seed must be a non-negative int", "vague"),
    _case("setup seed negative", lambda c, m: cl.setup(seed=-1), TypeError, "non-negative int", "vague"),
    _case("setup seed float", lambda c, m: cl.setup(seed=1.5), TypeError, "non-negative int", "vague"),
    _case("setup seed bool", lambda c, m: cl.setup(seed=True), TypeError, "non-negative int", "vague"),
    _case("setup mode", lambda c, m: cl.setup(mode="eager"), ValueError, "Unknown mode"),
    _case("setup device name", lambda c, m: cl.setup(device="TPU"), ValueError,
          "Unknown device 'TPU'"),
    _case("setup device absent", lambda c, m: cl.setup(device="Ascend"), RuntimeError,
          "only supports"),
    _case("setup device type", lambda c, m: cl.setup(device=0), TypeError,
          "device must be a str", "silent"),
    _case("setup quiet", lambda c, m: cl.setup(quiet="yes"), TypeError, "quiet must be True", "silent"),
    _case("COURSE_CACHE_DIR is a file", _file_as_cache, NotADirectoryError,
          "Point COURSE_CACHE_DIR at a directory", "vague"),
    # --- data
    _case("split empty", lambda c, m: data.split([]), ValueError, "empty"),
    _case("split fractions", lambda c, m: data.split([1, 2, 3], (0.5, 0.2, 0.2)), ValueError,
          "summing to 1"),
    _case("pack block 0", lambda c, m: pipelines.pack_blocks([[1, 2]], 0), ValueError,
          "block_size must be >= 1"),
    _case("pack too short", lambda c, m: pipelines.pack_blocks([[1, 2]], 8), ValueError,
          "not enough for one block"),
    _case("dataset smaller than a batch",
          lambda c, m: pipelines.make_dataset(pipelines.BlockSource(np.ones((3, 5))), 8),
          ValueError, "fewer than one batch"),
    _case("batch size 0",
          lambda c, m: pipelines.make_dataset(pipelines.BlockSource(np.ones((3, 5))), 0),
          ValueError, "batch_size must be >= 1"),
    _case("empty blocks", lambda c, m: pipelines.BlockSource(np.zeros((0, 5))), ValueError,
          "empty"),
    _case("pair shapes", lambda c, m: pipelines.PairSource(np.ones((2, 3)), np.ones((2, 4))),
          ValueError, "must be equal 2-D shapes"),
    # --- tokenizer
    _case("encode int", lambda c, m: c.tok.encode(123), TypeError, "takes a str"),
    _case("encode_batch str", lambda c, m: c.tok.encode_batch("人民日报"), TypeError,
          "takes a list of str", "silent"),
    _case("encode_batch mixed", lambda c, m: c.tok.encode_batch(["人民", 1]), TypeError,
          "found int", "vague"),
    _case("decode float", lambda c, m: c.tok.decode([100.9]), TypeError,
          "integer token ids", "silent"),
    _case("decode float array", lambda c, m: c.tok.decode(np.array([1.0, 2.5])), TypeError,
          "integer token ids", "silent"),
    _case("decode negative", lambda c, m: c.tok.decode([-1]), ValueError,
          "outside the vocabulary"),
    _case("decode too large", lambda c, m: c.tok.decode([8000]), ValueError,
          "outside the vocabulary"),
    _case("decode str", lambda c, m: c.tok.decode("abc"), TypeError, "list of int", "vague"),
    _case("tokenizer missing", lambda c, m: load_tokenizer(c.tmp / "none.json"),
          FileNotFoundError, "No tokenizer file"),
    _case("tokenizer corrupt", lambda c, m: load_tokenizer(c.corrupt), ValueError,
          "corrupt.bin", "vague"),
    _case("tokenizer vocab tiny", lambda c, m: train_tokenizer(["abc"], vocab_size=10),
          ValueError, "at least"),
    _case("tokenizer empty text", lambda c, m: train_tokenizer(["", ""]), ValueError,
          "empty text"),
    # --- configs
    _case("rope_base 0", lambda c, m: small_cfg(rope_base=0), ValueError,
          "rope_base must be a finite number > 0", "silent"),
    _case("rope_base negative", lambda c, m: small_cfg(rope_base=-1.0), ValueError,
          "rope_base", "silent"),
    _case("rope_base nan", lambda c, m: small_cfg(rope_base=float("nan")), ValueError,
          "rope_base", "silent"),
    _case("rms_norm_eps -1", lambda c, m: small_cfg(rms_norm_eps=-1), ValueError,
          "rms_norm_eps must be a finite number > 0", "silent"),
    _case("rms_norm_eps 0", lambda c, m: small_cfg(rms_norm_eps=0.0), ValueError,
          "rms_norm_eps", "silent"),
    _case("init_std negative", lambda c, m: small_cfg(init_std=-0.1), ValueError, "init_std", "vague"),
    _case("heads do not divide", lambda c, m: tiny(hidden_size=30, num_heads=4), ValueError,
          "not divisible"),
    _case("zero layers", lambda c, m: tiny(num_layers=0), ValueError, "positive int"),
    _case("unknown position", lambda c, m: tiny(position="sinus"), ValueError,
          "Unknown position"),
    _case("unknown field", lambda c, m: small_cfg().replace(hidden=3), TypeError,
          "Unknown config field"),
    # --- model calls (PyNative)
    _case("ids -1", lambda c, m: c.model(c.ids(1, -1)), ValueError, "negative id", "silent"),
    _case("ids -100", lambda c, m: c.model(c.ids(-100, 2)), ValueError,
          "only allowed in labels", "silent"),
    _case("ids >= vocab", lambda c, m: c.model(c.ids(1, V)), ValueError,
          "tokenizer and the model's vocab_size differ", "vague"),
    _case("ids float", lambda c, m: c.model(Tensor(np.array([[1.0, 2.0]], np.float32))),
          TypeError, "must be integers", "vague"),
    _case("ids list", lambda c, m: c.model([[1, 2]]), TypeError, "must be a mindspore Tensor",
          "vague"),
    _case("ids numpy", lambda c, m: c.model(np.array([[1, 2]], np.int32)), TypeError,
          "must be a mindspore Tensor", "vague"),
    # --- loss
    _case("label -1", lambda c, m: training.causal_lm_loss(
        Tensor(np.zeros((1, 2, V), np.float32)), c.ids(1, -1)), ValueError, "exactly -100",
        "silent"),
    _case("label >= vocab", lambda c, m: training.causal_lm_loss(
        Tensor(np.zeros((1, 2, V), np.float32)), c.ids(1, V)), ValueError, "labels contain 64", "vague"),
    _case("label float", lambda c, m: training.causal_lm_loss(
        Tensor(np.zeros((1, 2, V), np.float32)), Tensor(np.ones((1, 2), np.float32))),
        TypeError, "must be integers", "vague"),
    _case("logits 2-D", lambda c, m: training.causal_lm_loss(
        Tensor(np.zeros((2, V), np.float32)), c.ids(1, 2)), ValueError, "must be 3-D"),
    _case("labels shape", lambda c, m: training.causal_lm_loss(
        Tensor(np.zeros((1, 3, V), np.float32)), c.ids(1, 2)), ValueError,
        "labels must have shape"),
    # --- generation
    _case("prompt negative", lambda c, m: generation.generate(c.model, [[1, -1]], 2),
          ValueError, "negative id", "silent"),
    _case("prompt >= vocab", lambda c, m: generation.generate(c.model, [[1, V]], 2),
          ValueError, "vocab_size differ", "vague"),
    _case("prompt floats", lambda c, m: generation.generate(c.model, [[1.5, 2.0]], 2),
          TypeError, "must be integers", "silent"),
    _case("prompt Tensor", lambda c, m: generation.generate(c.model, c.ids(1, 2), 2),
          TypeError, "got a Tensor", "vague"),
    _case("no prompts", lambda c, m: generation.generate(c.model, [], 2), ValueError,
          "non-empty list"),
    _case("empty prompt", lambda c, m: generation.generate(c.model, [[]], 2), ValueError,
          "at least one token"),
    _case("temperature 0 greedy", lambda c, m: generation.generate(
        c.model, [[1]], 2, temperature=0), ValueError, "greedy decoding ignores temperature",
        "vague"),
    _case("temperature 0 sampling", lambda c, m: generation.generate(
        c.model, [[1]], 2, temperature=0, do_sample=True), ValueError, "temperature must be > 0"),
    _case("do_sample str", lambda c, m: generation.generate(c.model, [[1]], 2, do_sample="no"),
          TypeError, "do_sample must be True or False", "silent"),
    _case("top_p 0", lambda c, m: generation.generate(c.model, [[1]], 2, top_p=0), ValueError,
          "top_p"),
    _case("top_k -1", lambda c, m: generation.generate(c.model, [[1]], 2, top_k=-1), ValueError,
          "top_k"),
    _case("penalty 0", lambda c, m: generation.generate(c.model, [[1]], 2,
                                                        repetition_penalty=0), ValueError,
          "repetition_penalty"),
    _case("max_new_tokens -1", lambda c, m: generation.generate(c.model, [[1]], -1), ValueError,
          "max_new_tokens"),
    _case("too long", lambda c, m: generation.generate(c.model, [[1] * 30], 10), ValueError,
          "max_seq_len"),
    # --- LoRA
    _case("lora target none", lambda c, m: lora.inject_lora(
        InternLMForCausalLM(small_cfg()), ["nope"]), ValueError, "matches no nn.Dense"),
    _case("lora targets empty", lambda c, m: lora.inject_lora(
        InternLMForCausalLM(small_cfg()), []), ValueError, "targets is empty"),
    _case("lora r 0", lambda c, m: lora.inject_lora(
        InternLMForCausalLM(small_cfg()), ["q_proj"], r=0), ValueError, "r must be >= 1"),
    _case("lora r float", lambda c, m: lora.inject_lora(
        InternLMForCausalLM(small_cfg()), ["q_proj"], r=1.5), TypeError, "must be an int"),
    _case("lora alpha 0", lambda c, m: lora.inject_lora(
        InternLMForCausalLM(small_cfg()), ["q_proj"], r=2, alpha=0), ValueError, "alpha"),
    _case("merge without lora", lambda c, m: lora.merge_lora(InternLMForCausalLM(small_cfg())),
          ValueError, "nothing to merge"),
    _case("unmerge never merged", lambda c, m: _unmerge_unmerged(c), ValueError,
          "never merged", "silent"),
    _case("save adapter without lora", lambda c, m: lora.save_adapter(
        InternLMForCausalLM(small_cfg()), c.tmp / "x.safetensors"), ValueError,
        "no LoRA adapters"),
    _case("adapter missing", lambda c, m: lora.load_adapter(c.model, c.tmp / "no.safetensors"),
          FileNotFoundError, "No adapter file"),
    _case("adapter corrupt", lambda c, m: lora.read_adapter(c.corrupt), ValueError,
          "not a readable adapter"),
    # --- trainer
    _case("train data None", lambda c, m: LLMTrainer(c.model, None), ValueError,
          "train_data is None"),
    _case("train data list", lambda c, m: LLMTrainer(c.model, [1, 2]), TypeError,
          "must be a mindspore dataset"),
    _case("steps 0", lambda c, m: _trainer(c, steps=0), ValueError, "steps must be a positive"),
    _case("trainer mode", lambda c, m: LLMTrainer(c.model, c.data(), mode="eager"), ValueError,
          "Unknown mode"),
    _case("lr 1e6", lambda c, m: _trainer(c, lr=1e6), ValueError, "far too large", "silent"),
    _case("lr negative", lambda c, m: _trainer(c, lr=-1e-3), ValueError, "finite number > 0"),
    _case("lr nan", lambda c, m: _trainer(c, lr=float("nan")), ValueError, "finite number > 0", "silent"),
    _case("amp level", lambda c, m: _trainer(c, amp_level="O9"), ValueError,
          "Unknown amp_level"),
    _case("train beyond schedule", lambda c, m: _trainer(c, steps=2).train(5), ValueError,
          "exceed the schedule"),
    _case("load missing", lambda c, m: _trainer(c).load(c.tmp / "none.ckpt"), FileNotFoundError,
          "No checkpoint"),
    _case("load corrupt", lambda c, m: _trainer(c).load(c.corrupt), ValueError, "corrupt"),
    _case("predict floats", lambda c, m: _trainer(c).predict([[1.5, 2.0]]), TypeError,
          "must be integers", "silent"),
    _case("predict negative", lambda c, m: _trainer(c).predict([[1, -1]]), ValueError,
          "negative id", "silent"),
    _case("batch label -1", lambda c, m: _trainer(c, train=c.bad_label_data(), steps=2).train(),
          ValueError, "Training batch 1: labels contain -1", "silent"),
    _case("batch ids >= vocab", lambda c, m: LLMTrainer(
        InternLMForCausalLM(tiny(vocab_size=8, hidden_size=16, intermediate_size=32,
                                 num_heads=2, max_seq_len=32)), c.data(), mode="pynative").train(1),
        ValueError, "vocab_size differ", "vague"),
    _case("evaluate without data", lambda c, m: _trainer(c).evaluate(), ValueError,
          "No evaluation data"),
    # --- export, zoo, callbacks
    _case("export shape", lambda c, m: export.export_mindir(c.model, (0, 4), c.tmp / "m"),
          ValueError, "input_shape must be"),
    _case("export too long", lambda c, m: export.export_mindir(c.model, (1, 64), c.tmp / "m"),
          ValueError, "exceeds the model's max_seq_len"),
    _case("mindir missing", lambda c, m: export.load_mindir(c.tmp / "none.mindir"),
          FileNotFoundError, "No MINDIR file"),
    _case("zoo name", lambda c, m: zoo.load_or_train("gpt-5"), ValueError, "Unknown zoo model"),
    _case("saver every 0", lambda c, m: CheckpointSaver(c.tmp, every_n_steps=0), ValueError,
          "every_n_steps must be >= 1"),
    _case("restore missing", lambda c, m: restore_checkpoint(c.tmp / "none.ckpt"),
          FileNotFoundError, "No checkpoint"),
]


@pytest.mark.parametrize("call, exc, phrase, was", CASES)
def test_bad_input(call, exc, phrase, was, ctx, monkeypatch):
    with pytest.raises(exc) as info:
        call(ctx, monkeypatch)
    assert phrase in str(info.value), str(info.value)


def test_setup_checks_everything_before_switching():
    import mindspore as ms
    cl.setup(mode="pynative", quiet=True)
    with pytest.raises(TypeError, match="seed"):
        cl.setup(mode="graph", seed="42")
    assert ms.get_context("mode") == ms.PYNATIVE_MODE


def test_negative_ids_in_a_graph_compiled_model_fail_loudly(ctx):
    """A model called directly checks its ids in Python even in GRAPH mode; inside a
    compiled step (EvalCell/TrainStep) the guard in construct makes -1 an out-of-range id
    (MindSpore's Gather error) instead of reading row vocab-1."""
    from course_lib.runtime import execution_mode
    from course_lib.training import EvalCell
    with execution_mode("graph"):
        with pytest.raises(ValueError, match="negative id"):
            ctx.model(ctx.ids(1, -1))
        with pytest.raises(RuntimeError, match="input_indices"):
            EvalCell(ctx.model)(ctx.ids(1, -1), ctx.ids(2, 3))[0].asnumpy()


def test_negative_label_never_scored_inside_a_compiled_step(ctx):
    """LossCell (what the compiled step uses) turns a stray -1 label into NaN, never into
    the loss of class V-1."""
    from course_lib.runtime import execution_mode
    from course_lib.training import LossCell
    cell = LossCell(ctx.model)
    with execution_mode("graph"):
        value = float(cell(ctx.ids(1, 2), ctx.ids(3, -1)).asnumpy())
    assert math.isnan(value)


# ------------------------------------------------------------------ handled edges
def _edge_generate_numpy(c):
    as_list = generation.generate(c.model, [[1, 2, 3]], 3)
    assert generation.generate(c.model, np.array([[1, 2, 3]]), 3) == as_list
    assert generation.generate(c.model, [np.array([1, 2, 3], np.int64)], 3) == as_list


def _edge_decode_numpy(c):
    ids = c.tok.encode("人民日报")
    assert c.tok.decode(np.array(ids, np.int64)) == "人民日报"
    assert c.tok.decode([np.int64(i) for i in ids]) == "人民日报"
    assert c.tok.decode([]) == ""


def _edge_encode_batch_tuple(c):
    assert c.tok.encode_batch(("人民", "日报")) == [c.tok.encode("人民"), c.tok.encode("日报")]


def _edge_all_ignored(c):
    labels = Tensor(np.full((1, 2), -100, np.int32))
    assert float(training.causal_lm_loss(Tensor(np.zeros((1, 2, V), np.float32)),
                                         labels).asnumpy()) == 0.0


def _edge_int64_ids(c):
    a = c.model(Tensor(np.array([[1, 2]], np.int64))).asnumpy()
    b = c.model(c.ids(1, 2)).asnumpy()
    np.testing.assert_array_equal(a, b)


def _edge_mask_as_list(c):
    ids = c.ids(1, 2, 3)
    want = c.model(ids, attention_mask=np.array([[0, 1, 1]], np.int32)).asnumpy()
    np.testing.assert_array_equal(c.model(ids, attention_mask=[[0, 1, 1]]).asnumpy(), want)
    np.testing.assert_array_equal(c.model(ids, [[0, 1, 1]]).asnumpy(), want)


def _edge_numpy_seed(c):
    assert cl.setup(seed=np.int64(3), quiet=True).seed == 3


def _edge_merge_unmerge(c):
    cl.seed_everything(0)
    model = InternLMForCausalLM(small_cfg())
    before = model.model.layers[0].self_attn.q_proj.weight.asnumpy().copy()
    lora.load_adapter(model, c.adapter, strict_base=False)
    lora.unmerge_lora(model, lora.merge_lora(model))
    after = model.model.layers[0].self_attn.q_proj.weight.asnumpy()
    np.testing.assert_allclose(after, before, atol=1e-6)


def _edge_predict_list(c):
    out = _trainer(c).predict([[1, 2, 3]])
    assert out.shape == (1, 3, V)


def _edge_greedy_temperature(c):
    assert generation.generate(c.model, [[1]], 2, temperature=0.5) == \
        generation.generate(c.model, [[1]], 2)


EDGES = [_edge_generate_numpy, _edge_decode_numpy, _edge_encode_batch_tuple, _edge_all_ignored,
         _edge_int64_ids, _edge_mask_as_list, _edge_numpy_seed, _edge_merge_unmerge, _edge_predict_list,
         _edge_greedy_temperature]


@pytest.mark.parametrize("edge", EDGES, ids=[e.__name__[6:] for e in EDGES])
def test_handled_edge(edge, ctx):
    edge(ctx)


def test_case_counts():
    """>= 60 table rows; every row that used to be silently wrong now raises."""
    was = [p.values[3] for p in CASES]
    counts = {k: was.count(k) for k in ("clear", "vague", "silent")}
    print(f"bad-input rows {len(CASES)} (already clear {counts['clear']}, fixed vague "
          f"{counts['vague']}, fixed silent-wrong {counts['silent']}); graph-mode guards 2; "
          f"handled edges {len(EDGES)}; silent-wrong left 0")
    assert len(CASES) >= 60
