"""The notebook 07 playground's first press: a FRESH model (no compiled engine yet) samples
40 tokens the way the playground does, so the time includes compiling the decode engine.

    .venv/bin/python benchmarks/bench_first_call.py

The course aims at <= 2 s. Both notebook sizes of the Baichuan tiny twin (CI and full scale),
two presses each (the second one reuses the compiled engine). Load average before and after.
"""
import os
import time

import course_lib as cl
from course_lib import baichuan
from course_lib.baichuan import BaichuanForCausalLM
from course_lib.generation import generate

SIZES = {"ci": dict(hidden_size=128, num_layers=2, num_heads=4, intermediate_size=352),
         "full": dict(hidden_size=256, num_layers=4, num_heads=8, intermediate_size=704)}


def main():
    print("load average %.2f %.2f %.2f" % os.getloadavg())
    cl.setup(mode="graph", seed=0, quiet=True)         # as notebook 07
    for name, size in SIZES.items():
        model = BaichuanForCausalLM(baichuan.tiny(**size))
        for press in (1, 2):
            start = time.perf_counter()
            generate(model, [[5, 6, 7]], 40, do_sample=True, temperature=0.8, top_k=40, top_p=0.9,
                     repetition_penalty=1.1, seed=press)
            print(f"{name}-scale model, press {press}: 40 sampled tokens in "
                  f"{time.perf_counter() - start:.2f} s", flush=True)
    print("load average %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
