"""from_pretrained on look-alike directories in the exact published layouts (tiny shapes):
logits against independent references (tests/ref_forward.py), half-precision parameters,
the memory plan, and the peak host memory of a >= 100M-parameter bf16 load."""
import json
import subprocess
import sys
import textwrap

import ml_dtypes  # noqa: F401  (bf16 arrays compare through it)
import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor

from course_lib import families, from_pretrained, hf_weights, lookalike, memory
from course_lib.baichuan import baichuan_13b
from course_lib.hf_weights import CheckpointError

import ref_forward

CASES = [("baichuan-13b", "bin", "bfloat16"), ("baichuan-13b", "bin", "float16"),
         ("baichuan-13b", "safetensors", "bfloat16"), ("internlm", "bin", "bfloat16"),
         ("internlm", "bin", "float16"), ("internlm", "safetensors", "float16"),
         ("baichuan-7b", "bin", "bfloat16")]


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    root = tmp_path_factory.mktemp("tok")
    return {f: lookalike.train_tokenizer(root / f, f) for f in ("baichuan-13b", "internlm")}


@pytest.fixture(scope="module", params=CASES, ids=["-".join(c) for c in CASES])
def lookalike_dir(request, tokenizers, tmp_path_factory):
    family, fmt, dtype = request.param
    tok = tokenizers["internlm" if family == "internlm" else "baichuan-13b"]
    d = lookalike.write_lookalike(tmp_path_factory.mktemp(family) / "model", family, dtype=dtype,
                                  fmt=fmt, shards=3, tokenizer_model=tok)
    return family, d


def _ids(cfg):
    return np.random.default_rng(0).integers(3, cfg["vocab_size"], (2, 11))


def test_layout_is_the_real_one(lookalike_dir):
    family, d = lookalike_dir
    cfg = json.loads((d / "config.json").read_text())
    assert "position_embedding" not in cfg                         # no course-only key
    index = next(d.glob("*.index.json"))
    assert index.name in ("pytorch_model.bin.index.json", "model.safetensors.index.json")
    assert len(set(json.loads(index.read_text())["weight_map"].values())) == 3
    assert (d / "training_args.bin").exists() and (d / "tokenizer.model").exists()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_logits_equal_the_independent_reference(lookalike_dir, dtype):
    family, d = lookalike_dir
    cfg = json.loads((d / "config.json").read_text())
    model = from_pretrained(d, dtype=dtype, verbose=False)
    want = {"float32": ms.float32, "bfloat16": ms.bfloat16, "float16": ms.float16}[dtype]
    assert {p.dtype for p in model.get_parameters()} == {want}     # stored as requested
    ids = _ids(cfg)
    got = model(Tensor(ids.astype(np.int32))).asnumpy()
    import torch
    as_stored = {k: v.to(getattr(torch, dtype)) if v.is_floating_point() and not k.endswith("inv_freq")
                 else v for k, v in ref_forward.read_checkpoint(d).items()}   # the same weights
    exact = ref_forward.reference_logits(family, as_stored, cfg, ids, half=False)   # float64
    # float16 computes in float16; bfloat16 weights are computed in float32 on CPU (exact)
    tol = 1e-3 if dtype == "float16" else 1e-5
    err = np.abs(got - exact).max()
    assert err < tol, f"{family} {dtype}: max |logit diff| {err:.2e} (logits up to {np.abs(exact).max():.2f})"
    if dtype == "float16":   # and no less accurate than the reference code itself run in float16
        torch_half = ref_forward.reference_logits(family, as_stored, cfg, ids, half=True)
        assert err <= 1.5 * np.abs(torch_half - exact).max()
    assert model.load_report["compute_dtype"] == ("float16" if dtype == "float16" else "float32")


def test_family_and_skipped_buffers(lookalike_dir):
    family, d = lookalike_dir
    model = from_pretrained(d, dtype="float16", verbose=False)
    assert model.family == family
    assert model.config.position == ("alibi" if family == "baichuan-13b" else "rope")
    skipped = model.load_report["skipped"]
    if family == "internlm":
        assert skipped == [f"model.layers.{i}.self_attn.rotary_emb.inv_freq" for i in range(2)]
    else:
        assert skipped == []


