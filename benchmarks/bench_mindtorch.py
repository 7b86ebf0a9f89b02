"""The PyTorch demo trained on real PyTorch, on mindtorch and as native MindSpore, one run.

    .venv/bin/python benchmarks/bench_mindtorch.py [--steps 40]

Same initial weights, same news batches, the same hand-written SGD (on mindtorch: the
``value_and_grad`` workaround), every run in its own fresh process, one after the other
(``run_torch_demo.time_steps``): PyTorch; native MindSpore and mindtorch, each with
MindSpore's default asynchronous dispatch and with ``ms.runtime.launch_blocking()``. Both
MindSpore loops take their gradients from ``mindspore.value_and_grad``, update each
parameter in place and read the loss at every step (what still differs: the model code,
int32 vs int64 ids, mindtorch attaching each gradient to ``p.grad``). Prints the median
ms per step (the first step left out) and per phase, the ratios that change one thing
(the dispatch; the backend at the same dispatch), and how far each loss curve is from
PyTorch's. Times are only comparable within one run. This is not a test.
"""
import argparse
import tempfile
from pathlib import Path

import numpy as np

import course_lib as cl
from course_lib.migration import run_torch_demo as demo

RUNS = (("torch", False), *demo.SPEED_RUNS)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--lr", type=float, default=0.3)
    args = ap.parse_args()
    cl.setup(device="CPU", mode="pynative", seed=0, quiet=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = demo.prepare_inputs(Path(tmp) / "inputs.npz", steps=args.steps)
        cfg = demo.load_inputs(path)[0]
        runs = demo.compare_speed(path, lr=args.lr, runs=RUNS)
    by = {(r["backend"], r["blocking"]): r for r in runs}
    ref = np.asarray(by[("torch", False)]["losses"])
    print(f"{args.steps} SGD steps, batch {cfg.batch_size} x {cfg.max_len}, vocab {cfg.vocab_size}; "
          "each run in a fresh process")
    for (backend, blocking), r in by.items():
        phases = ", ".join(f"{k} {demo.median_ms(v):.1f}" for k, v in r["phase_seconds"].items())
        dispatch = "" if backend == "torch" else (" blocking" if blocking else " async")
        print(f"  {backend + dispatch:20s} {demo.median_ms(r['step_seconds']):7.1f} ms/step "
              f"({phases}) | max |loss - torch| {np.abs(np.asarray(r['losses']) - ref).max():.1e}")
    step = {k: demo.median_ms(r["step_seconds"]) for k, r in by.items()}
    for backend in ("mindspore", "mindtorch"):
        print(f"  {backend}: async / blocking dispatch {step[(backend, False)] / step[(backend, True)]:.2f}x")
    for blocking in (True, False):
        print(f"  mindtorch / native MindSpore, both {'blocking' if blocking else 'async'}: "
              f"{step[('mindtorch', blocking)] / step[('mindspore', blocking)]:.2f}x")
    print(f"  native MindSpore (blocking) / PyTorch: {step[('mindspore', True)] / step[('torch', False)]:.2f}x")


if __name__ == "__main__":
    main()
