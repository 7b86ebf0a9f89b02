"""Hugging Face-layout checkpoints <-> the course's Cell models (safetensors).

The course models use the Hugging Face parameter names, so a checkpoint maps one to one:

    Baichuan  model.embed_tokens.weight, model.layers.N.self_attn.W_pack.weight (3h x h,
              rows [Q | K | V]), ...self_attn.o_proj.weight, ...mlp.gate_proj/up_proj/
              down_proj.weight, ...input_layernorm.weight, ...post_attention_layernorm.weight,
              model.norm.weight, lm_head.weight
    InternLM  the same, with ...self_attn.q_proj/k_proj/v_proj/o_proj.{weight,bias}
    (= Llama)

Loading is strict: every expected name present, nothing unexpected, every shape equal,
floating-point dtypes only; each failure raises ``CheckpointError`` saying what to do.

Real Baichuan-13B weights on ModelArts (or any machine with the files)
----------------------------------------------------------------------
1. Get the files of ``baichuan-inc/Baichuan-13B-Base`` (or -Chat) into the job's storage,
   e.g. with ``huggingface-cli download`` / ``modelscope download`` on a machine with
   internet, then copy them to OBS and mount/copy them into the notebook or training job
   (``moxing.file.copy_parallel('obs://bucket/Baichuan-13B-Base', '/cache/Baichuan-13B-Base')``).
2. The weights are sharded: an index JSON (``*.index.json``) whose ``weight_map`` says which
   shard file holds each tensor. If the shards are PyTorch ``.bin`` pickles, convert them
   once (needs ``torch``, in a process that did not import mindnlp):
   ``convert_torch_checkpoint('/cache/Baichuan-13B-Base', '/cache/baichuan13b-st')``
   — it writes ``model-0000i-of-0000n.safetensors`` + ``model.safetensors.index.json``.
3. Build without allocating random weights, then stream the tensors in shard by shard:
   ``model = load_pretrained('/cache/baichuan13b-st')`` (reads ``config.json``: hidden 5120
   -> ALiBi), or ``with no_init_parameters(): model = BaichuanForCausalLM(baichuan_13b())``
   then ``load_weights(model, '/cache/baichuan13b-st')``.
   Budget ~26.5 GB of host memory for fp16 weights (53 GB as float32 on CPU); on Ascend
   cast with ``model.to_float(ms.float16)``.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Mapping

import numpy as np

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
CONFIG_NAME = "config.json"

# safetensors dtype codes -> NumPy (BF16 has no NumPy type: widened to float32 exactly).
_NP_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16,
              "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
              "U8": np.uint8, "BOOL": np.bool_}
_FLOAT_CODES = {"F64", "F32", "F16", "BF16"}


class CheckpointError(ValueError):
    """A checkpoint that does not fit the model (or is not a valid file)."""


# --------------------------------------------------------------------------------------
# Reading and writing safetensors files
# --------------------------------------------------------------------------------------
def _read_header(path: Path) -> tuple[dict, int]:
    size = path.stat().st_size
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise CheckpointError(f"{path} is not a safetensors file (only {size} bytes). "
                                  "Re-download or re-save it.")
        (n,) = struct.unpack("<Q", raw)
        if n > size - 8 or n > 100_000_000:
            raise CheckpointError(f"{path} has a corrupt header (claims {n} header bytes in a "
                                  f"{size}-byte file). Re-download or re-save it.")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CheckpointError(f"{path} has an unreadable header ({e}). It is not a valid "
                                  "safetensors file; re-download or re-save it.") from None
    header.pop("__metadata__", None)
    data_start = 8 + n
    end = max((v["data_offsets"][1] for v in header.values()), default=0)
    if data_start + end > size:
        raise CheckpointError(f"{path} is truncated: the header needs {data_start + end} bytes "
                              f"but the file has {size}. Re-download or re-copy it.")
    return header, data_start


def read_safetensors(path, names=None) -> dict[str, np.ndarray]:
    """Tensors of one .safetensors file as NumPy arrays (memory-mapped, so a 10 GB shard is
    not read until used). BF16 tensors are widened to float32 exactly."""
    path = Path(path)
    header, start = _read_header(path)
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, info in header.items():
        if names is not None and name not in names:
            continue
        code = info["dtype"]
        if code not in _NP_DTYPES:
            raise CheckpointError(f"{path}: tensor {name} has dtype {code}, which this loader "
                                  "does not read. Re-save the checkpoint as F32/F16/BF16.")
        a, b = info["data_offsets"]
        arr = mm[start + a:start + b].view(_NP_DTYPES[code]).reshape(info["shape"])
        if code == "BF16":  # bfloat16 = the top 16 bits of a float32
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = arr
    return out


def safetensors_dtypes(path) -> dict[str, str]:
    """Name -> safetensors dtype code (``F32``/``F16``/``BF16``...) without reading data."""
    header, _ = _read_header(Path(path))
    return {k: v["dtype"] for k, v in header.items()}


def load_state_dict(path) -> dict[str, np.ndarray]:
    """A checkpoint as ``{name: array}``: a ``.safetensors`` file, or a directory with a
    sharded ``*.safetensors.index.json`` or a single ``model.safetensors``."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"No checkpoint at {path}. Check the path (on ModelArts: was "
                                "the OBS folder copied/mounted?).")
    if path.is_file():
        return read_safetensors(path)
    indexes = sorted(path.glob("*.safetensors.index.json"))
    if indexes:
        weight_map = json.loads(indexes[0].read_text())["weight_map"]
        by_file: dict[str, list[str]] = {}
        for name, shard in weight_map.items():
            by_file.setdefault(shard, []).append(name)
        state = {}
        for shard, names in by_file.items():
            shard_path = path / shard
            if not shard_path.exists():
                raise CheckpointError(f"{indexes[0].name} lists shard {shard}, which is missing "
                                      f"from {path}. Copy all shards.")
            tensors = read_safetensors(shard_path, set(names))
            lost = sorted(set(names) - set(tensors))
            if lost:
                raise CheckpointError(f"Shard {shard} lacks {len(lost)} tensor(s) its index "
                                      f"promises, e.g. {lost[:3]}. The download is incomplete.")
            state.update(tensors)
        return state
    if (path / SINGLE_NAME).exists():
        return read_safetensors(path / SINGLE_NAME)
    if list(path.glob("*.bin")) or list(path.glob("*.pt")):
        raise CheckpointError(f"{path} holds PyTorch pickles (.bin), not safetensors. Convert "
                              "them once with course_lib.hf_weights.convert_torch_checkpoint"
                              f"('{path}', '<new dir>').")
    raise CheckpointError(f"{path} contains no {SINGLE_NAME} and no *.safetensors.index.json.")


