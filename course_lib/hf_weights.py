"""Hugging Face-layout checkpoints <-> the course's Cell models.

The course models use the Hugging Face parameter names, so a checkpoint maps one to one:

    Baichuan  model.embed_tokens.weight, model.layers.N.self_attn.W_pack.weight (3h x h,
              rows [Q | K | V]), ...self_attn.o_proj.weight, ...mlp.gate_proj/up_proj/
              down_proj.weight, ...input_layernorm.weight, ...post_attention_layernorm.weight,
              model.norm.weight, lm_head.weight
    InternLM  the same, with ...self_attn.q_proj/k_proj/v_proj/o_proj.{weight,bias}
    (= Llama)

What a real model directory looks like (the files the loaders below read):

* ``config.json`` + ``pytorch_model-0000i-of-0000n.bin`` shards + ``pytorch_model.bin.index.json``
  (``{"metadata": {"total_size": ...}, "weight_map": {tensor name: shard file}}``) — what
  huggingface.co/baichuan-inc/Baichuan-13B-Chat ships (three ``.bin`` shards and the
  index, per its published file list) and internlm/internlm-chat-7b; or ``model-0000i-of-0000n.safetensors`` +
  ``model.safetensors.index.json``; or a single ``model.safetensors``/``pytorch_model.bin``.
* Other files in the folder (``training_args.bin``, optimizer states...) are never read:
  only the files the index names.

Reading is **shard by shard, tensor by tensor**: a shard is memory-mapped, each tensor is
copied into its parameter in the parameter's dtype (bf16 stays bf16: NumPy gets
``ml_dtypes.bfloat16``) in ~4 MB blocks, and the kernel is told to drop each block's file
pages once copied. Peak host memory is the parameters plus a few MB (at most 1.15x for
a 142M-parameter bf16 load: tests/test_pretrained.py measures and prints it), not the
checkpoint twice. PyTorch ``.bin`` pickles go through ONE safe loader,
``load_torch_bin`` (``torch.load(weights_only=True)``, refusing
anything but tensors).

Loading is strict and every problem is diagnosed by one checker, ``check_compatible``
(also used by ``LLMTrainer.load``, ``callbacks.restore_checkpoint``, LoRA adapters and the
model zoo): missing keys, unexpected keys inside layers the model has, extra layers, wrong
shapes, non-float dtypes — one message format, each with what to do. Known non-parameter
buffers (rotary ``inv_freq``, which Llama-style checkpoints often carry) are skipped and
listed, not fatal.

``course_lib.pretrained.from_pretrained`` builds the model from the directory's own
evidence and loads it in half precision; this module is the file layer underneath.
"""
from __future__ import annotations

import ctypes
import json
import mmap
import pickle
import re
import struct
import sys
from pathlib import Path
from typing import Iterator, Mapping

import ml_dtypes
import numpy as np

from .safeio import atomic_write, write_text_atomic

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
BIN_INDEX_NAME = "pytorch_model.bin.index.json"
BIN_SINGLE_NAME = "pytorch_model.bin"
CONFIG_NAME = "config.json"

# safetensors dtype codes -> NumPy. BF16 is kept as bfloat16 (ml_dtypes), never widened.
_NP_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
              "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
              "U8": np.uint8, "BOOL": np.bool_}
FLOAT_DTYPES = (np.float64, np.float32, np.float16, ml_dtypes.bfloat16)
# Buffers that checkpoints carry but that are not parameters (recomputed by the model).
KNOWN_BUFFERS = re.compile(r"(^|\.)rotary_emb\.inv_freq$")


class CheckpointError(ValueError):
    """A checkpoint that does not fit the model (or is not a valid file)."""


def is_float(dtype) -> bool:
    return np.dtype(dtype) in [np.dtype(d) for d in FLOAT_DTYPES]


class UnsafeCheckpointError(CheckpointError):
    """A PyTorch pickle that holds more than plain tensors (and could execute code)."""


