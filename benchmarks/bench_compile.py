"""Graph compilation under variable-length input, and PyNative vs @ms.jit vs GRAPH, one run.

    .venv/bin/python benchmarks/bench_compile.py [--batches 40 --batch-size 8 --max-len 128
                                                  --layers 2 --steps 12]

Part 1 feeds the same stream of news-sentence batches (padded to the longest sequence of
each batch, so the length varies) to fresh ``EvalCell(gpt)`` graphs under the four
strategies of ``course_lib.migration.compile_stats`` and prints compiles, wall time and the
padding overhead. ``gpt`` is chapter 13's TinyGPT, whose shape-dependent tensors are graph
ops (the course's Baichuan builds its attention bias on the host, which rules out declared
dynamic shapes). Part 2 trains the course's tiny Baichuan for ``--steps`` steps four ways,
each one change from the next (``step_modes.ONE_CHANGE``: the eager function in PyNative,
the same function under ``@ms.jit``, that jit function called in GRAPH_MODE, the
``TrainStep`` Cell in GRAPH_MODE), under both PyNative dispatches, each in a fresh process
(``step_modes.compare_in_fresh_processes``, as notebook 14).

Part 1 runs in this process, one strategy after the other; the machine's load affects all
variants, so only the ratios printed mean something. This is not a test.
"""
import argparse
import tempfile

import numpy as np

import course_lib as cl
from course_lib import baichuan, data
from course_lib.migration import compile_stats as cs, native_demo, step_modes
from course_lib.migration.demo_data import DemoConfig
from course_lib.pipelines import pack_blocks
from course_lib.tokenizer import load_tokenizer
from course_lib.training import EvalCell


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--buckets", type=int, nargs="+", default=[32, 64, 96, 128])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--block", type=int, default=64)
    args = ap.parse_args()
    cl.setup(device="CPU", mode="graph", seed=0, quiet=True)
    tok = load_tokenizer()
    cfg = baichuan.tiny(num_layers=args.layers)

    stream = cs.length_stream(tok.encode_batch(data.news_sentences()[:20000]), args.batch_size,
                              args.batches, args.max_len, tok.pad_id, seed=0)
    lengths = [x.shape[1] for x, _ in stream]
    print(f"Part 1: {len(stream)} batches x {args.batch_size}, lengths {min(lengths)}..{max(lengths)} "
          f"({len(set(lengths))} distinct), buckets {args.buckets}, TinyGPT {args.layers} layers")
    gpt = native_demo.build(DemoConfig(vocab_size=tok.vocab_size, hidden=128, heads=4,
                                       layers=args.layers, max_len=max(args.buckets)))
    results = [cs.run_stream(lambda: EvalCell(gpt), stream, s, buckets=args.buckets)
               for s in cs.STRATEGIES]
    for row in cs.summary_table(results):
        print("  ", row)
    static = results[0]
    for r in results[1:]:
        print(f"   {r.strategy:9s}: {r.compiles}/{static.compiles} compiles, total time "
              f"{r.total_seconds / static.total_seconds:.2f}x static, steady batch "
              f"{r.steady_seconds / static.steady_seconds:.2f}x static, same losses: "
              f"{cs.same_outputs(static, r)}")

    blocks = pack_blocks(tok.encode_batch(data.news_documents()[:2000]), args.block, tok.eos_id)
    n = args.steps * args.batch_size
    batches = [(b[:, :-1], b[:, 1:]) for b in
               blocks[:n].reshape(args.steps, args.batch_size, args.block + 1)]
    print(f"\nPart 2: train step of the course's Baichuan tiny ({args.layers} layers), "
          f"batch {args.batch_size} x {args.block}, {args.steps} steps")
    model = baichuan.BaichuanForCausalLM(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        runs = step_modes.compare_in_fresh_processes(model, batches, tmp)
    for r in runs:
        print(f"   {r.mode:10s} {r.dispatch:8s} steady {r.steady_seconds * 1e3:8.1f} ms/step, "
              f"first {r.first_seconds:6.2f} s, compiles {r.compiles}")
    for kind, ratio in step_modes.dispatch_ratios(runs).items():
        print(f"   {kind:10s} async / blocking dispatch: {ratio:.2f}x")
    for row in step_modes.one_change_ratios(runs):
        print(f"   {row['from']} -> {row['to']} ({row['change']}): " +
              ", ".join(f"{d} {row[d]:.2f}x" for d in step_modes.DISPATCHES if d in row))
    ref = np.array(runs[0].losses)
    print("   same losses in every run:", all(np.allclose(r.losses, ref, rtol=1e-5) for r in runs))


if __name__ == "__main__":
    main()
