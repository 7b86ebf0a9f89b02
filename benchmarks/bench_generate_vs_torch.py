"""Greedy generation: the course's default ``generate`` vs Hugging Face ``generate`` on torch,
same architecture, same weights, one run.

    .venv/bin/python benchmarks/bench_generate_vs_torch.py [--family internlm qwen2
        --engine auto --hidden 256 --layers 4 --heads 8 --new 64 256 --batch 1 8 --repeats 2]

Two families, same sizes: InternLM's tiny twin (RoPE, MHA, separate q/k/v with biases,
SwiGLU, RMSNorm), which is exactly ``transformers.LlamaForCausalLM(attention_bias=True)``;
and a tiny Qwen2 (GQA with a quarter of the heads as kv heads, q/k/v bias without o bias,
tied embeddings, rope_theta 1e6) == ``transformers.Qwen2ForCausalLM``. The torch model gets
the MindSpore weights (``course_lib.hf_weights``) and both must produce the same tokens
(checked). Greedy, KV cache on in both, every row generates exactly ``new`` tokens (no EOS).
``--engine`` picks the course's decode engine (``generation.engine_kind``).

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
from course_lib import generation
from course_lib.generation import generate
from course_lib.families import llama_config_kwargs
from course_lib.hf_weights import state_dict
from course_lib.internlm import InternLMForCausalLM


def load() -> str:
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def qwen2_tiny(hidden, layers, heads):
    from course_lib.layers import CausalLM, DecoderConfig
    return CausalLM(DecoderConfig(vocab_size=8000, hidden_size=hidden, num_layers=layers,
                                  num_heads=heads, num_kv_heads=max(1, heads // 4),
                                  intermediate_size=swiglu_width(hidden), max_seq_len=512,
                                  position="rope", rope_base=1e6, fused_qkv=False,
                                  qkv_bias=True, tie_embeddings=True, name="qwen2-tiny"))


def torch_twin(model):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
    c = model.config
    if c.tie_embeddings:
        hf = Qwen2ForCausalLM(Qwen2Config(
            vocab_size=c.vocab_size, hidden_size=c.hidden_size, num_hidden_layers=c.num_layers,
            intermediate_size=c.intermediate_size, num_attention_heads=c.num_heads,
            num_key_value_heads=c.kv_heads, max_position_embeddings=c.max_seq_len,
            rms_norm_eps=c.rms_norm_eps, rope_theta=c.rope_base, tie_word_embeddings=True,
            use_sliding_window=False)).eval()
    else:
        hf = LlamaForCausalLM(LlamaConfig(**llama_config_kwargs(c))).eval()
    state = {k: torch.from_numpy(np.array(v)) for k, v in state_dict(model).items()}
    missing, unexpected = hf.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
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
    ap.add_argument("--family", nargs="+", default=["internlm", "qwen2"],
                    choices=["internlm", "qwen2"])
    ap.add_argument("--engine", default="auto", choices=generation.ENGINES)
    ap.add_argument("--threads", type=int, default=0,
                    help="intra-op threads of BOTH frameworks (0 = their defaults: one per core)")
    args = ap.parse_args()
    print(load())
    if args.threads:
        from mindspore import device_context
        device_context.cpu.op_tuning.threads_num(args.threads)
        torch.set_num_threads(args.threads)
    cl.setup(device="CPU", seed=0, quiet=True)
    for family in args.family:
        run_family(family, args)


def build(family, args):
    if family == "qwen2":
        model = qwen2_tiny(args.hidden, args.layers, args.heads)
        name = "Qwen2 tiny == Qwen2ForCausalLM (GQA, q/k/v bias, tied)"
    else:
        model = InternLMForCausalLM(internlm.tiny(
            hidden_size=args.hidden, num_layers=args.layers, num_heads=args.heads,
            intermediate_size=swiglu_width(args.hidden)))
        name = "InternLM tiny twin == LlamaForCausalLM(attention_bias=True)"
    model.set_train(False)
    return model, name


def run_family(family, args):
    model, name = build(family, args)
    cfg, hf = model.config, torch_twin(model)
    print(f"model: {name}, hidden {cfg.hidden_size}, {cfg.num_layers} layers, {cfg.num_heads} "
          f"heads ({cfg.kv_heads} kv), FFN {cfg.intermediate_size}, vocab {cfg.vocab_size}, "
          f"{cfg.num_parameters():,} parameters; engine {generation.engine_kind(model, args.engine)}; "
          f"prompt {args.prompt} tokens; greedy; torch {torch.__version__} "
          f"({torch.get_num_threads()} threads); best of {args.repeats}")
    gen = lambda prompts, new: generate(model, prompts, new, engine=args.engine)  # noqa: E731
    for batch in args.batch:
        prompts = [[(7 + 31 * i + 101 * r) % cfg.vocab_size for i in range(args.prompt)]
                   for r in range(batch)]
        for new in args.new:
            first_ms, ours = timed(lambda: gen(prompts, new))
            first_pt, theirs = timed(lambda: torch_generate(hf, prompts, new))
            best = {"ms": float("inf"), "pt": float("inf")}
            for _ in range(args.repeats):
                best["ms"] = min(best["ms"], timed(lambda: gen(prompts, new))[0])
                best["pt"] = min(best["pt"], timed(lambda: torch_generate(hf, prompts, new))[0])
            tps = {k: batch * new / v for k, v in best.items()}
            print(f"batch {batch}, {new:3d} new tokens: MindSpore {tps['ms']:7.1f} tok/s "
                  f"(first call {first_ms:.2f} s) | PyTorch {tps['pt']:7.1f} tok/s (first call "
                  f"{first_pt:.2f} s) | same tokens {ours == theirs} | "
                  f"ratio MindSpore/PyTorch x{tps['ms'] / tps['pt']:.2f}")
    print(load())


if __name__ == "__main__":
    main()
