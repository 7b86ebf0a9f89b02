"""Independent PyTorch references for the newer look-alike families (``course_lib.lookalike``
``NEW_FAMILIES``), built ONLY from transformers + torch + the files of the directory (never
from course_lib's layers / hf_weights / pretrained):

* qwen2 / qwen3 / llama2 / llama3: ``transformers.{Qwen2,Qwen3,Llama}ForCausalLM
  .from_pretrained(dir, dtype=float32)`` (``dtype``: transformers 4.56's name for
  ``torch_dtype``), refusing any missing or unexpected key (HF would otherwise fill a
  missing tensor with random values and still run).
* internlm2: the checkpoint read directly, ``attention.wqkv`` unpacked per kv group as
  ``modeling_internlm2.py`` does (``rearrange(qkv, 'b q (h gs d) -> b q h gs d',
  gs=2 + num_key_value_groups)``: each group holds its q heads, then its k head, then its v
  head), renamed to Llama keys and run by ``LlamaForCausalLM`` with an equivalent
  ``LlamaConfig``; InternLM2's ``rope_scaling {"type": "dynamic", "factor": f}`` is its
  DynamicNTK rotary (base grows only beyond max_position_embeddings), i.e. transformers'
  ``rope_type "dynamic"``.
* baichuan2-7b: ``W_pack`` split into q/k/v, ``lm_head`` rows L2-normalised (Baichuan2's
  ``NormHead`` normalises the stored weight at inference), then ``LlamaForCausalLM``.
* baichuan2-13b: ``tests/torch_baichuan.py``'s ALiBi Baichuan-13B (same network; Baichuan2
  changed only the head) with the normalised ``lm_head`` rows.

Every reference is a float32 ``torch.nn.Module`` in eval mode: ``model(ids) -> logits``
(batch, length, vocab) for a LongTensor ``ids``.
"""
import json
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F


def read_config(directory) -> dict:
    return json.loads((Path(directory) / "config.json").read_text())


def read_checkpoint(directory) -> dict:
    """All tensors of the directory as float32: sharded (an index) or one file."""
    d = Path(directory)
    indexes = [d / "model.safetensors.index.json", d / "pytorch_model.bin.index.json"]
    singles = [d / "model.safetensors", d / "pytorch_model.bin"]
    index = next((p for p in indexes if p.exists()), None)
    if index is not None:
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = [p.name for p in singles if p.exists()][:1]
    if not files:
        raise FileNotFoundError(f"{d}: no weights (no index, no model.safetensors / pytorch_model.bin)")
    state = {}
    for f in files:
        if f.endswith(".safetensors"):
            from safetensors.torch import load_file
            state.update(load_file(str(d / f)))
        else:
            state.update(torch.load(d / f, weights_only=True))
    return {k: v.float() for k, v in state.items()}


def detect_family(cfg: dict) -> str:
    """The look-alike family of a config.json dict."""
    arch = (cfg.get("architectures") or [""])[0]
    if arch in ("Qwen2ForCausalLM", "Qwen3ForCausalLM"):
        return cfg["model_type"]
    if arch == "LlamaForCausalLM":
        return "llama3" if (cfg.get("rope_scaling") or {}).get("rope_type") == "llama3" else "llama2"
    if arch == "InternLM2ForCausalLM":
        return "internlm2"
    if arch == "BaichuanForCausalLM" and "z_loss_weight" in cfg:
        return "baichuan2-7b" if "max_position_embeddings" in cfg else "baichuan2-13b"
    raise ValueError(f"no reference for architectures={cfg.get('architectures')} "
                     f"model_type={cfg.get('model_type')!r}")


class Logits(torch.nn.Module):
    """Wraps a transformers causal LM so that ``model(ids)`` is the float32 logits."""

    def __init__(self, hf):
        super().__init__()
        self.hf = hf

    def forward(self, ids):
        return self.hf(input_ids=ids, use_cache=False).logits.float()


