"""Per-operator profile of one train step in both frameworks: MindSpore's profiler on CPU
(GRAPH mode, the course's ``TrainStep``) vs ``torch.profiler`` (eager), same network, same
weights, same batch as ``bench_baichuan_vs_torch.py`` (which builds both).

    .venv/bin/python benchmarks/profile_train_step.py --size small [--steps 5 --top 12]

Prints, per framework, the operator types that take the time (ms per step and share of the
summed operator time) and the step's wall time; the gap between the two is dispatch and
framework overhead. MindSpore times come from ``cpu_op_type_info_0.csv`` of the profiler's
FRAMEWORK output; torch times are ``self_cpu_time_total`` of ``key_averages()``.
"""
import argparse
import csv
import glob
import os
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import course_lib as cl  # noqa: E402
from bench_baichuan_vs_torch import SIZES, build_pair, load_average  # noqa: E402


def profile_mindspore(step, steps: int) -> tuple[dict, dict, float]:
    """{op type: ms per step} and {op type: calls per step} from MindSpore's CPU profiler,
    and the wall ms per step."""
    from mindspore.profiler import Profiler
    out = tempfile.mkdtemp(prefix="ms_profile_")
    profiler = Profiler(output_path=out)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    wall = (time.perf_counter() - start) / steps * 1e3
    profiler.analyse()
    path = glob.glob(os.path.join(out, "**", "cpu_op_type_info_0.csv"), recursive=True)[0]
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return ({r["op_type"]: float(r["total_compute_time"]) / steps for r in rows},
            {r["op_type"]: int(r["type_occurrences"]) / steps for r in rows}, wall)


def profile_torch(step, steps: int) -> tuple[dict, dict, float]:
    """{aten op: self CPU ms per step} and {aten op: calls per step} from torch.profiler,
    and the wall ms per step."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        wall = (time.perf_counter() - start) / steps * 1e3
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    return ({e.key: e.self_cpu_time_total / 1e3 / steps for e in events},
            {e.key: e.count / steps for e in events}, wall)


def show(name: str, profile: tuple, top: int) -> None:
    times, _, wall = profile
    total = sum(times.values())
    print(f"{name}: step wall {wall:.1f} ms, summed operator time {total:.1f} ms/step "
          f"({len(times)} operator types)")
    for op, ms_ in sorted(times.items(), key=lambda kv: -kv[1])[:top]:
        print(f"    {op:<40s} {ms_:8.2f} ms/step  {100 * ms_ / total:5.1f}%")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="small", choices=list(SIZES))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    cl.setup(device="CPU", mode="graph", seed=0, quiet=True)
    hidden, layers, heads, batch, seq = SIZES[args.size]
    print(f"[{args.size}] hidden {hidden}, {layers} layers, {heads} heads, batch {batch} x seq "
          f"{seq}; {load_average()}")
    _, ms_step, t_step = build_pair(hidden, layers, heads, batch, seq)
    for _ in range(2):                    # compile and warm up both
        ms_step(), t_step()
    show("PyTorch eager (torch.profiler, self CPU time)", profile_torch(t_step, args.steps), args.top)
    show("MindSpore GRAPH (MindSpore profiler, CPU kernels)",
         profile_mindspore(ms_step, args.steps), args.top)
    print(f"after: {load_average()}")


if __name__ == "__main__":
    main()