def save_state_dict(state: Mapping[str, np.ndarray], directory, max_shard_bytes: int | None = None,
                    dtype=None) -> list[Path]:
    """Write ``model.safetensors``, or shards + ``model.safetensors.index.json`` when the
    tensors exceed ``max_shard_bytes`` (the layout of the real Baichuan-13B checkpoint)."""
    from safetensors.numpy import save_file
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    arrays = {k: np.ascontiguousarray(v if dtype is None else np.asarray(v).astype(dtype))
              for k, v in state.items()}
    shards: list[dict] = [{}]
    size = 0
    for name, arr in arrays.items():
        if max_shard_bytes and shards[-1] and size + arr.nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = arr
        size += arr.nbytes
    meta = {"format": "pt"}  # lets Hugging Face's torch loaders read the files too
    if len(shards) == 1:
        out = directory / SINGLE_NAME
        save_file(shards[0], str(out), metadata=meta)
        return [out]
    paths, weight_map = [], {}
    for i, shard in enumerate(shards, 1):
        fname = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(directory / fname), metadata=meta)
        weight_map.update({k: fname for k in shard})
        paths.append(directory / fname)
    total = sum(a.nbytes for a in arrays.values())
    (directory / INDEX_NAME).write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    return paths


# --------------------------------------------------------------------------------------
# Model <-> state dict
# --------------------------------------------------------------------------------------
def state_dict(model) -> dict[str, np.ndarray]:
    """The model's parameters under their Hugging Face names, as NumPy arrays."""
    return {name: p.asnumpy() for name, p in model.parameters_and_names()}


