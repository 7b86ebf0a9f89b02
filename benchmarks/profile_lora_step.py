"""Where the time of chapter 08's LoRA and full fine-tuning steps goes, phase by phase.

    COURSE_SCALE=full .venv/bin/python benchmarks/profile_lora_step.py

Chapter 08 times a whole optimizer step of each method (full / LoRA ~1.1x) against a FLOP
bound of ~1.4x. This script splits the same steps (the chapter's model, recipe, batch and
learning rates; GRAPH mode) into three calls, each its own compiled graph, timed in
alternating rounds (the order reversed every other round), one batch:

* ``forward``:  the loss only (``LossCell``), the same work for both methods but LoRA's
  adapter branches;
* ``backward``: the loss and the gradients of the trainable parameters, reduced to their
  global norm (one scalar to wait for);
* ``step``:     the chapter's ``TrainStep``: the above plus clipping and the AdamW update.

``step - forward`` is the gradient pass and the update together, ``backward - forward`` the
gradient pass, ``step - backward`` the update: differences of medians, not separate
measurements (a few ms of noise can make the small update difference negative).
"""
from __future__ import annotations

import os
import statistics
import time

import course_lib as cl
from course_lib.experiments import CpuShare
from course_lib.runtime import turn_order

PHASES = ("forward", "backward", "step")


def build_calls(method: str, lr: float) -> tuple:
    """``({phase: callable} over one fixed batch, trainable parameter count, model config)``
    for ``method``, on a fresh copy of chapter 08's base."""
    from mindspore import Tensor, nn, ops
    from course_lib import sft, zoo
    from course_lib.tokenizer import load_tokenizer
    from course_lib.training import global_norm

    recipe, tok = zoo.lora_recipe(), load_tokenizer()
    train, _, _ = zoo.sentiment_examples(recipe.train_examples, 1)
    model, _, _ = zoo.load_or_train("internlm-tiny")
    trainer, trainable, _ = sft.finetune_trainer(
        model, tok, train[: 4 * recipe.batch_size], method=method, r=recipe.r, alpha=recipe.alpha,
        targets=recipe.targets, steps=1_000, lr=lr, batch_size=recipe.batch_size,
        max_len=recipe.max_len, warmup_steps=1, seed=recipe.seed)
    ids, labels = (Tensor(a) for a in sft.build_sft_arrays(tok, train[: recipe.batch_size],
                                                            recipe.max_len))
    step = trainer.train_step

    class GradNorm(nn.Cell):
        def __init__(self):
            super().__init__()
            self.loss_net, self.weights = step.loss_net, step.weights
            self.grad = ops.GradOperation(get_by_list=True)

        def construct(self, x, y):
            return global_norm(self.grad(self.loss_net, self.weights)(x, y))

    grad_norm = GradNorm()
    return {"forward": lambda: step.loss_net(ids, labels).asnumpy(),
            "backward": lambda: grad_norm(ids, labels).asnumpy(),
            "step": lambda: step(ids, labels)[0].asnumpy()}, sum(p.size for p in trainable), model.config


def flop_bounds(cfg, adapter_params: int) -> dict:
    """Matmul FLOPs per token of each phase, full and LoRA, as chapter 08 counts them: forward
    2W + A (+ 2 per adapter parameter), activation gradients 2W + 2A, weight gradients 2W
    (full) or 4 per adapter parameter (LoRA)."""
    from course_lib import zoo
    h, f, s, n = cfg.hidden_size, cfg.intermediate_size, zoo.lora_recipe().max_len, cfg.num_layers
    W = n * (4 * h * h + 3 * h * f) + cfg.vocab_size * h
    A = 4 * s * h * n
    P = adapter_params
    return {"forward": (2 * W + A, 2 * W + A + 2 * P),
            "gradients": (4 * W + 2 * A, 2 * W + 2 * A + 4 * P),
            "step": (6 * W + 3 * A, 4 * W + 3 * A + 6 * P)}


def median_ms(calls: dict, rounds: int, per_round: int) -> dict:
    """Median ms per call of every (method, phase), the methods taking turns each round."""
    for phases in calls.values():
        for call in phases.values():
            call()                                        # compile, untimed
    times = {(m, p): [] for m in calls for p in PHASES}
    for k in range(rounds):
        for m in turn_order(list(calls), k):
            for p in PHASES:
                for _ in range(per_round):
                    t0 = time.perf_counter()
                    calls[m][p]()
                    times[(m, p)].append(time.perf_counter() - t0)
    return {key: 1000 * statistics.median(t) for key, t in times.items()}


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--per-round", type=int, default=10)
    args = ap.parse_args()
    cl.setup(device="CPU", mode="graph", seed=0, quiet=True)
    from course_lib.zoo import lora_recipe
    calls, trainable = {}, {}
    for method, lr in (("lora", lora_recipe().lr), ("full", 1e-3)):   # chapter 08's two lrs
        calls[method], trainable[method], cfg = build_calls(method, lr)
    from course_lib.scale import current_scale
    print(f"COURSE_SCALE={current_scale()}; load average before: {os.getloadavg()[0]:.2f}")
    with CpuShare() as cpu:
        ms_ = median_ms(calls, args.rounds, args.per_round)
    print(cpu.summary())
    print(f"trainable parameters: LoRA {trainable['lora']:,}, full {trainable['full']:,}")
    bounds = flop_bounds(cfg, trainable["lora"])
    print("FLOP bound full/LoRA: " + ", ".join(f"{k} {fu / lo:.2f}x" for k, (fu, lo) in bounds.items()))
    print(f"{'ms per call':<22} {'LoRA':>8} {'full':>8} {'full/LoRA':>10}")
    for name in PHASES:
        lo, fu = ms_[("lora", name)], ms_[("full", name)]
        print(f"{name:<22} {lo:8.1f} {fu:8.1f} {fu / lo:9.2f}x")
    for name, (a, b) in (("step - forward", ("step", "forward")),
                         ("backward - forward", ("backward", "forward")),
                         ("step - backward", ("step", "backward"))):
        lo = ms_[("lora", a)] - ms_[("lora", b)]
        fu = ms_[("full", a)] - ms_[("full", b)]
        print(f"{name:<22} {lo:8.1f} {fu:8.1f} {fu / lo:9.2f}x")


if __name__ == "__main__":
    main()
