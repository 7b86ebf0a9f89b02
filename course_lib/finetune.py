"""LoRA fine-tuning of a real checkpoint (InternLM-7B, Baichuan-13B) with chapter 08's LoRA.

    python -m course_lib.finetune --model-dir /cache/internlm-chat-7b --data chats.jsonl \\
        --steps 200 --r 8 --out adapter.safetensors

1. prints the per-device memory plan of this fine-tune for the model in ``--model-dir``
   (frozen base in half precision + LoRA adapters with float32 master copy and AdamW state
   + activations of one micro-batch, without recomputation: the training loop of step 4 does
   not recompute), for one ``--device-gib`` device (64 GB Ascend by default), and stops if it
   does not fit;
2. loads the model with ``from_pretrained`` and its tokenizer with ``load_hf_tokenizer``;
3. turns each JSON line — ``{"messages": [{"role": "user", ...}, {"role": "assistant",
   ...}]}`` — into the family's chat-format prompt (``conversation.chat_format``) + the
   answer + the stop token, with the loss on the answer only;
4. injects LoRA (``lora.inject_lora``; InternLM ``q_proj``/``v_proj``, Baichuan ``W_pack``),
   trains with ``LLMTrainer`` on the adapter parameters only, saves the adapter
   (``lora.save_adapter``).

On CPU the base weights are loaded in float32 (no bf16 matmul, fp16 training unstable);
on Ascend in ``--dtype`` (default bfloat16).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from . import memory

TARGETS = {"internlm": ("q_proj", "v_proj"), "llama": ("q_proj", "v_proj"),
           "llama2": ("q_proj", "v_proj"), "llama3": ("q_proj", "v_proj"),
           "qwen2": ("q_proj", "v_proj"), "qwen3": ("q_proj", "v_proj"),
           "internlm2": ("wqkv",), "baichuan2-7b": ("W_pack",), "baichuan2-13b": ("W_pack",),
           "baichuan-13b": ("W_pack",), "baichuan-7b": ("W_pack",)}
# The token that ends an assistant turn in each family's chat format (what the model must
# learn to emit); families not listed end it with the tokenizer's EOS.
END_OF_TURN = {"qwen2": "<|im_end|>", "qwen3": "<|im_end|>", "internlm2": "<|im_end|>",
               "llama3": "<|eot_id|>"}


def lora_plan(config, targets, r: int, device_gib: float, seq_len: int, micro_batch: int = 1,
              dtype: str = "bf16", recompute: bool = False) -> tuple[memory.MemoryBreakdown, bool]:
    """Per-device bytes of a LoRA fine-tune: frozen base weights at ``dtype``, adapters
    trained in mixed precision (16 B/parameter), activations of one micro-batch, with full
    recomputation if ``recompute`` (this module's training loop does not recompute: the
    default is what :func:`run` does)."""
    h, L = config.hidden_size, config.num_layers
    q, kv, _ = config.qkv_sizes
    per_layer = {"q_proj": h + q, "k_proj": h + kv, "v_proj": h + kv, "o_proj": q + h,
                 "W_pack": h + q + 2 * kv, "wqkv": h + q + 2 * kv,
                 "gate_proj": h + config.intermediate_size,
                 "up_proj": h + config.intermediate_size, "down_proj": h + config.intermediate_size}
    trainable = L * r * sum(per_layer[t] for t in targets)
    state = memory.training_state_bytes(trainable, config.num_parameters(), "mixed", dtype)
    acts = memory.activation_bytes(config, micro_batch, seq_len, dtype, recompute=recompute)
    total = memory.MemoryBreakdown(state.weights, state.gradients, state.master_weights,
                                   state.optimizer_states, acts)
    return total, total.total <= device_gib * memory.GiB


def _presets():
    from .baichuan import baichuan_7b, baichuan_13b
    from .internlm import internlm_7b
    return {"internlm-7b": internlm_7b, "baichuan-13b": baichuan_13b, "baichuan-7b": baichuan_7b}


PRESETS = {"internlm-7b": None, "baichuan-13b": None, "baichuan-7b": None}


def print_plan(config, r: int, device_gib: float, seq_len: int, micro_batch: int) -> bool:
    targets = (config.qkv_name,) if config.fused_qkv else ("q_proj", "v_proj")
    plan, fits = lora_plan(config, targets, r, device_gib, seq_len, micro_batch)
    print(f"LoRA plan for {config.name} on one {device_gib:g} GiB device (r={r}, {targets}, "
          f"micro-batch {micro_batch} x {seq_len} tokens, bf16 base, no recomputation like the "
          f"training loop): GiB "
          f"{plan.gib()} -> {'fits' if fits else 'DOES NOT FIT'}")
    return fits


def read_examples(path, tokenizer, model, max_len: int):
    """JSON lines -> (inputs, labels) int32 arrays (N, max_len), loss on the answers."""
    from .conversation import chat_format
    from .pipelines import IGNORE_INDEX
    rows, targets = [], []
    name = END_OF_TURN.get(getattr(model, "family", None))
    end = tokenizer.token_to_id(name) if name else tokenizer.eos_id
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            messages = json.loads(line)["messages"]
            *context, answer = messages
            assert answer["role"] == "assistant"
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, AssertionError):
            raise ValueError(f"{path}:{n}: each line must be {{\"messages\": [..., "
                             "{\"role\": \"assistant\", \"content\": ...}]}.") from None
        prompt, _ = chat_format(model, tokenizer, context)
        reply = tokenizer.encode(answer["content"], add_special_tokens=False) + [end]
        ids = (prompt + reply)[: max_len + 1]
        mask = ([0] * len(prompt) + [1] * len(reply))[: max_len + 1]
        row = np.zeros(max_len + 1, np.int32)
        target = np.full(max_len + 1, IGNORE_INDEX, np.int32)
        row[: len(ids)] = ids
        target[: len(ids)] = np.where(np.asarray(mask) == 1, ids, IGNORE_INDEX)
        rows.append(row[:-1])
        targets.append(target[1:])
    if not rows:
        raise ValueError(f"{path} holds no examples.")
    return np.stack(rows), np.stack(targets)


def run(model_dir, data, *, steps: int = 20, r: int = 8, alpha: float = 16.0, lr: float = 1e-3,
        batch_size: int = 2, max_len: int = 64, device_gib: float = 64.0, dtype: str | None = None,
        out=None, verbose: bool = True) -> dict:
    """The whole fine-tune (see module docstring); returns the loss history and paths."""
    import mindspore as ms
    from . import hf_weights
    from .hf_tokenizer import load_hf_tokenizer
    from .lora import inject_lora, lora_parameters, save_adapter
    from .pipelines import PairSource, make_dataset
    from .families import config_from_hf, family_of
    from .pretrained import from_pretrained
    from .trainer import LLMTrainer
    hf_cfg = hf_weights.read_config(model_dir)
    config = config_from_hf(hf_cfg)
    family = family_of(hf_cfg, config)
    targets = TARGETS[family]
    plan, fits = lora_plan(config, targets, r, device_gib, max_len, batch_size)
    if verbose:
        print_plan(config, r, device_gib, max_len, batch_size)
    if not fits:
        raise MemoryError(f"LoRA fine-tune needs {plan.gib()['total']} GiB per device; "
                          f"the device has {device_gib:g} GiB.")
    cpu = ms.get_context("device_target") == "CPU"
    model = from_pretrained(model_dir, dtype or ("float32" if cpu else "bfloat16"), verbose=verbose)
    tokenizer = load_hf_tokenizer(model_dir)
    inputs, labels = read_examples(data, tokenizer, model, max_len)
    inject_lora(model, list(targets), r=r, alpha=alpha)
    trainer = LLMTrainer(model, make_dataset(PairSource(inputs, labels), batch_size, seed=0),
                         lr=lr, steps=steps, weight_decay=0.0, trainable=lora_parameters(model),
                         mode="pynative")
    trainer.train()
    out = Path(out) if out else Path(model_dir) / "lora_adapter.safetensors"
    save_adapter(model, out)
    if verbose:
        print(f"loss {trainer.history['loss'][0]:.4f} -> {trainer.history['loss'][-1]:.4f}; "
              f"adapter saved to {out}")
    return {"loss": list(trainer.history["loss"]), "adapter": out, "plan": plan}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m course_lib.finetune", description=__doc__.split("\n")[0])
    p.add_argument("--model-dir")
    p.add_argument("--data", help="JSON lines: {\"messages\": [...]}")
    p.add_argument("--plan-only", choices=sorted(PRESETS),
                   help="print the per-device plan for the REAL model and exit")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--r", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--max-len", type=int, default=64)
    p.add_argument("--device-gib", type=float, default=64.0)
    p.add_argument("--dtype", choices=("float32", "float16", "bfloat16"))
    p.add_argument("--out")
    a = p.parse_args(argv)
    if a.plan_only:
        print_plan(_presets()[a.plan_only](), a.r, a.device_gib, a.max_len, a.batch_size)
        return 0
    if not (a.model_dir and a.data):
        p.error("--model-dir and --data are required (or --plan-only PRESET)")
    try:
        run(a.model_dir, a.data, steps=a.steps, r=a.r, lr=a.lr, batch_size=a.batch_size,
            max_len=a.max_len, device_gib=a.device_gib, dtype=a.dtype, out=a.out)
    except (ValueError, MemoryError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
