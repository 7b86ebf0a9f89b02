"""Train-step throughput: the course's Baichuan twin in MindSpore GRAPH mode vs the identical
architecture written in PyTorch (eager), same config, batch, sequence length, same weights.

    .venv/bin/python benchmarks/bench_baichuan_vs_torch.py            # the three sizes of RESULTS.md's train-step table
    .venv/bin/python benchmarks/bench_baichuan_vs_torch.py --sizes small
    .venv/bin/python benchmarks/bench_baichuan_vs_torch.py --hidden 384 --layers 3 --heads 6 --seq 96

Both steps do the same work: forward, next-token cross-entropy, backward, global-norm
clipping at 1.0, AdamW (decoupled weight decay on matrices). The torch model gets the
MindSpore model's initial weights and the first losses are compared, so the two really are
the same network (the torch model is tests/torch_baichuan.py, the reference the tests use).
Steps are timed in interleaved rounds (MindSpore, torch, MindSpore, ...)
and the best round of each is kept, so a busy machine slows both alike; the load average is
printed before and after every size (PyTorch suffers more from contention than MindSpore:
only numbers taken at a load average < 0.5 on this 2-core machine are comparable).

FLOP/s are model FLOPs (what the network needs, not what a kernel executes):
    forward  = 2 * tokens * (L * (4 h^2 + 3 h f) + V h)      dense layers + lm_head
             + 4 * L * B * T^2 * h                            q.k^T and probs.v (full T x T)
    step     = 3 * forward                                    backward = 2 x forward
peak fp32 = cores x clock x FLOPs/cycle, FLOPs/cycle = SIMD fp32 lanes (16 with avx512f,
8 with avx/avx2, 4 with sse) x 2 (fma flag: a fused multiply-add is 2 FLOPs) x FMA units
per core (2: not in the lscpu flags; x86 server cores since Haswell / Zen have two FMA pipes).
Prints one line per size ending in ``ratio MindSpore/PyTorch xN.NN``.
"""
import argparse
import os
import platform
import re
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import course_lib as cl
from course_lib import baichuan
from course_lib.baichuan import BaichuanForCausalLM
from course_lib.hf_weights import state_dict
from course_lib.layers import swiglu_width

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from torch_baichuan import TorchBaichuan  # noqa: E402  (the one torch reference, shared with tests)


SIZES = {   # the three rows of RESULTS.md's train-step table: (hidden, layers, heads, batch, seq)
    "small": (128, 2, 4, 8, 64),
    "medium": (256, 4, 8, 8, 128),
    "large": (512, 4, 8, 8, 256),
}


def load_average() -> str:
    return "load avg %.2f %.2f %.2f" % os.getloadavg()


def cpu_peak_flops() -> tuple[float, str]:
    """This CPU's fp32 peak from lscpu/cpuinfo: cores x clock x FLOPs/cycle, and the formula."""
    info = open("/proc/cpuinfo").read()
    flags = set(re.search(r"^flags\s*:(.*)$", info, re.M).group(1).split())
    mhz = float(re.search(r"^cpu MHz\s*:\s*([\d.]+)", info, re.M).group(1))
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    max_mhz = re.search(r"CPU max MHz:\s*([\d.]+)", lscpu)
    mhz = float(max_mhz.group(1)) if max_mhz else mhz
    cores = len(os.sched_getaffinity(0))
    lanes = 16 if "avx512f" in flags else 8 if {"avx", "avx2"} & flags else 4
    fma = 2 if "fma" in flags else 1
    fma_units = 2
    per_cycle = lanes * fma * fma_units
    peak = cores * mhz * 1e6 * per_cycle
    formula = (f"{cores} cores x {mhz / 1000:.3f} GHz x {per_cycle} FLOPs/cycle ({lanes} fp32 lanes "
               f"{'avx512f' if lanes == 16 else 'avx2' if lanes == 8 else 'sse'} x {fma} fma x "
               f"{fma_units} FMA units) = {peak / 1e9:.1f} GFLOP/s")
    return peak, formula


def train_step_flops(cfg, batch: int, seq: int) -> float:
    """Model FLOPs of one train step (formula in the module docstring)."""
    h, f, V, L = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.num_layers
    tokens = batch * seq
    forward = 2 * tokens * (L * (4 * h * h + 3 * h * f) + V * h) + 4 * L * batch * seq * seq * h
    return 3.0 * forward


