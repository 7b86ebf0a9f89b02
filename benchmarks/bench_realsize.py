"""The learner's own model at its real size: the course's default ``generate`` against
transformers (float32 and bfloat16) on the same downloaded-style directory, each run in a
fresh process, side by side.

    .venv/bin/python benchmarks/bench_realsize.py [--models 0.5b 1.5b] [--batch 1 8]
        [--new 32] [--prompt 16] [--runners course torch-f32 torch-bf16]

The models are look-alikes with the real config.json sizes, random weights (seed 0), written
by transformers' ``save_pretrained`` in bfloat16 (what the real repos ship) into
``.cache/realsize/`` on first use (offline; built again if a file is missing):

* ``0.5b``: Qwen/Qwen2.5-0.5B-Instruct (hidden 896, 24 layers, 14 / 2 heads, FFN 4864,
  vocab 151936, tied, rope_theta 1e6; sources in course_lib/lookalike.py), 988 MB;
* ``1.5b``: deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B, a Qwen2 (hidden 1536, 28 layers,
  12 / 2 heads, FFN 8960, vocab 151936, NOT tied, rope_theta 1e4, 131072 positions), 3.5 GB.

Runners: ``course`` is what a learner types, ``cl.from_pretrained(dir)`` (float16 parameters,
its default) then ``generate(model, prompts, new)``; ``course-f32`` loads with
``dtype="float32"``; ``course-layers`` is ``course`` with ``engine="layers"`` (the model's own
layers in float16, operator by operator on a CPU, no float32 copy); ``torch-f32`` / ``torch-bf16`` are
``AutoModelForCausalLM.from_pretrained(dir, dtype=...)`` + greedy ``generate`` (KV cache).
Per process: load time; the first ``generate`` (for the course this folds and compiles);
then the best of two warm calls of one new token (time to first token) and of ``new``
tokens (tokens/s = batch x new / seconds, prefill included); peak host RSS (VmHWM: load
included) and RSS at the end. Every runner's tokens are compared with torch-f32's: the
runners that compute in float32 from the checkpoint's values must give the same tokens
(asserted); course-layers (float16) and torch-bf16 round differently, so only their
agreement is printed. Runners are listed for each batch size in the order given.
The machine's load average is printed before and after each model.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "realsize"
SIZES = {
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                 num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True,
                 rope_theta=1e6, max_position_embeddings=32768, eos_token_id=151645),
    "1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                 num_attention_heads=12, num_key_value_heads=2, tie_word_embeddings=False,
                 rope_theta=1e4, max_position_embeddings=131072, eos_token_id=151643),
}
RUNNERS = ("course", "course-f32", "course-layers", "torch-f32", "torch-bf16")
FLOAT32 = ("course", "course-f32", "torch-f32")         # compute in float32: the same tokens


def build(name: str) -> Path:
    """The look-alike directory for ``name``, written once (a missing file rebuilds it)."""
    path = CACHE / name
    if (path / "config.json").exists() and list(path.glob("*.safetensors")):
        return path
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    config = Qwen2Config(vocab_size=151936, rms_norm_eps=1e-6, bos_token_id=151643,
                         use_sliding_window=False, torch_dtype="bfloat16", **SIZES[name])
    torch.manual_seed(0)
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    Qwen2ForCausalLM(config).to(torch.bfloat16).save_pretrained(tmp, safe_serialization=True)
    shutil.rmtree(path, ignore_errors=True)
    tmp.replace(path)                                  # whole, or not at all
    return path


def _memory() -> tuple[float, float]:
    """(peak, current) resident memory of this process in GB, from /proc/self/status."""
    status = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return tuple(float(status[k].split()[0]) / 1e6 for k in ("VmHWM", "VmRSS"))


def _loader(runner: str, path: Path):
    """(generate(prompts, new) -> new ids per row) for ``runner``, loaded from ``path``."""
    if runner.startswith("torch"):
        import torch
        from transformers import AutoModelForCausalLM
        dtype = torch.float32 if runner == "torch-f32" else torch.bfloat16
        hf = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
        hf.generation_config.eos_token_id, hf.generation_config.pad_token_id = None, 0

        def run(prompts, new):
            ids = torch.tensor(prompts, dtype=torch.long)
            with torch.no_grad():
                out = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                  max_new_tokens=new, min_new_tokens=new, use_cache=True)
            return out[:, ids.shape[1]:].tolist()
        return run
    import course_lib as cl
    from course_lib.generation import generate
    model = cl.from_pretrained(path, **({"dtype": "float32"} if runner == "course-f32" else {}),
                               verbose=False)
    engine = "layers" if runner == "course-layers" else "auto"
    return lambda prompts, new: generate(model, prompts, new, engine=engine)


def worker(runner: str, path: Path, batch: int, prompt: int, new: int) -> dict:
    import numpy as np
    prompts = np.random.default_rng(0).integers(100, 150000, (batch, prompt)).tolist()
    start = time.perf_counter()
    run = _loader(runner, path)
    load = time.perf_counter() - start

    def timed(n):
        t = time.perf_counter()
        out = run(prompts, n)
        return time.perf_counter() - t, out
    first, tokens = timed(new)
    ttft = min(timed(1)[0] for _ in range(2))
    seconds = min(timed(new)[0] for _ in range(2))
    peak, now = _memory()
    return dict(runner=runner, batch=batch, load_s=load, first_call_s=first, ttft_s=ttft,
                tokens_per_s=batch * new / seconds, peak_gb=peak, end_gb=now, tokens=tokens)


def in_fresh_process(runner, path, batch, prompt, new) -> dict:
    env = dict(os.environ, GLOG_v="3", PYTHONPATH=str(ROOT))
    cmd = [sys.executable, __file__, "--worker", runner, str(path), str(batch), str(prompt), str(new)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode or not lines:
        raise RuntimeError(f"{runner} b{batch} failed:\n{out.stderr[-3000:]}")
    return json.loads(lines[-1])


def report(name: str, rows: list[dict]) -> None:
    print(f"\n{name}: runner       batch  load s  first call s  TTFT s  tokens/s  peak GB  end GB  "
          "same tokens as torch-f32")
    ref_of = lambda r: next(x for x in rows                                  # noqa: E731
                            if x["runner"] == "torch-f32" and x["batch"] == r["batch"])
    for r in rows:
        ref = ref_of(r)
        same = sum(a == b for ra, rb in zip(r["tokens"], ref["tokens"]) for a, b in zip(ra, rb))
        total = sum(len(x) for x in ref["tokens"])
        print(f"{'':6}{r['runner']:14} {r['batch']:5} {r['load_s']:7.1f} {r['first_call_s']:13.1f} "
              f"{r['ttft_s']:7.2f} {r['tokens_per_s']:9.2f} {r['peak_gb']:8.2f} {r['end_gb']:7.2f}  "
              f"{same}/{total}")
    for r in rows:
        if r["runner"] in FLOAT32:
            assert r["tokens"] == ref_of(r)["tokens"], f"{r['runner']} b{r['batch']}: tokens differ"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["0.5b", "1.5b"], choices=sorted(SIZES))
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--runners", nargs="+", default=list(RUNNERS), choices=RUNNERS)
    args = ap.parse_args()
    if "torch-f32" not in args.runners:
        ap.error("--runners must include torch-f32: every row's tokens are compared with it")
    for name in args.models:
        path = build(name)
        print(f"{name} ({path}): load average %.2f %.2f %.2f" % os.getloadavg(), flush=True)
        rows = [in_fresh_process(runner, path, batch, args.prompt, args.new)
                for batch in args.batch for runner in args.runners]
        report(name, rows)
        print("load average after: %.2f %.2f %.2f" % os.getloadavg(), flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        runner, path, batch, prompt, new = sys.argv[2:7]
        print(json.dumps(worker(runner, Path(path), int(batch), int(prompt), int(new))), flush=True)
    else:
        main()