# --------------------------------------------------------------------------------------
# Reading PyTorch pickles safely (the course's only pickle entry point)
# --------------------------------------------------------------------------------------
def _tensor_to_numpy(t) -> np.ndarray:
    """A zero-copy NumPy view of a CPU tensor in ITS dtype: bfloat16 (which NumPy lacks)
    becomes ``ml_dtypes.bfloat16`` through a bit-level view, never a float32 copy."""
    import ml_dtypes
    import torch
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def load_torch_bin(path, mmap: bool = False) -> dict[str, np.ndarray]:
    """One PyTorch ``.bin``/``.pt`` file -> ``{name: array}`` — THE course's only way to open
    a pickle, refusing unsafe ones.

    ``torch.load(weights_only=True)`` only rebuilds tensors, dicts, lists and numbers; a
    pickle that references any other Python object (a class, ``os.system``...) is
    rejected before anything runs. Arrays keep the file's dtype (bf16 included). With
    ``mmap=True`` the file is memory-mapped (zip-format ``.bin``, what ``torch.save``
    writes since PyTorch 1.6) and the arrays are views of the map: nothing is read until
    used, which is how this module streams a 10 GB shard."""
    torch = real_torch()
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No PyTorch checkpoint at {path}.")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as err:
        reason = str(err).strip().splitlines()
        detail = next((l.strip() for l in reason if "GLOBAL" in l or "Unsupported" in l), reason[0] if reason else "")
        raise UnsafeCheckpointError(
            f"{path} is not a plain tensor checkpoint: its pickle references Python objects "
            f"that torch.load(weights_only=True) will not rebuild ({detail}). Loading it "
            "unrestricted could execute arbitrary code, so it is refused. Ask the publisher "
            "for a .safetensors file, or re-save a state_dict of tensors only.") from None
    except (RuntimeError, EOFError, OSError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise CheckpointError(f"{path} is not a readable PyTorch checkpoint ({type(err).__name__}: "
                              f"{first}). It is truncated or corrupt: re-download or re-save it.") from None
    if isinstance(obj, Mapping) and "state_dict" in obj and isinstance(obj["state_dict"], Mapping):
        obj = obj["state_dict"]          # Lightning-style wrapper: the weights are inside
    if not isinstance(obj, Mapping):
        raise UnsafeCheckpointError(f"{path} holds a {type(obj).__name__}, not a "
                                    "{name: tensor} state_dict. Save model.state_dict().")
    not_tensors = [f"{k} ({type(v).__name__})" for k, v in obj.items() if not torch.is_tensor(v)]
    if not_tensors:
        raise UnsafeCheckpointError(f"{path} mixes non-tensor entries into the state_dict: "
                                    f"{not_tensors[:5]}. Save model.state_dict() only.")
    return {k: _tensor_to_numpy(v) for k, v in obj.items()}


def real_torch():
    """Import and return the real PyTorch, refusing mindtorch's stand-in."""
    import torch
    origin = str(getattr(torch, "__file__", ""))
    if "mindtorch" in origin.replace("\\", "/"):
        raise RuntimeError(
            "`import torch` resolves to mindtorch in this process (mindnlp/mindtorch was "
            f"imported; torch.__file__ = {origin}). The mapping checks need the real PyTorch "
            "as an independent reference: run them in a fresh process or kernel that does not "
            "import mindnlp.")
    return torch


# --------------------------------------------------------------------------------------
# Memory: give back the pages of a memory-mapped tensor once it has been copied
# --------------------------------------------------------------------------------------
_PAGE = mmap.PAGESIZE
_MADV_DONTNEED = 4
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def drop_pages(array) -> None:
    """Tell the kernel this process no longer needs the file pages behind ``array`` (a
    read-only memory map: the data stays on disk and is re-read if touched again). Keeps the
    resident set at "parameters + one tensor" while a shard is streamed. No-op off Linux."""
    if _libc is None or array.nbytes < _PAGE:
        return
    start = array.ctypes.data // _PAGE * _PAGE
    length = (array.ctypes.data + array.nbytes - start + _PAGE - 1) // _PAGE * _PAGE
    _libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(length), _MADV_DONTNEED)


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
        if (n > size - 8 or n > 100_000_000) and (raw[:2] == b"PK" or raw[:1] == b"\x80"):
            raise CheckpointError(f"{path} is a PyTorch pickle (.bin/.pt), not a safetensors "
                                  "file: pass its model directory (with pytorch_model.bin."
                                  "index.json), or read it with course_lib.migration.convert."
                                  "load_torch_bin.")
        if n > size - 8 or n > 100_000_000:
            raise CheckpointError(f"{path} has a corrupt header (claims {n} header bytes in a "
                                  f"{size}-byte file). Re-download or re-save it.")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CheckpointError(f"{path} has an unreadable header ({e}). It is not a valid "
                                  "safetensors file; re-download or re-save it.") from None
    header.pop("__metadata__", None)
    end = max((v["data_offsets"][1] for v in header.values()), default=0)
    if 8 + n + end > size:
        raise CheckpointError(f"{path} is truncated: the header needs {8 + n + end} bytes "
                              f"but the file has {size}. Re-download or re-copy it.")
    return header, 8 + n


