"""Independent references for the look-alike checkpoints (never the course's own layers):

* Baichuan-13B: ALiBi forward re-derived in torch from ``modeling_baichuan.py`` (slopes by
  ``_get_interleave``, bias ``slope_h * key_position`` + causal ``-inf``; RMSNorm statistics
  and softmax in float32, matmuls in the given dtype);
* InternLM-7B: ``transformers.LlamaForCausalLM(attention_bias=True)`` on real torch;
* Baichuan-7B: the same Llama after splitting ``W_pack`` into q/k/v (RoPE, no biases).
"""
import json
import math
from pathlib import Path

import torch


def read_checkpoint(directory) -> dict:
    """All tensors of a look-alike directory, read with torch / safetensors directly."""
    d = Path(directory)
    index = next(p for p in (d / "pytorch_model.bin.index.json", d / "model.safetensors.index.json")
                 if p.exists())
    state = {}
    for f in sorted(set(json.loads(index.read_text())["weight_map"].values())):
        if f.endswith(".bin"):
            state.update(torch.load(d / f, weights_only=True))
        else:
            from safetensors.torch import load_file
            state.update(load_file(str(d / f)))
    return state


def alibi_slopes(n):
    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    c = 2 ** math.floor(math.log2(n))
    return power_of_2(c) + alibi_slopes(2 * c)[0::2][:n - c]


def baichuan13b_logits(state, cfg, ids, dtype=torch.float64):
    W = {k: v.to(dtype) for k, v in state.items()}
    h, H, L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    d, T, eps = h // H, ids.shape[1], cfg["rms_norm_eps"]
    wide = torch.float64 if dtype == torch.float64 else torch.float32

    def rms(x, w):
        x32 = x.to(wide)
        return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(dtype)

    mask = torch.triu(torch.full((T, T), float("-inf"), dtype=wide), 1)
    bias = (torch.tensor(alibi_slopes(H), dtype=wide)[:, None, None]
            * torch.arange(T, dtype=wide)[None, None] + mask)
    x = W["model.embed_tokens.weight"][torch.as_tensor(ids)]
    for i in range(L):
        p = f"model.layers.{i}."
        y = rms(x, W[p + "input_layernorm.weight"])
        q, k, v = (t.reshape(*t.shape[:2], H, d).transpose(1, 2)
                   for t in (y @ W[p + "self_attn.W_pack.weight"].T).chunk(3, -1))
        s = (q @ k.transpose(2, 3)).to(wide) / math.sqrt(d) + bias
        o = (torch.softmax(s, -1).to(dtype) @ v).transpose(1, 2).reshape(x.shape)
        x = x + o @ W[p + "self_attn.o_proj.weight"].T
        y = rms(x, W[p + "post_attention_layernorm.weight"])
        g = y @ W[p + "mlp.gate_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * (y @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
    return (rms(x, W["model.norm.weight"]) @ W["lm_head.weight"].T).double().numpy()


def llama_logits(state, cfg, ids, dtype=torch.float32):
    from transformers import LlamaConfig, LlamaForCausalLM
    state = {k: v for k, v in state.items() if not k.endswith("rotary_emb.inv_freq")}
    if any(".W_pack." in k for k in state):                       # Baichuan-7B -> Llama
        for k in [k for k in state if ".W_pack." in k]:
            for part, block in zip(("q_proj", "k_proj", "v_proj"), state.pop(k).chunk(3, 0)):
                state[k.replace("W_pack", part)] = block
    bias = bool(cfg.get("bias", False))
    lc = LlamaConfig(vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"],
                     intermediate_size=cfg["intermediate_size"],
                     num_hidden_layers=cfg["num_hidden_layers"],
                     num_attention_heads=cfg["num_attention_heads"],
                     num_key_value_heads=cfg["num_attention_heads"],
                     max_position_embeddings=cfg["max_position_embeddings"],
                     rms_norm_eps=cfg["rms_norm_eps"], attention_bias=bias, mlp_bias=False,
                     tie_word_embeddings=False, rope_theta=10000.0)
    model = LlamaForCausalLM(lc).eval()
    model.load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
    model = model.to(dtype)
    with torch.no_grad():
        return model(torch.as_tensor(ids)).logits.double().numpy()


def reference_logits(family, state, cfg, ids, half: bool):
    if family == "baichuan-13b":
        return baichuan13b_logits(state, cfg, ids, torch.float16 if half else torch.float64)
    return llama_logits(state, cfg, ids, torch.float16 if half else torch.float64)