def _family_hint(missing: list[str], unexpected: list[str]) -> str:
    def has(names, part):
        return any(part in n for n in names)
    if has(unexpected, ".W_pack.") and has(missing, ".q_proj."):
        return (" The checkpoint is Baichuan-format (fused W_pack) but the model has separate "
                "q/k/v projections: build a BaichuanForCausalLM, or convert the state dict with "
                "split_w_pack(state).")
    if has(unexpected, ".q_proj.") and has(missing, ".W_pack."):
        return (" The checkpoint has separate q_proj/k_proj/v_proj (InternLM/Llama format) but "
                "the model uses Baichuan's fused W_pack: build an InternLMForCausalLM, or "
                "convert the state dict with fuse_qkv(state).")
    if has(unexpected, "model.layers.") and not has(missing, "model.layers."):
        return (" The checkpoint has more layers than the model: build the model from the "
                "checkpoint's config (load_pretrained) or pick the matching preset.")
    if has(missing, "model.layers.") and not has(unexpected, "model.layers."):
        return (" The checkpoint has fewer layers/parts than the model: pick the matching "
                "preset or pass strict=False to load a partial checkpoint on purpose.")
    return " Check that the checkpoint belongs to this model family and preset."


def check_state_dict(model, state: Mapping[str, np.ndarray], strict: bool = True) -> dict:
    """Compare names, shapes and dtypes with the model; raise ``CheckpointError`` on any
    problem (``strict=False`` tolerates missing/unexpected names, never wrong shapes)."""
    params = dict(model.parameters_and_names())
    missing = sorted(set(params) - set(state))
    unexpected = sorted(set(state) - set(params))
    if strict and (missing or unexpected):
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing key(s), e.g. {missing[:3]}")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected key(s), e.g. {unexpected[:3]}")
        raise CheckpointError("Checkpoint does not match the model: " + "; ".join(parts) + "."
                              + _family_hint(missing, unexpected))
    bad_shapes, bad_dtypes = [], []
    for name in sorted(set(params) & set(state)):
        arr = state[name]
        if tuple(arr.shape) != tuple(params[name].shape):
            bad_shapes.append(f"{name}: checkpoint {tuple(arr.shape)} vs model "
                              f"{tuple(params[name].shape)}")
        if not np.issubdtype(np.asarray(arr).dtype, np.floating):
            bad_dtypes.append(f"{name}: {np.asarray(arr).dtype}")
    if bad_shapes:
        raise CheckpointError(f"{len(bad_shapes)} tensor(s) have the wrong shape, e.g. "
                              f"{bad_shapes[:3]}. The checkpoint was saved for another "
                              "configuration (hidden size, vocab, FFN width...): build the "
                              "model with the checkpoint's config (load_pretrained).")
    if bad_dtypes:
        raise CheckpointError(f"{len(bad_dtypes)} tensor(s) are not floating point, e.g. "
                              f"{bad_dtypes[:3]}. Weights must be F32/F16/BF16: is this really "
                              "a model checkpoint?")
    return {"missing": missing, "unexpected": unexpected}


def load_weights(model, source, strict: bool = True) -> dict:
    """Copy a checkpoint (path or ``{name: array}``) into ``model`` after the strict checks.
    Each array is cast to the parameter's dtype. Returns ``{'missing', 'unexpected'}``."""
    from mindspore import Tensor
    state = source if isinstance(source, Mapping) else load_state_dict(source)
    report = check_state_dict(model, state, strict)
    for name, param in model.parameters_and_names():
        if name in state:
            dtype = param.dtype
            param.set_data(Tensor(np.ascontiguousarray(state[name], dtype=np.float32), dtype=dtype))
    return report


