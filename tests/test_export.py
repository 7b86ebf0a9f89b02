"""course_lib.export: MINDIR round trip of a (LoRA-merged) causal LM and the serving pipeline."""
import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor

from course_lib import export, sft
from course_lib.internlm import InternLMForCausalLM, tiny
from course_lib.lora import inject_lora, lora_layers, merge_lora

SHAPE = (4, 48)
TEXTS = ["房间很干净，服务也很好。", "质量太差了，不推荐。", "还行吧", "物流很快", "再也不买了"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A small InternLM with a trained-looking (random, non-zero) LoRA adapter, merged,
    exported once for the whole module."""
    import course_lib as cl
    cl.setup(device="CPU", mode="pynative", seed=0, quiet=True)
    model = InternLMForCausalLM(tiny(hidden_size=32, num_layers=1, num_heads=2,
                                     intermediate_size=64, max_seq_len=64))
    inject_lora(model, ["q_proj", "v_proj"], r=4, alpha=8)
    rng = np.random.default_rng(0)
    for layer in lora_layers(model).values():
        layer.lora_B.set_data(Tensor(rng.standard_normal(layer.lora_B.shape).astype(np.float32)))
    ids = Tensor(rng.integers(0, 8000, SHAPE).astype(np.int32))
    lora_logits = model(ids).asnumpy()
    merge_lora(model)
    info = export.export_mindir(model, SHAPE, tmp_path_factory.mktemp("export") / "lm")
    return model, info, ids, lora_logits


def test_merged_equals_lora_and_mindir_equals_live(exported):
    model, info, ids, lora_logits = exported
    merged = model(ids).asnumpy()
    assert np.abs(merged - lora_logits).max() < 1e-4
    assert info.path.suffix == ".mindir" and info.input_shape == SHAPE
    assert info.bytes >= info.parameter_bytes == sum(p.size * 4 for p in model.get_parameters())
    lm = export.load_mindir(info.path)
    assert lm.input_shape == SHAPE
    assert export.max_abs_diff(model, lm, ids) < 1e-5
    np.testing.assert_array_equal(lm.predict(ids).asnumpy(), lm(ids).asnumpy())


def test_mindir_inputs_reads_the_traced_shape_and_dtype_from_the_file(exported, tmp_path):
    model, info, ids, _ = exported
    assert export.mindir_inputs(info.path) == [(SHAPE, "int32")]
    # a dynamic batch dimension is recorded as -1, and the graph then takes any batch size
    ms.export(model, Tensor(shape=[None, SHAPE[1]], dtype=ms.int32), file_name=str(tmp_path / "dyn"),
              file_format="MINDIR")
    assert export.mindir_inputs(tmp_path / "dyn.mindir") == [((-1, SHAPE[1]), "int32")]
    graph = ms.nn.GraphCell(ms.load(str(tmp_path / "dyn.mindir")))
    for rows in (1, 3):
        x = ids[:rows]
        np.testing.assert_allclose(graph(x).asnumpy(), model(x).asnumpy(), atol=1e-5)
    (tmp_path / "not.mindir").write_bytes(b"\xff" * 7)
    with pytest.raises(ValueError, match="not a MINDIR file"):
        export.mindir_inputs(tmp_path / "not.mindir")


def test_pipeline_on_the_exported_graph_matches_the_live_model(exported, tokenizer):
    model, info, _, _ = exported
    lm = export.load_mindir(info.path)
    classify = export.SentimentPipeline(lm, tokenizer)          # shape taken from the graph
    # 5 texts -> 10 candidate rows -> batches of 4, 4 and a padded 2
    live = sft.answer_logprobs(model, tokenizer, TEXTS, max_len=SHAPE[1], batch_size=3)
    np.testing.assert_allclose(classify.scores(TEXTS), live, rtol=1e-5, atol=1e-4)
    answers = classify(TEXTS)
    assert answers == [("负面", "正面")[i] for i in live.argmax(-1)]
    assert classify(TEXTS[0]) == answers[0]
    direct = export.SentimentPipeline(lm, tokenizer, use_model_predict=False)
    assert direct(TEXTS) == answers


def test_fixed_batch_only_ever_feeds_one_shape(tokenizer, exported):
    model = exported[0]
    seen = []

    def forward(ids):
        seen.append(tuple(ids.shape))
        return model(ids)

    a = sft.answer_logprobs(forward, tokenizer, TEXTS, max_len=SHAPE[1], batch_size=4,
                            fixed_batch=True)
    assert set(seen) == {SHAPE} and len(seen) == 3
    b = sft.answer_logprobs(model, tokenizer, TEXTS, max_len=SHAPE[1], batch_size=10)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4)


def test_clear_errors(exported, tmp_path, tokenizer):
    model, info, ids, _ = exported
    lm = export.load_mindir(info.path)
    with pytest.raises(ValueError, match=r"exported for input shape \(4, 48\)"):
        lm(Tensor(np.zeros((2, 48), np.int32)))
    with pytest.raises(TypeError, match="must be int32"):
        lm(Tensor(np.zeros(SHAPE, np.int64)))
    with pytest.raises(FileNotFoundError, match="No MINDIR file"):
        export.load_mindir(tmp_path / "nothing.mindir")
    broken = tmp_path / "broken.mindir"
    broken.write_bytes(info.path.read_bytes()[:1000])
    broken.with_suffix(".json").write_text(info.path.with_suffix(".json").read_text())
    with pytest.raises(ValueError, match="could not be loaded"):
        export.load_mindir(broken)
    lonely = tmp_path / "lonely.mindir"
    lonely.write_bytes(info.path.read_bytes())
    with pytest.raises(FileNotFoundError, match="input shape"):
        export.load_mindir(lonely)
    with pytest.raises(ValueError, match="exceeds the model's max_seq_len"):
        export.export_mindir(model, (1, 65), tmp_path / "too_long")
    with pytest.raises(ValueError, match="batch, seq_len"):
        export.export_mindir(model, (4,), tmp_path / "bad")
    with pytest.raises(ValueError, match="must match it"):
        export.SentimentPipeline(lm, tokenizer, max_len=32)


def test_a_model_mindspore_would_split_is_refused_before_anything_is_written(exported, tmp_path,
                                                                            monkeypatch):
    """export_mindir keeps one file. MindSpore's own ms.export, with its one-file limit
    (``serialization.TOTAL_SAVE``, KiB) set just below this model's weights, writes a
    ``<name>_variables/`` folder, and just above them writes one file: export_mindir must
    refuse exactly the first case, before writing anything, and export the second."""
    from mindspore.train import serialization
    model, _, _, _ = exported
    kib = export.weights_kib(model)
    example = Tensor(np.zeros(SHAPE, np.int32))
    for name, limit, splits in (("below", kib * 0.999, True), ("above", kib * 1.001, False)):
        monkeypatch.setattr(serialization, "TOTAL_SAVE", limit)
        folder = tmp_path / name
        ms.export(model, example, file_name=str(folder / "raw"), file_format="MINDIR")
        assert (folder / "raw_variables").is_dir() == splits, f"ms.export with the limit {name}"
        if splits:
            with pytest.raises(ValueError, match="one-file limit.*_variables/ folder"):
                export.export_mindir(model, SHAPE, folder / "lm")
            assert not list(folder.glob("lm*")), "a refused export left files behind"
        else:
            info = export.export_mindir(model, SHAPE, folder / "lm")
            assert sorted(p.name for p in folder.glob("lm*")) == ["lm.json", "lm.mindir"]
            assert export.max_abs_diff(model, export.load_mindir(info.path), example) == 0.0