def read_safetensors(path, names=None) -> dict[str, np.ndarray]:
    """Tensors of one .safetensors file as read-only NumPy views of a memory map (a 10 GB
    shard is not read until used), in the file's dtype (BF16 -> ``ml_dtypes.bfloat16``)."""
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
        out[name] = mm[start + a:start + b].view(_NP_DTYPES[code]).reshape(info["shape"])
    return out


def _read_shard(path: Path) -> dict[str, np.ndarray]:
    """Memory-mapped, file-backed views of one shard (safetensors or a zip-format .bin)."""
    if path.suffix == ".safetensors":
        return read_safetensors(path)
    return load_torch_bin(path, mmap=True)


def checkpoint_shards(path) -> list[tuple[Path, list | None]]:
    """The files a checkpoint consists of, as ``[(file, [tensor names] or None)]``: through
    ``model.safetensors.index.json`` or ``pytorch_model.bin.index.json`` when present (only
    the shards the index names are read), else the single file."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"No checkpoint at {path}. Check the path (on ModelArts: was "
                                "the OBS folder copied/mounted?).")
    if path.is_file():
        return [(path, None)]
    for index in (INDEX_NAME, BIN_INDEX_NAME):
        if (path / index).exists():
            try:
                weight_map = json.loads((path / index).read_text())["weight_map"]
            except (json.JSONDecodeError, KeyError) as e:
                raise CheckpointError(f"{path / index} is not a valid index ({e!r}); "
                                      "re-download it.") from None
            by_file: dict[str, list] = {}
            for name, shard in weight_map.items():
                by_file.setdefault(shard, []).append(name)
            lost = sorted(f for f in by_file if not (path / f).exists())
            if lost:
                raise CheckpointError(f"{index} lists shard(s) {lost[:3]} that are missing "
                                      f"from {path}. Copy all shards.")
            return [(path / f, names) for f, names in by_file.items()]
    for single in (SINGLE_NAME, BIN_SINGLE_NAME):
        if (path / single).exists():
            return [(path / single, None)]
    raise CheckpointError(f"{path} contains no {SINGLE_NAME}, {BIN_SINGLE_NAME} and no "
                          f"{INDEX_NAME}/{BIN_INDEX_NAME}: it is not a model directory.")


def iter_checkpoint(path, release: bool = True) -> Iterator[tuple[str, np.ndarray]]:
    """``(name, array)`` for every tensor, one shard at a time. With ``release``, once the
    consumer has handled a tensor (the loop resumes) its file pages are dropped
    (``drop_pages``): the arrays are file-backed memory maps, so this only forgets the
    cached copy."""
    for shard, names in checkpoint_shards(path):
        tensors = _read_shard(shard)
        if names is not None:
            lost = sorted(set(names) - set(tensors))
            if lost:
                raise CheckpointError(f"Shard {shard.name} lacks {len(lost)} tensor(s) its "
                                      f"index promises, e.g. {lost[:3]}. The download is incomplete.")
        for name in (names if names is not None else list(tensors)):
            arr = tensors.pop(name)
            yield name, arr
            if release:
                drop_pages(arr)
        del tensors


def checkpoint_signature(path) -> dict[str, tuple[tuple, np.dtype]]:
    """``{name: (shape, dtype)}`` of a checkpoint without reading its data (headers of
    safetensors; for ``.bin`` the pickle's tensor records, memory-mapped)."""
    sig = {}
    for shard, names in checkpoint_shards(path):
        if shard.suffix == ".safetensors":
            header, _ = _read_header(shard)
            items = {k: (tuple(v["shape"]), np.dtype(_NP_DTYPES.get(v["dtype"], np.uint8)))
                     for k, v in header.items()}
        else:
            items = {k: (tuple(v.shape), v.dtype) for k, v in _read_shard(shard).items()}
        wanted = names if names is not None else list(items)
        lost = sorted(set(wanted) - set(items))
        if lost:
            raise CheckpointError(f"Shard {shard.name} lacks {len(lost)} tensor(s) its index "
                                  f"promises, e.g. {lost[:3]}. The download is incomplete.")
        sig.update({k: items[k] for k in wanted})
    return sig


def load_state_dict(path) -> dict[str, np.ndarray]:
    """A whole checkpoint as ``{name: array}`` (memory-mapped views in the file's dtypes):
    a ``.safetensors``/``.bin`` file, or a model directory (see ``checkpoint_shards``)."""
    return dict(iter_checkpoint(path, release=False))


def save_state_dict(state: Mapping[str, np.ndarray], directory, max_shard_bytes: int | None = None,
                    dtype=None) -> list[Path]:
    """Write ``model.safetensors``, or shards + ``model.safetensors.index.json`` when the
    tensors exceed ``max_shard_bytes`` (the sharded Hugging Face layout)."""
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
    if len(shards) == 1:
        return [_write_safetensors(shards[0], directory / SINGLE_NAME)]
    paths, weight_map = [], {}
    for i, shard in enumerate(shards, 1):
        fname = _shard_name(i, len(shards))
        paths.append(_write_safetensors(shard, directory / fname))
        weight_map.update({k: fname for k in shard})
    _write_index(directory, weight_map, sum(a.nbytes for a in arrays.values()))
    return paths


def _shard_name(i: int, n: int) -> str:
    return f"model-{i:05d}-of-{n:05d}.safetensors"


def _write_safetensors(tensors: Mapping[str, np.ndarray], path: Path) -> Path:
    """One safetensors file, whole or not at all (written, then renamed: ``safeio``), with the
    metadata that lets Hugging Face's torch loaders read it too."""
    from safetensors.numpy import save_file
    return atomic_write(path, lambda tmp: save_file(dict(tensors), str(tmp), metadata={"format": "pt"}))


def _write_index(directory: Path, weight_map: dict, total: int) -> None:
    write_text_atomic(directory / INDEX_NAME, json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))


