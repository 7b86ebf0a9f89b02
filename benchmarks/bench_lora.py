"""LoRA vs full fine-tuning, measured side by side in one run.

    .venv/bin/python benchmarks/bench_lora.py            # tiny + small InternLM, 7B computed
    .venv/bin/python benchmarks/bench_lora.py --steps 30 --rounds 5

For each model size the same random batch (batch x seq tokens) is trained with
``LLMTrainer`` in GRAPH mode twice: LoRA (r=8 on q_proj and v_proj, optimizer over the
adapters only) and full fine-tuning (every parameter). The two are timed in alternating
rounds (the order reversed every other round) so that background load hits both alike; the
printed step time is the median over rounds and the ratio is full / LoRA. Parameter counts and optimizer-state bytes are exact
(read from the optimizer's own state Parameters). For the InternLM-7B preset nothing is
trained: its LoRA parameter count is computed from the real module structure, built
without allocating weights, and checked against the closed form.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import course_lib as cl
from course_lib.blocks import count_parameters
from course_lib.experiments import CpuShare
from course_lib.runtime import turn_order


def build(config, method: str, r: int, batch: int, seq: int, steps: int):
    from course_lib.internlm import InternLMForCausalLM
    from course_lib.lora import inject_lora, lora_parameters
    from course_lib.pipelines import BlockSource, make_dataset
    from course_lib.trainer import LLMTrainer

    cl.seed_everything(0)
    model = InternLMForCausalLM(config)
    trainable = None
    if method == "lora":
        inject_lora(model, ["q_proj", "v_proj"], r=r, alpha=2 * r)
        trainable = lora_parameters(model)
    blocks = np.random.default_rng(0).integers(7, config.vocab_size, (4 * batch, seq + 1))
    data = make_dataset(BlockSource(blocks.astype(np.int32)), batch, seed=0)
    return LLMTrainer(model, data, lr=1e-4, steps=10_000, warmup_steps=1, weight_decay=0.0,
                      clip=1.0, trainable=trainable, mode="graph")


def time_steps(trainer, steps: int) -> float:
    start = time.perf_counter()
    trainer.train(steps=steps)
    return (time.perf_counter() - start) / steps


def compare(name, config, r, batch, seq, steps, rounds):
    from course_lib.sft import optimizer_state_bytes
    trainers = {m: build(config, m, r, batch, seq, steps) for m in ("lora", "full")}
    for t in trainers.values():          # compile + warm up
        t.train(steps=2)
    times = {m: [] for m in trainers}
    for k in range(rounds):
        for m in turn_order(trainers, k):        # LoRA first in even rounds, full first in odd ones
            times[m].append(time_steps(trainers[m], steps))
    print(f"\n== {name}: hidden {config.hidden_size}, layers {config.num_layers}, vocab "
          f"{config.vocab_size}; batch {batch} x seq {seq}; median of {rounds} rounds x {steps} steps")
    print(f"{'method':<6} {'trainable':>12} {'total':>12} {'fraction':>9} "
          f"{'optimizer state':>16} {'step ms':>9}")
    med = {}
    for m, t in trainers.items():
        total = count_parameters(t.model)
        med[m] = statistics.median(times[m])
        print(f"{m:<6} {t.num_trainable:>12,} {total:>12,} {100 * t.num_trainable / total:>8.3f}% "
              f"{optimizer_state_bytes(t.optimizer):>14,} B {1000 * med[m]:>9.1f}")
    lo, fu = trainers["lora"], trainers["full"]
    print(f"ratios full/LoRA: trainable {fu.num_trainable / lo.num_trainable:,.0f}x, optimizer "
          f"state {optimizer_state_bytes(fu.optimizer) / optimizer_state_bytes(lo.optimizer):,.0f}x, "
          f"step time {med['full'] / med['lora']:.2f}x")
    return med["full"] / med["lora"]


def seven_b(r: int):
    from course_lib.internlm import InternLMForCausalLM, internlm_7b
    from course_lib.lora import inject_lora, parameter_counts
    from course_lib.memory import build_lazy, training_state_bytes

    cfg = internlm_7b()
    start = time.perf_counter()
    model = build_lazy(InternLMForCausalLM, cfg)          # shapes only, no 29 GB of weights
    report = inject_lora(model, ["q_proj", "v_proj"], r=r, alpha=2 * r)
    seconds = time.perf_counter() - start
    closed = cfg.num_layers * 2 * r * (cfg.hidden_size + cfg.hidden_size)
    base = cfg.num_parameters()
    count = parameter_counts(model)
    print(f"\n== InternLM-7B preset (computed, built lazily in {seconds:.1f} s): LoRA r={r} on "
          "q_proj, v_proj")
    print(f"adapter parameters {report.added:,} (closed form {closed:,}, equal: "
          f"{report.added == closed}); base {base:,} (module count {count.total - count.trainable:,})")
    print(f"trainable fraction {100 * closed / base:.4f}% of the base  (goal <= 1%: "
          f"{closed / base <= 0.01})")
    full = training_state_bytes(trainable=base)
    lora = training_state_bytes(trainable=closed, frozen=base)
    print("training state, mixed precision, GiB (no activations):")
    for k in ("weights", "gradients", "master_weights", "optimizer_states", "total"):
        print(f"  {k:<17} full {full.gib()[k]:>8.2f}   LoRA {lora.gib()[k]:>8.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--r", type=int, default=8)
    args = parser.parse_args()
    cl.setup(device="CPU", mode="graph", seed=0)
    from course_lib.internlm import tiny
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with CpuShare() as cpu:
        ratios = [compare("InternLM-tiny", tiny(), args.r, 8, 128, args.steps, args.rounds),
                  compare("InternLM-small", tiny(hidden_size=512, num_layers=4, num_heads=8,
                                                 intermediate_size=1376, name="internlm-small"),
                          args.r, 8, 128, max(2, args.steps // 4), args.rounds)]
    print(f"\n{cpu.summary()}")
    print(f"\nLoRA step faster than full fine-tuning in both sizes: {min(ratios) > 1.0}")
    seven_b(args.r)


if __name__ == "__main__":
    main()