def test_alibi_layout_of_any_width_is_never_loaded_as_rope(tokenizers, tmp_path):
    """The 13B layout at width 96 (not 5120), no position key: ALiBi from the evidence."""
    d = lookalike.write_lookalike(tmp_path / "w96", "baichuan-13b", dtype="float16",
                                  tokenizer_model=tokenizers["baichuan-13b"], hidden_size=96,
                                  num_heads=6, intermediate_size=256)
    cfg = json.loads((d / "config.json").read_text())
    model = from_pretrained(d, dtype="float32", verbose=False)
    ids = _ids(cfg)
    ref = ref_forward.baichuan13b_logits(ref_forward.read_checkpoint(d), cfg, ids)
    assert np.abs(model(Tensor(ids.astype(np.int32))).asnumpy() - ref).max() < 1e-5
    del cfg["architectures"], cfg["model_max_length"]             # no evidence left: refuse
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match='add "position_embedding"'):
        from_pretrained(d, verbose=False)


def test_memory_plan_refuses_13b_fp32_on_a_24gb_host(tmp_path, capsys):
    cfg = lookalike.real_config("baichuan-13b", vocab_size=64000, hidden_size=5120, num_layers=40,
                                num_heads=40, intermediate_size=13696)
    (tmp_path / "config.json").write_text(json.dumps(cfg))      # no weights needed: refused first
    with pytest.raises(MemoryError, match=r"(?s)peak 50\.64 GiB; available 24\.00 GiB.*DOES NOT FIT"):
        from_pretrained(tmp_path, dtype="float32", host_memory_gib=24)
    plan = memory.load_plan(baichuan_13b(), "bfloat16", host_available=64 * memory.GiB)
    n = 13_264_901_120
    assert plan.weights == 2 * n and plan.largest_tensor == 2 * 64000 * 5120 and plan.fits
    assert "weights 24.71 GiB" in str(plan)


PEAK_SCRIPT = textwrap.dedent("""
    import json, sys
    from course_lib import families, hf_weights, pretrained
    d = sys.argv[1]
    config = families.config_from_hf(hf_weights.read_config(d))
    model = pretrained.build_empty(config, "bfloat16")
    def status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    import ctypes, torch                             # the .bin loader's import is not the load
    ctypes.CDLL("libc.so.6").malloc_trim(0)          # free heap back to the OS: RSS = live memory
    assert all(p.has_init for p in model.get_parameters())   # nothing allocated yet
    with open("/proc/self/clear_refs", "w") as f:    # reset the high-water mark (VmHWM)
        f.write("5")
    before = status("VmRSS:")
    hf_weights.load_weights(model, d)
    weights = sum(p.nbytes for p in model.get_parameters())
    print(json.dumps({"before": before, "peak": status("VmHWM:"), "weights": weights,
                      "after": status("VmRSS:"),
                      "params": sum(p.size for p in model.get_parameters())}))
""")


def test_peak_host_memory_of_a_100m_parameter_bf16_load(tmp_path):
    from course_lib.internlm import InternLMConfig
    config = InternLMConfig(vocab_size=32000, hidden_size=1024, num_layers=6, num_heads=8,
                            intermediate_size=2816, max_seq_len=2048)
    assert config.num_parameters() >= 100_000_000
    d = tmp_path / "big"
    cfg = families.hf_config(config)
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    lookalike.write_weights(d, lookalike.random_state(config), "bfloat16", "bin", shards=3)
    out = subprocess.run([sys.executable, "-c", PEAK_SCRIPT, str(d)], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["params"] == config.num_parameters() and r["weights"] == 2 * r["params"]
    ratio = (r["peak"] - r["before"]) / r["weights"]
    print(f"peak host memory during the load: {ratio:.3f} x the bf16 weights "
          f"({(r['peak'] - r['before']) / 2**20:.0f} MiB for {r['weights'] / 2**20:.0f} MiB)")
    assert (r["after"] - r["before"]) >= 0.95 * r["weights"]   # the weights really are resident
    assert ratio <= 1.15