# --------------------------------------------------------------------------------------
# The checkpoint-compatibility checker (one for the whole course)
# --------------------------------------------------------------------------------------
def _layer(name: str):
    m = re.search(r"(?:^|\.)layers\.(\d+)\.", name)
    return int(m.group(1)) if m else None


def _family_hint(missing: list[str], unexpected: list[str]) -> str | None:
    """Which model the checkpoint belongs to, and a conversion only where it can work: fusing
    or splitting q/k/v moves no bias, so none is offered when one side has q/k/v/o biases."""
    def has(names, *parts):
        return any(part in n for n in names for part in parts)
    biases = (".q_proj.bias", ".o_proj.bias")
    if has(unexpected, ".W_pack.") and has(missing, ".q_proj."):
        head = ("the checkpoint is Baichuan-format (fused W_pack) but the model has separate "
                "q/k/v projections: build a BaichuanForCausalLM")
        return head + (" (the model's q/k/v/o biases are not in a Baichuan checkpoint, so "
                       "split_w_pack alone cannot fill them)" if has(missing, *biases) else
                       ", or convert the state dict with split_w_pack(state)")
    if has(unexpected, ".q_proj.") and has(missing, ".W_pack."):
        head = ("the checkpoint has separate q_proj/k_proj/v_proj (InternLM/Llama format) but "
                "the model uses Baichuan's fused W_pack")
        if has(unexpected, *biases):
            return head + (": build an InternLMForCausalLM (the checkpoint's q/k/v/o biases "
                           "have no place in Baichuan's layers, so fuse_qkv alone cannot help)")
        return head + (": build a model with separate q/k/v, or convert the state dict with "
                       "fuse_qkv(state)")
    return None


