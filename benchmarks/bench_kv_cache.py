"""KV-cache decoding vs recomputing the whole sequence, same model, same prompt, one run.

    .venv/bin/python benchmarks/bench_kv_cache.py [--hidden 256 --layers 4 --repeats 2]

Prints tokens/s with and without the cache at 64 and 256 new tokens and their ratio.
With the cache, ``generate`` runs its default engine (the compiled decode step, one slot
written per token; compiled once per cache bucket before timing); without it every step
recomputes the whole sequence (PyNative). Both variants run in the same process,
interleaved (cache, no cache, cache, ...), and the best repeat of each is kept, so a busy
machine slows both alike. Greedy decoding, so both must produce the same tokens (checked).
Then ms per token against the position (``course_lib.experiments.decode_ms_by_position``):
the first and last quarter of the steps, with and without the cache — flat vs growing
(each position: the fastest of ``--position-repeats`` decodes).
The load average is printed before and after.

By default (``--dispatch blocking``) ``MS_DEV_LAUNCH_BLOCKING=1`` is set for this process
(before MindSpore is imported): PyNative then runs each operator synchronously instead of
handing it to dispatch threads — on a small, busy CPU that removes most of the fixed
per-step cost, so the no-cache baseline is PyNative at its fastest (see
course_lib.inference, "PyNative's operator dispatch"); ``--dispatch async`` keeps
MindSpore's default.
"""
import argparse
import os
import sys
import time

if not ("--dispatch" in sys.argv and sys.argv[sys.argv.index("--dispatch") + 1:][:1] == ["async"]):
    os.environ["MS_DEV_LAUNCH_BLOCKING"] = "1"     # must precede the MindSpore import

import course_lib as cl
from _common import add_model_arguments
from course_lib.layers import swiglu_width
from course_lib import baichuan
from course_lib.baichuan import BaichuanForCausalLM
from course_lib.experiments import decode_ms_by_position
from course_lib.generation import generate


def load() -> str:
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_arguments(ap)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--position-repeats", type=int, default=3,
                    help="ms/token by position: fastest of this many decodes per position")
    ap.add_argument("--dispatch", choices=("async", "blocking"), default="blocking",
                    help="PyNative dispatch of the no-cache baseline (MindSpore's default: async)")
    args = ap.parse_args()
    print(load())
    print(f"PyNative dispatch: {args.dispatch}")
    cl.setup(device="CPU", mode="pynative", seed=0, quiet=True)
    cfg = baichuan.tiny(hidden_size=args.hidden, num_layers=args.layers, num_heads=args.heads,
                        intermediate_size=swiglu_width(args.hidden))
    model = BaichuanForCausalLM(cfg)
    prompt = [[(7 + 31 * i) % cfg.vocab_size for i in range(args.prompt)]]
    print(f"model: Baichuan tiny twin (ALiBi), hidden {cfg.hidden_size}, {cfg.num_layers} layers, "
          f"{cfg.num_heads} heads, {cfg.num_parameters():,} parameters; prompt {args.prompt} tokens; "
          f"greedy; best of {args.repeats}")
    for n in args.new:
        generate(model, prompt, n)                                # compile this cache bucket
        best = {True: float("inf"), False: float("inf")}
        outs = {}
        for _ in range(args.repeats):
            for use_cache in (True, False):
                t = time.perf_counter()
                outs[use_cache] = generate(model, prompt, n, use_cache=use_cache)
                best[use_cache] = min(best[use_cache], time.perf_counter() - t)
        assert outs[True] == outs[False], "cache and no-cache decoding disagree"
        tps = {k: n / v for k, v in best.items()}
        print(f"{n:4d} new tokens: with cache {tps[True]:7.1f} tok/s | without {tps[False]:7.1f} "
              f"tok/s | speed-up x{tps[True] / tps[False]:.2f}")
    n = max(args.new)
    for use_cache in (True, False):
        run = decode_ms_by_position(model, prompt[0], n, use_cache=use_cache,
                                   repeats=args.position_repeats)
        quarter = len(run.ms) // 4
        first, last = run.ms[:quarter].mean(), run.ms[-quarter:].mean()
        print(f"ms/token {'with' if use_cache else 'without':7s} cache, positions "
              f"{run.positions[0]}-{run.positions[quarter - 1]}: {first:6.2f} | positions "
              f"{run.positions[-quarter]}-{run.positions[-1]}: {last:6.2f} | last/first x{last / first:.2f}")
    print(load())


if __name__ == "__main__":
    main()
