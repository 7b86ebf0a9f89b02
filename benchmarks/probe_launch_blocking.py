"""Does ``ms.runtime.launch_blocking()`` take effect when it is called late in a process?

Each case runs in a fresh process: build chapter 07's model (Baichuan tiny, hidden 256, 4
layers, random weights), run what the case names, THEN call ``launch_blocking()``, then time
the PyNative decode step with a growing KV cache (``experiments.pynative_step_seconds``: batch 1,
greedy, median of 18 steps, twice):

* ``nothing``    — the call comes before any operator ran;
* ``graph_only`` — one forward of the model in GRAPH mode ran first (no PyNative operator);
* ``one_op``     — one PyNative operator (a tiny ``Tensor + 1``) ran first;
* ``never``      — no call at all: MindSpore's default asynchronous dispatch.

    .venv/bin/python benchmarks/probe_launch_blocking.py
"""
import os
import subprocess
import sys

CASES = ("nothing", "graph_only", "one_op", "never")


def child(case: str) -> None:
    import numpy as np
    import mindspore as ms
    from mindspore import Tensor
    import course_lib as cl
    from course_lib import baichuan
    from course_lib.experiments import pynative_step_seconds
    from course_lib.runtime import execution_mode
    cl.setup(device="CPU", mode="graph", seed=0, quiet=True)
    model = baichuan.BaichuanForCausalLM(baichuan.tiny(hidden_size=256, num_layers=4, num_heads=8,
                                                       intermediate_size=704))
    model.set_train(False)
    if case == "graph_only":
        model(Tensor(np.ones((1, 8), np.int32)))
    elif case == "one_op":
        with execution_mode("pynative"):
            (Tensor(np.ones(3, np.float32)) + 1).asnumpy()
    if case != "never":
        ms.runtime.launch_blocking()

    def median_step_ms():          # 20 greedy decode steps, the first two left out
        return 1000 * float(np.median(pynative_step_seconds(model, [[5, 6, 7, 8, 9, 10]], 21)[2:]))
    print("RESULT", " ".join(f"{median_step_ms():.2f}" for _ in range(2)), flush=True)


def main() -> None:
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    for case in CASES:
        out = subprocess.run([sys.executable, __file__, "--child", case], capture_output=True,
                             text=True, env=dict(os.environ, GLOG_v="3"), timeout=600)
        line = next((l for l in out.stdout.splitlines() if l.startswith("RESULT")), None)
        if line is None:
            sys.exit(f"{case} failed:\n{out.stderr[-2000:]}")
        print(f"{case:11s} ms per PyNative decode step (two medians): {line.split(maxsplit=1)[1]}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
    else:
        main()