def _classify(expected, found, skip) -> dict[str, list]:
    """Sort every name difference into one kind of problem."""
    skipped = sorted(k for k in set(found) - set(expected) if skip(k))
    unexpected = sorted(set(found) - set(expected) - set(skipped))
    model_layers = {_layer(k) for k in expected} - {None}
    extra_layers = [k for k in unexpected if _layer(k) is not None and _layer(k) not in model_layers]
    ckpt_layers = {_layer(k) for k in found} - {None}
    missing = sorted(set(expected) - set(found))
    missing_layers = [k for k in missing if _layer(k) is not None and _layer(k) not in ckpt_layers]
    return {"skipped": skipped, "missing": missing, "missing_layers": missing_layers,
            "extra_layers": extra_layers,
            "unexpected": [k for k in unexpected if k not in set(extra_layers)]}


def _split_sig(sig) -> tuple[dict, dict]:
    shapes, dtypes = {}, {}
    for k, v in sig.items():
        if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], tuple):
            shapes[k], dtypes[k] = v[0], v[1]
        else:
            shapes[k] = tuple(v.shape) if hasattr(v, "shape") else tuple(v)
            if hasattr(v, "dtype"):
                dtypes[k] = v.dtype
    return shapes, dtypes


def _is_float_any(dtype) -> bool:
    try:
        return is_float(dtype)
    except TypeError:                      # a MindSpore dtype
        return "float" in str(dtype).lower()


def check_compatible(expected: Mapping, found: Mapping, *, source="checkpoint",
                     target="the model", strict: bool = True, skip=KNOWN_BUFFERS.search,
                     unexpected_ok: bool = False, model_names=None,
                     extra_state_hint: str | None = None, shape_hint: str | None = None) -> dict:
    """THE checkpoint-compatibility check of the course. ``expected``/``found`` map names to
    shapes, ``(shape, dtype)`` pairs or arrays. Raises ``CheckpointError`` (a ``ValueError``)
    listing, in one format, each kind of problem with its diagnosis: shape mismatch, missing,
    unexpected keys inside layers the model has, extra/missing layers, non-float dtypes.
    Names matching ``skip`` (rotary ``inv_freq`` buffers) are skipped and reported.
    ``strict=False`` tolerates missing/unexpected names, never wrong shapes or dtypes;
    ``unexpected_ok`` tolerates only unexpected ones (a file holding more than this Cell).
    With ``model_names`` and ``extra_state_hint``: when only non-model entries (optimizer
    state) differ, the hint is given instead of "another model". ``shape_hint`` replaces the
    advice for wrong shapes (a trainer checkpoint has no config.json to build from)."""
    exp_shapes, exp_dtypes = _split_sig(expected)
    got_shapes, got_dtypes = _split_sig(found)
    c = _classify(exp_shapes, got_shapes, skip or (lambda k: False))
    common = sorted(set(exp_shapes) & set(got_shapes))
    models_first = sorted(common, key=lambda k: (model_names is not None and k not in model_names, k))
    c["shape"] = [f"{k}: checkpoint {got_shapes[k]} vs model {exp_shapes[k]}"
                  for k in models_first if tuple(got_shapes[k]) != tuple(exp_shapes[k])]
    c["dtype"] = [f"{k}: {got_dtypes[k]}" for k in common if k in got_dtypes and k in exp_dtypes
                  and _is_float_any(exp_dtypes[k]) and not _is_float_any(got_dtypes[k])]
    report = {"missing": c["missing"], "unexpected": c["unexpected"] + c["extra_layers"],
              "skipped": c["skipped"]}
    if unexpected_ok:
        c["unexpected"], c["extra_layers"] = [], []
    fatal = c["shape"] or c["dtype"] or (strict and (c["missing"] or c["unexpected"]
                                                     or c["extra_layers"]))
    if fatal:
        raise CheckpointError(_message(c, source, target, model_names, extra_state_hint, shape_hint))
    return report


