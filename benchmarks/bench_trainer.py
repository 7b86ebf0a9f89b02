"""Why LLMTrainer is built on a custom TrainStep: its speed next to Model.train, one run.

    .venv/bin/python benchmarks/bench_trainer.py               # internlm.tiny(), 8 x 64 tokens
    .venv/bin/python benchmarks/bench_trainer.py --rounds 3 --steps 30 --batch 16 --block 128

The same InternLM-tiny and the same shuffled news batches are trained by
``Model.train`` (MindSpore's TrainOneStepCell, GRAPH mode), ``LLMTrainer`` in GRAPH mode
(our TrainStep: + global-norm clipping + the norm returned) and ``LLMTrainer`` in PYNATIVE
mode. ``course_lib.trainer.compare_train_loops`` times each step (median, compile step
excluded); the three loops run in alternating rounds so background load hits all alike,
and the median over rounds is printed with the ratios to LLMTrainer (graph).
"""
import argparse
import statistics

import course_lib as cl


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--pynative-steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--block", type=int, default=64)
    args = ap.parse_args()
    cl.setup(device="CPU", mode="pynative", seed=0, quiet=True)

    from course_lib import internlm
    from course_lib.data import news_splits
    from course_lib.pipelines import lm_dataset
    from course_lib.tokenizer import load_tokenizer
    from course_lib.trainer import compare_train_loops

    tok = load_tokenizer()
    docs = news_splits().train[:600]

    def make_model():
        cl.seed_everything(0)
        return internlm.InternLMForCausalLM(internlm.tiny())

    def make_data():
        return lm_dataset(docs, tok, args.block, args.batch, shuffle=True, seed=0)

    rounds = []
    for r in range(args.rounds):
        rounds.append(compare_train_loops(make_model, make_data, steps=args.steps,
                                          pynative_steps=args.pynative_steps))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in rounds[-1].items()))
    median = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    base = median["LLMTrainer (graph)"]
    print(f"\ninternlm.tiny(), batch {args.batch} x {args.block} tokens, median of {args.rounds} rounds")
    for name, s in median.items():
        print(f"  {name:24s} {s * 1000:8.1f} ms/step   {s / base:5.2f} x LLMTrainer (graph)")


if __name__ == "__main__":
    main()
