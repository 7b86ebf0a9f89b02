"""Model.train speed: GRAPH vs PyNative, and amp_level O0 vs O2 on this device, one run.

    .venv/bin/python benchmarks/bench_model_modes.py [--steps 20 --max-len 64 --repeats 2]

The chapter-02 sentiment classifier (embedding + 1 Transformer block + pooling), trained
with ``Model`` on the same review batches. For each variant a fresh model is built and
trained for ``--steps`` batches; the first step (graph compilation, caches) is reported
separately and the speed is measured over the remaining steps. Variants run interleaved,
``--repeats`` times, keeping the best of each, so a busy machine slows all of them alike.
Ratios only mean something within one run; this is not a test.
"""
import argparse
import time

import course_lib as cl
from course_lib import classifier
from course_lib.measure import measure_training_speed
from course_lib.data import review_splits
from course_lib.tokenizer import load_tokenizer


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--max-len", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--embed", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    info = cl.setup(mode="pynative", seed=0, quiet=True)
    tok = load_tokenizer()
    train = review_splits().train[: args.steps * args.batch]
    make_net = lambda: classifier.SentimentClassifier(  # noqa: E731
        tok.vocab_size, args.max_len, embed_dim=args.embed, num_heads=4, ffn_dim=2 * args.embed)
    make_data = lambda: classifier.review_dataset(train, tok, args.max_len, args.batch, seed=0)  # noqa: E731
    variants = [("pynative", "O0"), ("graph", "O0"), ("graph", "O2")]
    best = {v: (float("inf"), 0.0) for v in variants}
    print(f"device {info.device} | MindSpore {info.mindspore} | batch {args.batch} x {args.max_len} tokens, "
          f"embed {args.embed}, {args.steps} steps per run, best of {args.repeats}")
    start = time.perf_counter()
    for _ in range(args.repeats):
        for v in variants:
            r = measure_training_speed(make_net, make_data, v[0], args.steps,
                                       amp_level=v[1])
            first, speed = r["first_step_s"], r["steps_per_s"]
            best[v] = (min(best[v][0], first), max(best[v][1], speed))
    for (mode, amp), (first, speed) in best.items():
        print(f"{mode:9} {amp}: first step {first:6.2f} s | then {speed:7.2f} steps/s")
    g, p, o2 = best[("graph", "O0")][1], best[("pynative", "O0")][1], best[("graph", "O2")][1]
    print(f"graph / pynative (O0):  {g / p:.1f}x")
    print(f"O2 / O0 (graph):        {o2 / g:.2f}x")
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