def _message(c, source, target, model_names, extra_state_hint, shape_hint=None) -> str:
    layers_of = lambda names: sorted({_layer(k) for k in names} - {None})  # noqa: E731
    lines = [f"Checkpoint {source} does not fit {target}:"]
    fam = _family_hint(c["missing"], c["unexpected"] + c["extra_layers"])
    missing_in_layers = [k for k in c["missing"] if k not in set(c["missing_layers"])]
    kinds = [
        ("shape mismatch", c["shape"], shape_hint or "it was saved for another configuration "
         "(hidden size, vocab, FFN width...): build the model from the checkpoint's own "
         "config.json (course_lib.from_pretrained)"),
        ("not floating point", c["dtype"], "weights must be F32/F16/BF16: is this really a "
         "model checkpoint?"),
        ("extra layers in checkpoint", c["extra_layers"], f"the checkpoint has more layers "
         f"(up to layer {max(layers_of(c['extra_layers']), default=0)}) than the model: build "
         "the model from the checkpoint's config"),
        ("missing layers", c["missing_layers"], f"the model has layers "
         f"{layers_of(c['missing_layers'])[:4]}... that the checkpoint lacks: pick the matching "
         "config, or pass strict=False to load a partial checkpoint on purpose"),
        ("missing in checkpoint", missing_in_layers, None if fam else "the model expects "
         "these parameters and the file lacks them: a config flag (bias, fused W_pack) that "
         "does not match, or an incomplete download"),
        ("unexpected inside existing layers", c["unexpected"], None if fam else "tensors the "
         "model does not have inside layers it does have: a config flag (bias...) that does "
         "not match, or buffers this loader does not know (skip them explicitly)"),
    ]
    for title, names, why in kinds:
        if names:
            more = f" and {len(names) - 4} more" if len(names) > 4 else ""
            lines.append(f"  {title} ({len(names)}): {names[:4]}{more}" + (f" — {why}." if why else ""))
    if fam and (missing_in_layers or c["unexpected"]):
        lines.append(f"  why: {fam}.")      # one family mismatch explains both lists: said once
    if c["skipped"]:
        lines.append(f"  skipped buffers ({len(c['skipped'])}): {c['skipped'][:2]} (not parameters).")
    if model_names is not None and extra_state_hint:
        names = c["missing"] + c["unexpected"] + c["extra_layers"] + [s.split(":")[0] for s in c["shape"]]
        if not any(n in model_names for n in names) and not c["dtype"]:
            lines.append("  " + extra_state_hint)
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# Model <-> state dict
# --------------------------------------------------------------------------------------
def state_dict(model) -> dict[str, np.ndarray]:
    """The model's parameters under their Hugging Face names, as NumPy arrays."""
    return {name: p.asnumpy() for name, p in model.parameters_and_names()}


def model_signature(model) -> dict:
    return {name: (tuple(p.shape), p.dtype) for name, p in model.parameters_and_names()}


def check_state_dict(model, state: Mapping[str, np.ndarray], strict: bool = True) -> dict:
    """``check_compatible`` between ``model`` and an in-memory ``{name: array}``."""
    return check_compatible(model_signature(model), state, source="state dict", strict=strict)


def _to_numpy_dtype(ms_dtype):
    import mindspore as ms
    return ml_dtypes.bfloat16 if ms_dtype == ms.bfloat16 else ms.dtype_to_nptype(ms_dtype)


CHUNK_BYTES = 4 * 2 ** 20