def _from_pretrained(cls, directory):
    hf, info = cls.from_pretrained(str(directory), dtype=torch.float32,
                                   attn_implementation="eager", output_loading_info=True,
                                   local_files_only=True)
    bad = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys",
                                                   "mismatched_keys") and v}
    if bad:
        raise ValueError(f"{directory}: the checkpoint does not match {cls.__name__}: {bad}")
    return Logits(hf.eval())


def unpack_wqkv(w, num_heads: int, num_kv_heads: int, head_dim: int):
    """InternLM2's fused ``wqkv`` (rows or bias entries) -> (q, k, v) in Llama's head order.
    Rows are grouped per kv head: [q heads of the group..., k, v], each ``head_dim`` rows."""
    g = num_heads // num_kv_heads
    grouped = w.reshape(num_kv_heads, g + 2, head_dim, *w.shape[1:])
    q = grouped[:, :g].reshape(num_heads * head_dim, *w.shape[1:])
    return q, grouped[:, g].reshape(-1, *w.shape[1:]), grouped[:, g + 1].reshape(-1, *w.shape[1:])


def _llama(config_kwargs: dict, state: dict):
    from transformers import LlamaConfig, LlamaForCausalLM
    model = LlamaForCausalLM(LlamaConfig(**config_kwargs, attn_implementation="eager"))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"renamed checkpoint does not fit Llama: missing={missing} "
                         f"unexpected={unexpected}")
    return Logits(model.float().eval())


def _llama_layer(state: dict, i: int, attn: dict) -> dict:
    """Llama names of layer ``i``'s MLP / norms (InternLM2 names in ``state``) + ``attn``."""
    p = o = f"model.layers.{i}."
    out = {o + "mlp.gate_proj.weight": state[p + "feed_forward.w1.weight"],
           o + "mlp.up_proj.weight": state[p + "feed_forward.w3.weight"],
           o + "mlp.down_proj.weight": state[p + "feed_forward.w2.weight"],
           o + "input_layernorm.weight": state[p + "attention_norm.weight"],
           o + "post_attention_layernorm.weight": state[p + "ffn_norm.weight"]}
    out.update({o + "self_attn." + k: v for k, v in attn.items()})
    return out


def internlm2_as_llama_state(state: dict, cfg: dict, unpack=unpack_wqkv) -> dict:
    """InternLM2 checkpoint -> Llama state dict (``unpack``: the wqkv splitter, replaceable
    so that a test can plant a wrong one)."""
    nh, nkv = cfg["num_attention_heads"], cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    hd = cfg["hidden_size"] // nh
    out = {"model.embed_tokens.weight": state["model.tok_embeddings.weight"],
           "model.norm.weight": state["model.norm.weight"], "lm_head.weight": state["output.weight"]}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}.attention."
        attn = {"o_proj.weight": state[p + "wo.weight"]}
        for suffix in ("weight", "bias") if cfg.get("bias") else ("weight",):
            q, k, v = unpack(state[p + "wqkv." + suffix], nh, nkv, hd)
            attn.update({"q_proj." + suffix: q, "k_proj." + suffix: k, "v_proj." + suffix: v})
        if cfg.get("bias"):
            attn["o_proj.bias"] = state[p + "wo.bias"]
        out.update(_llama_layer(state, i, attn))
    return out


def internlm2_llama_config(cfg: dict) -> dict:
    """The LlamaConfig arguments that compute what InternLM2's config means."""
    scaling = cfg.get("rope_scaling")
    if scaling is not None:
        if scaling.get("type") != "dynamic":
            raise ValueError(f"InternLM2 rope_scaling {scaling}: only 'dynamic' has a reference")
        scaling = {"rope_type": "dynamic", "factor": float(scaling["factor"])}
    return dict(vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"],
                intermediate_size=cfg["intermediate_size"],
                num_hidden_layers=cfg["num_hidden_layers"],
                num_attention_heads=cfg["num_attention_heads"],
                num_key_value_heads=cfg.get("num_key_value_heads") or cfg["num_attention_heads"],
                rms_norm_eps=cfg["rms_norm_eps"], rope_theta=float(cfg.get("rope_theta", 10000)),
                max_position_embeddings=cfg["max_position_embeddings"], rope_scaling=scaling,
                attention_bias=bool(cfg.get("bias")), tie_word_embeddings=False)


