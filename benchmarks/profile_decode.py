"""Per-operator profile of greedy generation in both frameworks: where a decode step's time
goes. Same model, weights and prompts as ``bench_generate_vs_torch.py``.

    .venv/bin/python benchmarks/profile_decode.py [--batch 1 --new 64 --top 10]

One warm ``generate`` call per framework runs under its profiler (MindSpore's profiler on
CPU: the compiled ``DecodeEngine``; ``torch.profiler``: transformers ``generate``). Per
generated token it prints the wall time, the summed operator (kernel) time and the number
of operator calls; wall minus operator time is what the framework spends between kernels
(scheduling, dispatch, the host loop).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import course_lib as cl  # noqa: E402
from _common import add_model_arguments  # noqa: E402
from bench_generate_vs_torch import load, torch_generate, torch_twin  # noqa: E402
from profile_train_step import profile_mindspore, profile_torch  # noqa: E402


def show(name: str, profile: tuple, tokens: int, top: int) -> None:
    times, calls, wall = profile
    kernels = sum(times.values())
    print(f"{name}: per token wall {wall / tokens:.2f} ms | operators {kernels / tokens:.2f} ms "
          f"in {sum(calls.values()) / tokens:.0f} calls | between operators "
          f"{(wall - kernels) / tokens:.2f} ms")
    for op, ms_ in sorted(times.items(), key=lambda kv: -kv[1])[:top]:
        print(f"    {op:<34s} {1e3 * ms_ / tokens:8.1f} us/token in {calls[op] / tokens:5.1f} calls "
              f"({100 * ms_ / kernels:4.1f}%)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_arguments(ap)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args()
    cl.setup(device="CPU", seed=0, quiet=True)
    from course_lib import internlm
    from course_lib.generation import generate
    from course_lib.layers import swiglu_width
    cfg = internlm.tiny(hidden_size=args.hidden, num_layers=args.layers, num_heads=args.heads,
                        intermediate_size=swiglu_width(args.hidden))
    model = internlm.InternLMForCausalLM(cfg)
    model.set_train(False)
    hf = torch_twin(model)
    new = args.new[0]
    prompts = [[(7 + 31 * i + 101 * r) % cfg.vocab_size for i in range(args.prompt)]
               for r in range(args.batch)]
    print(f"{load()}; hidden {cfg.hidden_size}, {cfg.num_layers} layers, batch {args.batch}, "
          f"prompt {args.prompt}, {new} new tokens (per-token numbers divide one call by {new})")
    ms_call = lambda: generate(model, prompts, new)             # noqa: E731
    pt_call = lambda: torch_generate(hf, prompts, new)          # noqa: E731
    assert ms_call() == pt_call(), "the two frameworks must generate the same tokens"
    show("PyTorch eager, transformers generate (torch.profiler, self CPU time)",
         profile_torch(pt_call, 1), new, args.top)
    show("MindSpore, course generate (GRAPH DecodeEngine; MindSpore profiler, CPU kernels)",
         profile_mindspore(ms_call, 1), new, args.top)
    print(load())


if __name__ == "__main__":
    main()