def copy_into(param, array, release: bool = False) -> None:
    """Copy one checkpoint array into ``param`` in the PARAMETER's dtype (bf16 included).
    The destination tensor is allocated once and filled through its shared NumPy view
    (``Tensor.asnumpy()`` on the host) in row blocks of ~4 MB, converting the dtype per
    block; with ``release`` (``array`` is a read-only file map) each block's file pages are
    dropped once copied — so a 625 MB embedding never sits in memory twice."""
    from mindspore import Tensor
    target = _to_numpy_dtype(param.dtype)
    dst = Tensor(np.zeros(array.shape, target))           # calloc: no pages touched yet
    view = dst.asnumpy()
    if not np.shares_memory(view, dst.asnumpy()):          # a backend without a shared view
        param.set_data(Tensor(np.ascontiguousarray(np.asarray(array).astype(target))))
        return
    flat_src = array.reshape(array.shape[0], -1) if array.ndim else array.reshape(1, 1)
    bf16 = np.dtype(target) == np.dtype(ml_dtypes.bfloat16)
    # MindSpore's host bfloat16 is its own NumPy type: copy bf16 as raw 16-bit words
    flat_dst = view.view(np.uint16) if bf16 else view
    flat_dst = flat_dst.reshape(flat_src.shape)
    step = max(1, CHUNK_BYTES // max(1, flat_src[0].nbytes))
    for i in range(0, flat_src.shape[0], step):
        block = flat_src[i:i + step]
        converted = block if block.dtype == target else block.astype(target)
        flat_dst[i:i + step] = converted.view(np.uint16) if bf16 else converted
        if release:
            drop_pages(block)
    param.set_data(dst)


def load_weights(model, source, strict: bool = True, rename=None) -> dict:
    """Check, then copy a checkpoint (a path — file or model directory — or ``{name:
    array}``) into ``model``, streaming shard by shard; each tensor is converted to its
    parameter's dtype. ``rename`` maps a checkpoint key to the model's name (InternLM2:
    ``families.renamer``). Returns ``{'missing', 'unexpected', 'skipped'}``. Nothing is
    copied unless the whole checkpoint fits."""
    params = dict(model.parameters_and_names())
    rename = rename or (lambda key: key)
    if isinstance(source, Mapping):
        found = {rename(k): v for k, v in source.items()}
        report = check_compatible(model_signature(model), found, source="state dict",
                                  strict=strict)
        items = iter(found.items())
    else:
        found = {rename(k): v for k, v in checkpoint_signature(source).items()}
        report = check_compatible(model_signature(model), found, source=str(source),
                                  strict=strict)
        items = ((rename(k), v) for k, v in iter_checkpoint(source))
    for name, arr in items:
        if name in params:
            copy_into(params[name], arr, release=not isinstance(source, Mapping))
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


def read_config(directory) -> dict:
    """``directory/config.json`` as a dict, with errors that say what is wrong."""
    directory = Path(directory)
    if not directory.exists():
        raise FileNotFoundError(f"No directory {directory}. Check the path (on ModelArts: was "
                                "the OBS folder copied/mounted?).")
    if not directory.is_dir():
        raise CheckpointError(f"{directory} is a file; pass the model DIRECTORY (with "
                              "config.json), or build the model and call load_weights(model, file).")
    if not (directory / CONFIG_NAME).exists():
        raise FileNotFoundError(f"{directory} has no {CONFIG_NAME}; build the model yourself and "
                                "call load_weights(model, path).")
    try:
        return json.loads((directory / CONFIG_NAME).read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{directory / CONFIG_NAME} is not valid JSON ({e}).") from None


def convert_torch_checkpoint(src, dst) -> Path:
    """PyTorch ``.bin`` shard(s) -> safetensors shards + ``model.safetensors.index.json`` in
    ``dst`` (dtypes kept, bf16 included), through the index and the one safe loader. Not
    needed for loading any more (``.bin`` directories load directly); useful to publish
    safetensors. Copies config.json."""
    import shutil
    src, dst = Path(src), Path(dst)
    shards = checkpoint_shards(src)
    dst.mkdir(parents=True, exist_ok=True)
    weight_map, total = {}, 0
    for i, (shard, names) in enumerate(shards, 1):
        tensors = _read_shard(shard)
        tensors = {k: np.ascontiguousarray(tensors[k]) for k in (names or list(tensors))}
        fname = _shard_name(i, len(shards))
        _write_safetensors(tensors, dst / fname)
        weight_map.update({k: fname for k in tensors})
        total += sum(v.nbytes for v in tensors.values())
        del tensors
    _write_index(dst, weight_map, total)
    if src.is_dir() and (src / CONFIG_NAME).exists():
        shutil.copy(src / CONFIG_NAME, dst / CONFIG_NAME)
    return dst
