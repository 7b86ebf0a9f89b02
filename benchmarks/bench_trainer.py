"""Why LLMTrainer is built on a custom TrainStep: its speed next to Model.train's step.

    .venv/bin/python benchmarks/bench_trainer.py                     # internlm.tiny(), 8 x 64
    .venv/bin/python benchmarks/bench_trainer.py --steps 40 --batch 16 --block 128

The same InternLM-tiny and the same news batches are trained by ``nn.TrainOneStepCell``
(what ``Model.train`` runs each step, GRAPH mode), by LLMTrainer's ``TrainStep`` in GRAPH
mode (+ global-norm clipping, the norm returned) and by ``TrainStep`` in PYNATIVE mode.
``course_lib.measure.compare_train_steps`` interleaves them step by step (one of each
per round) so that background load hits all alike, and prints the median step time and
the ratios to ``TrainStep (graph)``.
"""
import argparse

import course_lib as cl


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--pynative-steps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--block", type=int, default=64)
    args = ap.parse_args()
    cl.setup(device="CPU", mode="pynative", seed=0, quiet=True)

    from course_lib import internlm
    from course_lib.data import news_splits
    from course_lib.pipelines import lm_dataset
    from course_lib.tokenizer import load_tokenizer
    from course_lib.measure import compare_train_steps

    tok = load_tokenizer()
    docs = news_splits().train[:2000]

    def make_model():
        cl.seed_everything(0)
        return internlm.InternLMForCausalLM(internlm.tiny())

    def make_data():
        return lm_dataset(docs, tok, args.block, args.batch, shuffle=True, seed=0)

    seconds = compare_train_steps(make_model, make_data, steps=args.steps,
                                  pynative_steps=args.pynative_steps)
    base = seconds["TrainStep (graph)"]
    print(f"internlm.tiny(), batch {args.batch} x {args.block} tokens, median over "
          f"{args.steps} interleaved steps ({args.pynative_steps} for PyNative)")
    for name, s in seconds.items():
        print(f"  {name:26s} {s * 1000:8.1f} ms/step   {s / base:5.2f} x TrainStep (graph)")


if __name__ == "__main__":
    main()
