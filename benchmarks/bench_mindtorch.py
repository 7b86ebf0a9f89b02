"""The PyTorch demo trained on real PyTorch, on mindtorch and as native MindSpore, one run.

    .venv/bin/python benchmarks/bench_mindtorch.py [--steps 40]

Same initial weights, same news batches, same hand-written SGD (on mindtorch: the
``value_and_grad`` workaround). The three backends run one after the other (mindtorch in
its own process, as it must); the printed times are only comparable as ratios within one
run. Also prints how far each loss curve is from PyTorch's. This is not a test.
"""
import argparse
import tempfile
from pathlib import Path

import course_lib as cl
from course_lib.migration import run_torch_demo as demo


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--lr", type=float, default=0.3)
    args = ap.parse_args()
    cl.setup(device="CPU", mode="pynative", seed=0, quiet=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = demo.prepare_inputs(Path(tmp) / "inputs.npz", steps=args.steps)
        cfg, weights, batches = demo.load_inputs(path)
        results = {"torch": demo.measure_torch_api("torch", cfg, weights, batches, args.lr),
                   "mindspore": demo.measure_mindspore(cfg, weights, batches, args.lr),
                   "mindtorch": demo.run_demo("mindtorch", path, args.lr)}
    base = results["torch"]["train_seconds"]
    diffs = demo.compare(results)
    print(f"{args.steps} SGD steps, batch {cfg.batch_size} x {cfg.max_len}, vocab {cfg.vocab_size}")
    for name, r in results.items():
        d = diffs.get(name, {"loss_max_diff": 0.0})
        print(f"  {name:9s} {r['train_loop']:24s} {r['train_seconds'] / args.steps * 1000:7.1f} ms/step "
              f"= {r['train_seconds'] / base:4.1f}x PyTorch | final loss {r['train_losses'][-1]:.4f} "
              f"| max |loss - torch| {d['loss_max_diff']:.1e}")


if __name__ == "__main__":
    main()
