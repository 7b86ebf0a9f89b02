"""The learner's own model at its real size: the course's default ``generate`` against
transformers (float32 and bfloat16) on the same downloaded-style directory, each run in a
fresh process, side by side.

    .venv/bin/python benchmarks/bench_realsize.py [--models 0.5b 1.5b] [--batch 1 8]
        [--new 32] [--prompt 16] [--runners course course-folded torch-f32 torch-bf16]

The models are look-alikes with the real config.json sizes, random weights (seed 0), written
by transformers' ``save_pretrained`` in bfloat16 (what the real repos ship) into
``.cache/realsize/`` on first use (offline; built again if a file is missing):

* ``0.5b``: Qwen/Qwen2.5-0.5B-Instruct (hidden 896, 24 layers, 14 / 2 heads, FFN 4864,
  vocab 151936, tied, rope_theta 1e6; sources in course_lib/lookalike.py), 988 MB;
* ``1.5b``: deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B, a Qwen2 (hidden 1536, 28 layers,
  12 / 2 heads, FFN 8960, vocab 151936, NOT tied, rope_theta 1e4, 131072 positions), 3.5 GB.

Runners: ``course`` is what a learner types, ``cl.from_pretrained(dir)`` (float16 parameters,
its default) then ``generate(model, prompts, new)`` (on a CPU with AVX2/FMA/F16C and g++ its
engine is "half": float32 arithmetic from the float16 parameters); ``course-folded`` is
``course`` with ``engine="folded"`` (a float32 copy of the weights, the default before);
``course-f32`` loads with ``dtype="float32"``; ``course-layers`` is ``course`` with
``engine="layers"`` (the model's own layers in float16, operator by operator on a CPU, no
float32 copy); ``torch-f32`` / ``torch-bf16`` are
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
import os

from course_lib import realsize
from course_lib.runtime import cache_dir, run_isolated

RUNNERS = realsize.RUNNERS


def in_fresh_process(runner, path, batch, prompt, new) -> dict:
    """``realsize.run`` in a new interpreter (its load time and peak memory are its own)."""
    return run_isolated(realsize.run, timeout=3600, runner=runner, path=str(path), batch=batch,
                        prompt=prompt, new=new)


def report(name: str, rows: list[dict]) -> None:
    print(f"\n{name}: runner        engine  batch  load s  first call s  TTFT s  tokens/s  peak GB  "
          "end GB  same tokens as torch-f32")
    ref_of = lambda r: next(x for x in rows                                  # noqa: E731
                            if x["runner"] == "torch-f32" and x["batch"] == r["batch"])
    for r in rows:
        same, total = realsize.same_tokens(r, ref_of(r))
        print(f"{'':6}{r['runner']:14} {r.get('engine') or '-':7} {r['batch']:5} {r['load_s']:7.1f} {r['first_call_s']:13.1f} "
              f"{r['ttft_s']:7.2f} {r['tokens_per_s']:9.2f} {r['peak_gb']:8.2f} {r['end_gb']:7.2f}  "
              f"{same}/{total}")
    for r in rows:
        if r["runner"] in realsize.FLOAT32:
            assert r["tokens"] == ref_of(r)["tokens"], f"{r['runner']} b{r['batch']}: tokens differ"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["0.5b", "1.5b"], choices=sorted(realsize.SIZES))
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--runners", nargs="+", default=list(RUNNERS), choices=RUNNERS)
    args = ap.parse_args()
    if "torch-f32" not in args.runners:
        ap.error("--runners must include torch-f32: every row's tokens are compared with it")
    for name in args.models:
        path = realsize.build(cache_dir("realsize"), name)
        print(f"{name} ({path}): load average %.2f %.2f %.2f" % os.getloadavg(), flush=True)
        rows = [in_fresh_process(runner, path, batch, args.prompt, args.new)
                for batch in args.batch for runner in args.runners]
        report(name, rows)
        print("load average after: %.2f %.2f %.2f" % os.getloadavg(), flush=True)


if __name__ == "__main__":
    main()
