"""Peak host memory of ``generate`` on a float16 model: with ``engine="layers"`` at most 1.2x
its weights + KV cache; with ``engine="folded"`` (a float32 copy, float32 cache) at most
1.2x weights + that copy (``folded.copy_bytes``) + cache; with the default engine on a CPU
("half": float32 arithmetic from the float16 weights, float32 cache) less than the
weights' bytes over weights + cache, where a float32 copy would add twice them.

Measured in a fresh process (/proc/self VmHWM after a reset), with MindSpore's fixed runtime
memory (kernels, pools: ~180 MB, the same for any model) taken out by a warm-up generation
on a one-layer model first. The layers' engine forced into GRAPH mode — where MindSpore 2.7
on CPU computes float16 weights through float32 copies it keeps — must exceed its bound:
the test can fail."""
import json
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import ctypes, json, sys
    import numpy as np
    import mindspore as ms
    import course_lib as cl
    from course_lib import engine, folded, generation, memory, pretrained
    from course_lib.layers import DecoderConfig

    def status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key):
                return int(line.split()[1]) * 1024

    def reset():
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")

    def build(layers):      # a Qwen2-shaped float16 model: GQA, q/k/v bias, tied embeddings
        config = DecoderConfig(vocab_size=32000, hidden_size=1024, num_layers=layers,
                               num_heads=16, num_kv_heads=4, intermediate_size=2816,
                               max_seq_len=512, position="rope", fused_qkv=False,
                               qkv_bias=True, tie_embeddings=True, rope_base=1e6)
        model = pretrained.build_empty(config, "float16")
        rng = np.random.default_rng(0)
        for p in model.get_parameters():
            p.set_data(ms.Tensor((rng.standard_normal(p.shape, np.float32) * 0.02).astype(np.float16)))
        model.to_float(ms.float16)
        model.set_train(False)
        return config, model

    cl.setup(device="CPU", seed=0, quiet=True)
    if sys.argv[1] == "graph":
        engine.engine_mode = lambda model: "graph"
    asked = {"default": "auto", "folded": "folded"}.get(sys.argv[1], "layers")
    prompts, new = [list(range(5, 21))] * 4, 16      # 16 + 16 tokens: one 64-slot cache bucket
    generation.generate(build(1)[1], prompts, new, engine=asked)   # the fixed memory
    reset()
    base = status("VmRSS:")
    config, model = build(4)
    weights = sum(p.nbytes for p in model.get_parameters())
    reset()
    generation.generate(model, prompts, new, engine=asked)
    kind = generation.engine_kind(model, asked)
    copy = folded.copy_bytes(model) if kind == "folded" else 0
    cache = memory.kv_cache_bytes(config, 4, generation.cache_bucket(16 + new, 512),
                                  "fp32" if kind in ("folded", "half") else "fp16")
    print(json.dumps({"weights": weights, "cache": cache, "copy": copy, "engine": kind,
                      "ratio": (status("VmHWM:") - base) / (weights + copy + cache)}))
""")


def measure(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_layers_engine_holds_no_float32_copy_of_float16_weights():
    r = measure("layers")
    print(f"float16 generate, engine='layers': peak {r['ratio']:.3f} x (weights "
          f"{r['weights'] / 2**20:.0f} MiB + cache {r['cache'] / 2**20:.1f} MiB)")
    assert r["engine"] == "layers" and r["ratio"] <= 1.2


def test_the_default_engine_holds_no_float32_copy_of_float16_weights():
    from course_lib import half
    if half.kernel()[0] is None:
        pytest.skip(half.kernel()[1])
    r = measure("default")
    held = r["weights"] + r["cache"]
    extra = (r["ratio"] - 1) * held
    print(f"float16 generate, default engine ({r['engine']}): peak {r['ratio']:.3f} x (weights "
          f"{r['weights'] / 2**20:.0f} MiB + cache {r['cache'] / 2**20:.1f} MiB): "
          f"{extra / 2**20:.0f} MiB more")
    # a float32 copy of the weights would add twice their bytes; the engine's own memory
    # (about 100 MiB here, as for the folded engine) is a large share of this small model
    assert r["engine"] == "half" and r["copy"] == 0 and extra < r["weights"]


def test_the_folded_engine_holds_one_float32_copy_and_no_more():
    r = measure("folded")
    print(f"float16 generate, engine='folded': peak {r['ratio']:.3f} x (weights "
          f"{r['weights'] / 2**20:.0f} MiB + float32 copy {r['copy'] / 2**20:.0f} MiB + "
          f"cache {r['cache'] / 2**20:.1f} MiB)")
    assert r["engine"] == "folded" and r["ratio"] <= 1.2


@pytest.mark.slow
def test_the_measurement_catches_a_copy():
    r = measure("graph")
    print(f"float16 generate, engine forced into GRAPH mode: peak {r['ratio']:.3f} x")
    assert r["ratio"] > 1.2
