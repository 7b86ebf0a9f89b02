"""Greedy generation: the course's default ``generate`` vs Hugging Face ``generate`` on torch,
same architecture, same weights, one run.

    .venv/bin/python benchmarks/bench_generate_vs_torch.py [--hidden 256 --layers 4 --heads 8
        --new 64 256 --batch 1 8 --repeats 2]

The model is InternLM's tiny twin (RoPE, separate q/k/v with biases, SwiGLU, RMSNorm), which
is exactly ``transformers.LlamaForCausalLM(attention_bias=True)``; the torch model gets the
MindSpore weights (``course_lib.hf_weights``) and both must produce the same tokens
(checked). Greedy, KV cache on in both, every row generates exactly ``new`` tokens (no EOS).

Per case (batch, new tokens): first a call of each framework on a fresh shape — for
MindSpore this includes compiling the decode step for that batch size and cache bucket,
reported as "first call" — then ``--repeats`` interleaved timed calls (MindSpore, torch,
MindSpore, ...); the best of each is kept, so a busy machine slows both alike. Tokens/s
count every generated token of every row. The load average is printed before and after.
On a shared machine ``--threads 1`` avoids PyTorch's OpenMP barrier stalls (see RESULTS.md).
"""
import argparse
import os
import time

import numpy as np
import torch

import course_lib as cl
from _common import add_model_arguments
from course_lib.layers import swiglu_width
from course_lib import internlm
from course_lib.generation import generate
from course_lib.hf_weights import llama_config_kwargs, state_dict
from course_lib.internlm import InternLMForCausalLM


def load() -> str:
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def torch_twin(model):
    from transformers import LlamaConfig, LlamaForCausalLM
    hf = LlamaForCausalLM(LlamaConfig(**llama_config_kwargs(model.config))).eval()
    hf.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in state_dict(model).items()},
                       strict=True)
    hf.generation_config.eos_token_id = None
    hf.generation_config.pad_token_id = 0
    return hf


def torch_generate(hf, prompts, new):
    ids = torch.tensor(prompts, dtype=torch.long)
    with torch.no_grad():
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                          min_new_tokens=new, do_sample=False, use_cache=True)
    return out[:, ids.shape[1]:].tolist()


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_arguments(ap)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0,
                    help="intra-op threads of BOTH frameworks (0 = their defaults: one per core)")
    args = ap.parse_args()
    print(load())
    if args.threads:
        from mindspore import device_context
        device_context.cpu.op_tuning.threads_num(args.threads)
        torch.set_num_threads(args.threads)
    cl.setup(device="CPU", seed=0, quiet=True)
    cfg = internlm.tiny(hidden_size=args.hidden, num_layers=args.layers, num_heads=args.heads,
                        intermediate_size=swiglu_width(args.hidden))
    model = InternLMForCausalLM(cfg)
    model.set_train(False)
    hf = torch_twin(model)
    print(f"model: InternLM tiny twin == LlamaForCausalLM(attention_bias=True), hidden "
          f"{cfg.hidden_size}, {cfg.num_layers} layers, {cfg.num_heads} heads, FFN "
          f"{cfg.intermediate_size}, vocab {cfg.vocab_size}, {cfg.num_parameters():,} parameters; "
          f"prompt {args.prompt} tokens; greedy; torch {torch.__version__} "
          f"({torch.get_num_threads()} threads); best of {args.repeats}")
    for batch in args.batch:
        prompts = [[(7 + 31 * i + 101 * r) % cfg.vocab_size for i in range(args.prompt)]
                   for r in range(batch)]
        for new in args.new:
            first_ms, ours = timed(lambda: generate(model, prompts, new))
            first_pt, theirs = timed(lambda: torch_generate(hf, prompts, new))
            best = {"ms": float("inf"), "pt": float("inf")}
            for _ in range(args.repeats):
                best["ms"] = min(best["ms"], timed(lambda: generate(model, prompts, new))[0])
                best["pt"] = min(best["pt"], timed(lambda: torch_generate(hf, prompts, new))[0])
            tps = {k: batch * new / v for k, v in best.items()}
            print(f"batch {batch}, {new:3d} new tokens: MindSpore {tps['ms']:7.1f} tok/s "
                  f"(first call {first_ms:.2f} s) | PyTorch {tps['pt']:7.1f} tok/s (first call "
                  f"{first_pt:.2f} s) | same tokens {ours == theirs} | "
                  f"ratio MindSpore/PyTorch x{tps['ms'] / tps['pt']:.2f}")
    print(load())


if __name__ == "__main__":
    main()
