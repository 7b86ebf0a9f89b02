"""Does LoRA learn chapter 08's sentiment task? Accuracy by base, recipe scale and steps.

    .venv/bin/python benchmarks/lora_payoff.py [--scales ci full] [--bases shipped own]
                                               [--steps N ...] [--methods lora full]
                                               [--targets q_proj v_proj] [--lr 1e-2]

Chapter 08 fine-tunes the zoo's news-pretrained InternLM-tiny on review sentiment. For each
``--scales`` entry this script takes that scale's LoRA recipe (``zoo.lora_recipe()``: r=8 on
all seven linear layers, lr 5e-3) and chapter 08's test reviews at that scale (``N_EVAL``),
and on each base

* ``shipped``: the base in ``data/base/`` (the default of every chapter), and
* ``own``: the base trained with that scale's pretraining recipe (``COURSE_BASE=own``;
  trained and cached on first use: seconds at ci, about 10 minutes at full),

prints the majority-class baseline and the test accuracy before fine-tuning, after LoRA and
after full fine-tuning (lr 1e-3, the same data and schedule) -- for the recipe's own number
of steps, or for each ``--steps`` count. ``--targets`` / ``--lr`` change the LoRA recipe's
adapted layers and learning rate (the q/v-only comparison in notebook 08, section 5). It is the measurement behind the table in notebook
08, section 7, and behind benchmarks/RESULTS.md's "LoRA payoff" section.
"""
from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace

import numpy as np

import course_lib as cl
from course_lib.scale import at_scale

N_EVAL = {"ci": 200, "full": 600}     # notebook 08's N_EVAL at each scale
FULL_LR = 1e-3                         # notebook 08's full fine-tuning lr


def fresh_base(source: str):
    from course_lib import zoo
    return zoo.load_base(source=source, progress=False)


def run(source: str, method: str, recipe, train, test) -> tuple[float, float]:
    """(test accuracy, seconds) after fine-tuning a fresh copy of the base."""
    from course_lib import sft, zoo
    model, tok, _ = fresh_base(source)
    start = time.perf_counter()
    if method == "lora":
        zoo.sentiment_lora_run(model, tok, recipe, progress=False)
    elif method == "full":
        sft.finetune(model, tok, train, method="full", steps=recipe.steps, lr=FULL_LR,
                     batch_size=recipe.batch_size, max_len=recipe.max_len,
                     warmup_steps=recipe.warmup_steps, seed=recipe.seed)
    seconds = time.perf_counter() - start
    return sft.accuracy(model, tok, test, recipe.max_len, batch_size=32), seconds


def scale_rows(scale: str, sources, steps_list, methods, overrides):
    from course_lib import zoo
    with at_scale(scale):
        recipe = zoo.lora_recipe(**overrides)
        train, _, test = zoo.sentiment_examples(recipe.train_examples, N_EVAL[scale])
        positive = np.mean([label for _, label in test])
        print(f"\nscale {scale!r}: {recipe}\n{len(test)} test reviews, majority-class "
              f"baseline {max(positive, 1 - positive):.3f}")
        for source in sources:
            print(f"  base {source}: {fresh_base(source)[2]}")
            print(f"    before fine-tuning: accuracy {run(source, 'none', recipe, train, test)[0]:.3f}")
            for steps in steps_list or [recipe.steps]:
                for method in methods:
                    acc, sec = run(source, method, replace(recipe, steps=steps), train, test)
                    print(f"    {method:<4} {steps:4d} steps: accuracy {acc:.3f} ({sec:.1f} s)",
                          flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", nargs="+", default=["ci", "full"], choices=["ci", "full"])
    ap.add_argument("--bases", nargs="+", default=["shipped"], choices=["shipped", "own"])
    ap.add_argument("--steps", type=int, nargs="+", help="default: each recipe's own steps")
    ap.add_argument("--methods", nargs="+", default=["lora", "full"], choices=["lora", "full"])
    ap.add_argument("--targets", nargs="+", help="LoRA's adapted layers (default: all seven)")
    ap.add_argument("--lr", type=float, help="LoRA's learning rate (default: the recipe's)")
    args = ap.parse_args()
    overrides = {k: v for k, v in (("targets", tuple(args.targets or ())), ("lr", args.lr)) if v}
    cl.setup(device="CPU", seed=0, quiet=True)
    print(f"load average {os.getloadavg()[0]:.2f} (1 min)")
    for scale in args.scales:
        scale_rows(scale, args.bases, args.steps, args.methods, overrides)
    print(f"\nload average {os.getloadavg()[0]:.2f} (1 min)")


if __name__ == "__main__":
    main()