def build_pair(hidden, layers, heads, batch, seq, lr=1e-3, wd=0.1):
    """The MindSpore train step and the torch train step on identical weights and batch."""
    from mindspore import Tensor
    from course_lib.training import AdamW, LossCell, TrainStep
    cfg = baichuan.tiny(hidden_size=hidden, num_layers=layers, num_heads=heads,
                        intermediate_size=swiglu_width(hidden))
    ms_model = BaichuanForCausalLM(cfg)
    tmodel = TorchBaichuan(cfg)
    tmodel.load_from(state_dict(ms_model))
    rng = np.random.default_rng(0)
    data = rng.integers(7, cfg.vocab_size, (batch, seq + 1)).astype(np.int32)
    x_ms, y_ms = Tensor(data[:, :-1]), Tensor(data[:, 1:])
    x_t, y_t = torch.from_numpy(data[:, :-1]).long(), torch.from_numpy(data[:, 1:]).long()
    ms_step = TrainStep(LossCell(ms_model), AdamW(ms_model.trainable_params(), lr, weight_decay=wd),
                        clip=1.0)
    decay = [p for p in tmodel.parameters() if p.ndim >= 2]
    no_decay = [p for p in tmodel.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.999), eps=1e-8)

    def torch_step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(tmodel(x_t).view(-1, cfg.vocab_size), y_t.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(tmodel.parameters(), 1.0)
        opt.step()
        return loss.item()

    def mindspore_step():
        return float(ms_step(x_ms, y_ms)[0].asnumpy())   # asnumpy: wait for the step to end

    return cfg, mindspore_step, torch_step


def timed(step, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        step()
    return (time.perf_counter() - start) / n


def bench_size(name, hidden, layers, heads, batch, seq, rounds, round_s, peak):
    load_before = load_average()
    cfg, ms_step, t_step = build_pair(hidden, layers, heads, batch, seq)
    start = time.perf_counter()
    first_ms = ms_step()
    compile_s = time.perf_counter() - start
    first_t = t_step()
    same = abs(first_ms - first_t) < 1e-3
    steps = {"ms": ms_step, "torch": t_step}
    n = {k: max(1, round(round_s / timed(f, 1))) for k, f in steps.items()}   # warm-up + calibrate
    best = {k: float("inf") for k in steps}
    for _ in range(rounds):                                   # interleaved: ms, torch, ms, ...
        for k, f in steps.items():
            best[k] = min(best[k], timed(f, n[k]))
    tokens, flops = batch * seq, train_step_flops(cfg, batch, seq)
    tps = {k: tokens / v for k, v in best.items()}
    gf = {k: flops / v / 1e9 for k, v in best.items()}
    print(f"[{name}] hidden {hidden}, {layers} layers, {heads} heads, vocab {cfg.vocab_size}, "
          f"{cfg.num_parameters():,} params, batch {batch} x seq {seq}; first loss MindSpore "
          f"{first_ms:.5f} torch {first_t:.5f} ({'same network' if same else 'MISMATCH'}); "
          f"MindSpore compile {compile_s:.1f} s")
    print(f"[{name}] {load_before} -> {load_average()[9:]}; train step tokens/s: MindSpore graph "
          f"{tps['ms']:,.0f} "
          f"({gf['ms']:.1f} GFLOP/s, {100 * gf['ms'] * 1e9 / peak:.1f}% of peak) | PyTorch eager "
          f"{tps['torch']:,.0f} ({gf['torch']:.1f} GFLOP/s, {100 * gf['torch'] * 1e9 / peak:.1f}% "
          f"of peak) | ratio MindSpore/PyTorch x{tps['ms'] / tps['torch']:.2f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="small,medium,large",
                    help=f"comma-separated subset of {list(SIZES)}")
    ap.add_argument("--hidden", type=int, help="a custom size instead of --sizes")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timed rounds")
    ap.add_argument("--round-seconds", type=float, default=2.0, help="target length of a round")
    ap.add_argument("--threads", type=int, help="threads of BOTH frameworks (default: their "
                    "defaults, = cores); 1 shows kernel speed without thread-sync stalls on a "
                    "busy machine")
    args = ap.parse_args()

    cl.setup(device="CPU", mode="graph", seed=0, quiet=True)
    if args.threads:
        import mindspore as ms
        ms.set_context(runtime_num_threads=args.threads)
        torch.set_num_threads(args.threads)
    peak, formula = cpu_peak_flops()
    import mindspore as ms
    print(f"CPU: {platform.processor() or platform.machine()}, peak fp32 = {formula}; "
          f"torch {torch.__version__} threads {torch.get_num_threads()}, MindSpore "
          f"{ms.__version__} runtime_num_threads {ms.get_context('runtime_num_threads')}")
    if args.hidden:
        sizes = {"custom": (args.hidden, args.layers, args.heads, args.batch, args.seq)}
    else:
        sizes = {k: SIZES[k] for k in args.sizes.split(",")}
    for name, dims in sizes.items():
        bench_size(name, *dims, rounds=args.rounds, round_s=args.round_seconds, peak=peak)


if __name__ == "__main__":
    main()