def normalised_rows(w):
    """Baichuan2's NormHead: ``torch.nn.functional.normalize(weight)`` (L2 over each row)."""
    return F.normalize(w, dim=-1)


def baichuan2_7b_as_llama_state(state: dict, cfg: dict, normalise: bool = True) -> dict:
    h = cfg["hidden_size"]
    out = {}
    for k, v in state.items():
        if k.endswith("self_attn.W_pack.weight"):
            base = k[: -len("W_pack.weight")]
            q, kk, vv = v.split(h, dim=0)
            out.update({base + "q_proj.weight": q, base + "k_proj.weight": kk,
                        base + "v_proj.weight": vv})
        elif k == "lm_head.weight" and normalise:
            out[k] = normalised_rows(v)
        else:
            out[k] = v
    return out


def _baichuan2_7b(cfg: dict, state: dict, normalise: bool = True):
    kwargs = dict(vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"],
                  intermediate_size=cfg["intermediate_size"],
                  num_hidden_layers=cfg["num_hidden_layers"],
                  num_attention_heads=cfg["num_attention_heads"], rms_norm_eps=cfg["rms_norm_eps"],
                  max_position_embeddings=cfg["max_position_embeddings"], rope_theta=10000.0,
                  tie_word_embeddings=False)
    return _llama(kwargs, baichuan2_7b_as_llama_state(state, cfg, normalise))


def _baichuan2_13b(cfg: dict, state: dict, normalise: bool = True):
    from torch_baichuan import TorchBaichuan      # tests/ is on sys.path under pytest
    h, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    shape = SimpleNamespace(hidden_size=h, intermediate_size=cfg["intermediate_size"],
                            vocab_size=cfg["vocab_size"], num_layers=cfg["num_hidden_layers"],
                            num_heads=nh, head_dim=h // nh, rms_norm_eps=cfg["rms_norm_eps"])
    sd = dict(state)
    if normalise:
        sd["lm_head.weight"] = normalised_rows(sd["lm_head.weight"])
    model = TorchBaichuan.from_state_dict({k: v.numpy() for k, v in sd.items()}, shape)
    return model.float().eval()


def reference_model(directory, family: str | None = None, **options):
    """A float32 eval-mode torch model with ``model(ids) -> logits`` for an HF directory.
    ``family``: detected from config.json when None. ``options``: ``unpack=`` (internlm2)
    or ``normalise=`` (baichuan2-*) to build deliberately wrong references in tests."""
    from transformers import LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM
    cfg = read_config(directory)
    family = family or detect_family(cfg)
    if family in ("qwen2", "qwen3", "llama2", "llama3"):
        if options:
            raise TypeError(f"{family} takes no options, got {sorted(options)}")
        cls = {"qwen2": Qwen2ForCausalLM, "qwen3": Qwen3ForCausalLM}.get(family, LlamaForCausalLM)
        return _from_pretrained(cls, directory)
    state = read_checkpoint(directory)
    if family == "internlm2":
        return _llama(internlm2_llama_config(cfg), internlm2_as_llama_state(state, cfg, **options))
    if family == "baichuan2-7b":
        return _baichuan2_7b(cfg, state, **options)
    if family == "baichuan2-13b":
        return _baichuan2_13b(cfg, state, **options)
    raise ValueError(f"no reference for family {family!r}")


@torch.no_grad()
def reference_greedy(model, ids, n: int) -> list[list[int]]:
    """``n`` greedy tokens after ``ids`` (list or LongTensor, batch x length): the whole
    sequence re-run at every step (no KV cache, no ``generate``)."""
    seq = torch.as_tensor(ids, dtype=torch.long)
    if seq.dim() == 1:
        seq = seq[None]
    for _ in range(n):
        nxt = model(seq)[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], dim=1)
    return seq[:, -n:].tolist() if n else [[] for _ in range(seq.shape[0])]
