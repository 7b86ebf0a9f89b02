"""Does LoRA learn chapter 08's sentiment task? Accuracy by base model and number of steps.

    COURSE_SCALE=ci .venv/bin/python benchmarks/lora_payoff.py [--steps 60 200 --n-eval 96]

Chapter 08 fine-tunes ``zoo``'s news-pretrained InternLM-tiny on review sentiment. This
script runs the chapter's CI-scale LoRA recipe (``zoo.lora_recipe()`` at the scale in force:
r=8 on all seven linear layers, lr 5e-3, batch 8, 480 training reviews) and full
fine-tuning (lr 1e-3) on two bases:

* the base of the scale in force (``zoo.load_or_train("internlm-tiny")``: 60 pretraining
  steps at CI scale), and
* the full-scale base (1200 steps of batch 16 x 128; trained and cached on first use, about
  11 minutes on a 2-core CPU),

for each ``--steps`` count, and prints test accuracy next to the majority-class baseline
(``--n-eval`` test reviews). It is the measurement behind issue 10's item 6 (chapter 08's
LoRA payoff at CI scale) and behind the table in notebook 08, section 7.
"""
from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace

import numpy as np

import course_lib as cl
from course_lib.scale import at_scale, current_scale


def base(scale: str):
    """The zoo base trained with the recipe of ``scale`` (cached after the first call)."""
    from course_lib import zoo
    with at_scale(scale):
        return zoo.load_or_train("internlm-tiny")


def run(scale: str, method: str, steps: int, train, test, recipe) -> tuple[float, float]:
    """(test accuracy, seconds) after fine-tuning a fresh copy of the ``scale`` base."""
    from course_lib import sft, zoo
    model, tok, _ = base(scale)
    start = time.perf_counter()
    if method == "lora":
        zoo.sentiment_lora_run(model, tok, replace(recipe, steps=steps), progress=False)
    else:
        sft.finetune(model, tok, train, method="full", steps=steps, lr=1e-3,
                     batch_size=recipe.batch_size, max_len=recipe.max_len,
                     warmup_steps=recipe.warmup_steps, seed=recipe.seed)
    seconds = time.perf_counter() - start
    return sft.accuracy(model, tok, test, recipe.max_len, batch_size=32), seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, nargs="+", default=[60, 200])
    ap.add_argument("--n-eval", type=int, default=96)
    args = ap.parse_args()
    cl.setup(device="CPU", seed=0, quiet=True)
    from course_lib import zoo
    scale = current_scale()
    recipe = zoo.lora_recipe()
    train, _, test = zoo.sentiment_examples(recipe.train_examples, args.n_eval)
    positive = np.mean([label for _, label in test])
    print(f"load average {os.getloadavg()[0]:.2f}; recipe of scale {scale!r}: {recipe}")
    print(f"{len(test)} test reviews, majority-class baseline {max(positive, 1 - positive):.3f}")
    for base_scale in dict.fromkeys([scale, "full"]):
        _, _, info = base(base_scale)
        print(f"base pretrained at scale {base_scale!r}: {info}")
        for method in ("lora", "full"):
            for steps in args.steps:
                acc, seconds = run(base_scale, method, steps, train, test, recipe)
                print(f"    {method:<4} {steps:4d} steps: accuracy {acc:.3f} ({seconds:.1f} s)",
                      flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
