"""course_lib.realsize: the real-size look-alike and the fresh-process generate runs that
chapter 16 and benchmarks/bench_realsize.py print (small shapes here)."""
import pytest

from course_lib import realsize
from course_lib.runtime import run_isolated

SMALL = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
             num_key_value_heads=1)


@pytest.fixture(scope="module")
def directory(tmp_path_factory):
    return realsize.build(tmp_path_factory.mktemp("realsize"), "0.5b", **SMALL)


def test_build_writes_a_bfloat16_checkpoint_once_and_heals_a_missing_file(directory):
    import json
    config = json.loads((directory / "config.json").read_text())
    assert config["vocab_size"] == realsize.VOCAB and config.get("dtype", config.get("torch_dtype")) == "bfloat16"
    assert config["hidden_size"] == 32 and config["tie_word_embeddings"] is True
    weights = next(directory.glob("*.safetensors"))
    stamp = weights.stat().st_mtime_ns
    assert realsize.build(directory.parent, "0.5b", **SMALL) == directory
    assert weights.stat().st_mtime_ns == stamp                       # reused, not rewritten
    weights.unlink()
    assert realsize.build(directory.parent, "0.5b", **SMALL) == directory
    assert next(directory.glob("*.safetensors")).exists()           # written again


def test_the_course_and_transformers_float32_choose_the_same_tokens(directory):
    rows = {runner: run_isolated(realsize.run, timeout=600, runner=runner, path=str(directory),
                                 batch=2, prompt=8, new=4)
            for runner in ("course", "torch-f32")}
    assert realsize.same_tokens(rows["course"], rows["torch-f32"]) == (8, 8)
    for row in rows.values():
        assert row["tokens_per_s"] > 0 and row["ttft_s"] > 0 and row["peak_gb"] >= row["end_gb"] > 0
    # the transformers process holds no MindSpore: its peak memory is transformers' own
    assert rows["torch-f32"]["mindspore_imported"] is False
    assert rows["course"]["mindspore_imported"] is True


def test_bad_names_are_refused(tmp_path):
    with pytest.raises(ValueError, match="Unknown size"):
        realsize.build(tmp_path, "7b")
    with pytest.raises(ValueError, match="Unknown runner"):
        realsize.run("onnx", str(tmp_path))