# --------------------------------------------------------------------------------------
# Layout conversions
# --------------------------------------------------------------------------------------
def split_w_pack(state: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Baichuan -> Llama layout: each W_pack (3h x h) becomes q_proj, k_proj, v_proj
    (contiguous row blocks [Q | K | V])."""
    out = {}
    for name, arr in state.items():
        if ".self_attn.W_pack." in name:
            for part, block in zip(("q_proj", "k_proj", "v_proj"), np.split(np.asarray(arr), 3, 0)):
                out[name.replace("W_pack", part)] = block
        else:
            out[name] = arr
    return out


def fuse_qkv(state: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Llama -> Baichuan layout: stack q_proj, k_proj, v_proj rows into one W_pack."""
    out = {}
    for name, arr in state.items():
        if ".self_attn.q_proj." in name:
            parts = [np.asarray(state[name.replace("q_proj", p)]) for p in ("q_proj", "k_proj", "v_proj")]
            out[name.replace("q_proj", "W_pack")] = np.concatenate(parts, 0)
        elif ".self_attn.k_proj." in name or ".self_attn.v_proj." in name:
            continue
        else:
            out[name] = arr
    return out


# --------------------------------------------------------------------------------------
# config.json and whole-model save/load
# --------------------------------------------------------------------------------------
def hf_config(config) -> dict:
    """A Hugging Face style ``config.json`` for a course config (with one course key,
    ``position_embedding``, so ALiBi vs RoPE is explicit)."""
    c = config
    d = {"hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size,
         "num_attention_heads": c.num_heads, "num_hidden_layers": c.num_layers,
         "vocab_size": c.vocab_size, "rms_norm_eps": c.rms_norm_eps, "hidden_act": "silu",
         "tie_word_embeddings": False, "initializer_range": c.init_std,
         "position_embedding": c.position, "course_name": c.name}
    if c.fused_qkv:
        d.update(architectures=["BaichuanForCausalLM"], model_type="baichuan")
    else:
        d.update(architectures=["InternLMForCausalLM"], model_type="internlm",
                 bias=bool(c.qkv_bias and c.o_bias))
    if c.position == "alibi":
        d["model_max_length"] = c.max_seq_len
    else:
        d.update(max_position_embeddings=c.max_seq_len, rope_theta=c.rope_base)
    return d


def config_from_hf(d: Mapping):
    """Course config from a ``config.json`` of Baichuan (7B/13B), InternLM or Llama."""
    from .baichuan import BaichuanConfig
    from .internlm import InternLMConfig
    kind = d.get("model_type")
    common = dict(vocab_size=d["vocab_size"], hidden_size=d["hidden_size"],
                  num_layers=d["num_hidden_layers"], num_heads=d["num_attention_heads"],
                  intermediate_size=d["intermediate_size"], rms_norm_eps=d.get("rms_norm_eps", 1e-6),
                  init_std=d.get("initializer_range", 0.02), name=d.get("course_name", kind or "custom"))
    if d.get("num_key_value_heads", d["num_attention_heads"]) != d["num_attention_heads"]:
        raise CheckpointError("This checkpoint uses grouped-query attention (num_key_value_heads "
                              "< num_attention_heads), which the course models do not implement.")
    max_len = d.get("model_max_length") or d.get("max_position_embeddings") or 4096
    if kind == "baichuan":
        # Baichuan's config.json does not name its position scheme; the model files do:
        # 13B (hidden 5120) is ALiBi, 7B (hidden 4096) is RoPE.
        position = d.get("position_embedding") or ("alibi" if d["hidden_size"] == 5120 else "rope")
        return BaichuanConfig(**common, max_seq_len=max_len, position=position,
                              rope_base=d.get("rope_theta", 10000.0))
    if kind in ("internlm", "llama"):
        bias = bool(d.get("bias", d.get("attention_bias", kind == "internlm")))
        return InternLMConfig(**common, max_seq_len=max_len, rope_base=d.get("rope_theta", 10000.0),
                              qkv_bias=bias, o_bias=bias)
    raise CheckpointError(f"Unknown model_type {kind!r} in config.json; the course loads "
                          "'baichuan', 'internlm' and 'llama' (without GQA).")


def llama_config_kwargs(config) -> dict:
    """Arguments for ``transformers.LlamaConfig`` describing the same network (InternLM,
    or Baichuan-7B after ``split_w_pack``). ALiBi models have no Llama equivalent."""
    if config.position != "rope":
        raise ValueError("Only RoPE models have a Llama equivalent; Baichuan-13B uses ALiBi.")
    if config.qkv_bias != config.o_bias:
        raise ValueError("Llama's attention_bias switches q/k/v and o biases together.")
    return dict(vocab_size=config.vocab_size, hidden_size=config.hidden_size,
                intermediate_size=config.intermediate_size, num_hidden_layers=config.num_layers,
                num_attention_heads=config.num_heads, num_key_value_heads=config.num_heads,
                max_position_embeddings=config.max_seq_len, rms_norm_eps=config.rms_norm_eps,
                rope_theta=config.rope_base, attention_bias=bool(config.qkv_bias),
                mlp_bias=False, tie_word_embeddings=False, hidden_act="silu")


def save_pretrained(model, directory, dtype=np.float32, max_shard_bytes: int | None = None) -> Path:
    """``config.json`` + safetensors weights (sharded if ``max_shard_bytes``) in Hugging Face
    layout. Returns the directory."""
    directory = Path(directory)
    save_state_dict(state_dict(model), directory, max_shard_bytes, dtype=dtype)
    cfg = hf_config(model.config)
    cfg["torch_dtype"] = {np.float32: "float32", np.float16: "float16"}.get(np.dtype(dtype).type, "float32")
    (directory / CONFIG_NAME).write_text(json.dumps(cfg, indent=2))
    return directory


def load_pretrained(directory, lazy: bool = True):
    """Build the model described by ``directory/config.json`` and load its weights.
    ``lazy`` builds under ``no_init_parameters`` so random weights are never allocated."""
    from .baichuan import BaichuanConfig, BaichuanForCausalLM
    from .internlm import InternLMForCausalLM
    directory = Path(directory)
    if not (directory / CONFIG_NAME).exists():
        raise FileNotFoundError(f"{directory} has no {CONFIG_NAME}; build the model yourself and "
                                "call load_weights(model, path).")
    config = config_from_hf(json.loads((directory / CONFIG_NAME).read_text()))
    cls = BaichuanForCausalLM if isinstance(config, BaichuanConfig) else InternLMForCausalLM
    if lazy:
        from mindspore.nn.utils import no_init_parameters
        with no_init_parameters():
            model = cls(config)
    else:
        model = cls(config)
    load_weights(model, directory)
    return model


def convert_torch_checkpoint(src, dst) -> Path:
    """PyTorch ``.bin`` shard(s) (+ ``pytorch_model.bin.index.json``) -> safetensors shards
    + ``model.safetensors.index.json`` in ``dst`` (dtypes kept, bf16 included). Needs real
    ``torch`` — run it in a process that has not imported mindnlp. Copies config.json."""
    import shutil
    import torch
    from safetensors.torch import save_file
    src, dst = Path(src), Path(dst)
    files = [src] if src.is_file() else sorted(src.glob("*.bin"))
    if not files:
        raise CheckpointError(f"No .bin files in {src}.")
    dst.mkdir(parents=True, exist_ok=True)
    weight_map, total = {}, 0
    for i, f in enumerate(files, 1):
        tensors = torch.load(f, map_location="cpu", weights_only=True)
        fname = f"model-{i:05d}-of-{len(files):05d}.safetensors"
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(dst / fname),
                  metadata={"format": "pt"})
        weight_map.update({k: fname for k in tensors})
        total += sum(v.numel() * v.element_size() for v in tensors.values())
        del tensors
    (dst / INDEX_NAME).write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    if not src.is_file() and (src / CONFIG_NAME).exists():
        shutil.copy(src / CONFIG_NAME, dst / CONFIG_NAME)
    return dst
