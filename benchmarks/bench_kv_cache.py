"""What the KV cache alone saves: the same PyNative decode step with a growing cache vs
recomputing the whole sequence, same model, same prompt, same dispatch, one run.

    .venv/bin/python benchmarks/bench_kv_cache.py [--hidden 256 --layers 4 --repeats 2]

One thing differs between the two: the cache. With it, every step feeds one new token and
attends to the cached keys/values (``generation.decode_step`` on a ``KVCache`` that grows by
one row per token); without it, every step feeds the whole sequence again (``generate(...,
use_cache=False)``). Both run in PyNative, operator by operator, with the same dispatch
(``--dispatch blocking``, the default: ``MS_DEV_LAUNCH_BLOCKING=1`` before MindSpore is
imported, each operator runs synchronously; ``--dispatch async`` keeps MindSpore's default,
see course_lib.inference, "PyNative's operator dispatch"). The compiled decode engine is a
different execution and is measured against transformers in bench_generate_vs_torch.py.

Prints, at each ``--new`` length, for both (one after the other): tokens/s of the decode
steps and ms per token against the position (``course_lib.experiments.decode_ms_by_position``,
each position the fastest of ``--repeats`` decodes): the first and last quarter of the steps,
flat with the cache, growing without it; then the ratio of the two decodes' times: what the
cache alone saves. Greedy decoding: both must give the same tokens (checked). The load
average is printed before and after.
"""
import argparse
import os
import sys

if not ("--dispatch" in sys.argv and sys.argv[sys.argv.index("--dispatch") + 1:][:1] == ["async"]):
    os.environ["MS_DEV_LAUNCH_BLOCKING"] = "1"     # must precede the MindSpore import

import course_lib as cl
from _common import add_model_arguments
from course_lib.layers import swiglu_width
from course_lib import baichuan
from course_lib.baichuan import BaichuanForCausalLM
from course_lib.experiments import decode_ms_by_position


def load() -> str:
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_arguments(ap)
    ap.add_argument("--repeats", type=int, default=3,
                    help="each position: the fastest of this many decodes")
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
          f"greedy; each position the fastest of {args.repeats}")
    for n in args.new:
        runs = {use_cache: decode_ms_by_position(model, prompt[0], n, use_cache=use_cache,
                                                 compiled=False, repeats=args.repeats)
                for use_cache in (True, False)}
        assert runs[True].tokens == runs[False].tokens, "cache and no-cache decoding disagree"
        for use_cache, run in runs.items():
            quarter = max(1, len(run.ms) // 4)
            first, last = run.ms[:quarter].mean(), run.ms[-quarter:].mean()
            print(f"{n:4d} new tokens, {'with' if use_cache else 'without':7s} cache: "
                  f"{(n - 1) / run.total_seconds:7.1f} tok/s | ms/token, positions {run.positions[0]}-"
                  f"{run.positions[quarter - 1]}: {first:6.2f}, positions {run.positions[-quarter]}-"
                  f"{run.positions[-1]}: {last:6.2f} (last/first x{last / first:.2f})")
        print(f"{n:4d} new tokens: the cache alone, x{runs[False].total_seconds / runs[True].total_seconds:.2f}")
    print(load())


if __name__ == "__main__":
    main()
