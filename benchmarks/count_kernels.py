"""Kernel launches per call of chapter 12's model (InternLM-tiny: hidden 128, 2 layers, random
weights, which do not change the count), batch 8, prompt 16: one warm greedy ``generate`` of 32
new tokens per decode engine (GRAPH: the compiled prefill + 31 decode steps = 32 engine calls),
and one PyNative ``generation.decode_step`` on a growing cache.

    .venv/bin/python benchmarks/count_kernels.py layers|folded|pynative

Counts come from MindSpore's CPU profiler (``profile_train_step.profile_mindspore``); the
times it also reports are not used (the profiler slows every kernel). Prints the total, the
count per engine call, and the counts by kernel type."""
import sys

import numpy as np

import course_lib as cl
from course_lib import internlm
from course_lib.generation import decode_step, generate, prefill
from profile_train_step import profile_mindspore

NEW, BATCH, PROMPT = 32, 8, 16


def main(which: str) -> None:
    cl.setup(device="CPU", seed=0, quiet=True)
    model = internlm.InternLMForCausalLM(internlm.tiny())
    model.set_train(False)
    prompts = [[(7 + 31 * i + 101 * r) % 8000 for i in range(PROMPT)] for r in range(BATCH)]
    if which in ("layers", "folded"):
        call = lambda: generate(model, prompts, NEW, engine=which)   # noqa: E731
        call()                                                        # compile outside the count
        calls, per = profile_mindspore(call, 1)[1], NEW
    elif which == "pynative":
        state = prefill(model, prompts, 0)
        decode_step(model, state, np.argmax(state.logits, -1))         # warm
        calls = profile_mindspore(lambda: decode_step(model, state, np.argmax(state.logits, -1)), 1)[1]
        per = 1
    else:
        raise SystemExit(f"usage: count_kernels.py layers|folded|pynative, not {which!r}")
    total = sum(calls.values())
    print(f"{which}: {total:.0f} kernels, {total / per:.1f} per engine call")
    print(", ".join(f"{k} {v / per:.1f}" for k, v in sorted(calls.items(), key=lambda kv: -kv[1])))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "layers")
