"""Checkpoint conversion: PyTorch / Hugging Face files <-> MindSpore ``.ckpt``.

The course models already use the Hugging Face parameter names (``course_lib.hf_weights``
owns that layout, the safetensors reader/writer and the strict name/shape checks), so
conversion is not a renaming exercise; what this module adds is the file formats and the
safety and reporting around them:

* ``.safetensors`` (file, or a directory with ``model.safetensors`` / a sharded index) —
  read through ``hf_weights.load_state_dict``;
* PyTorch ``.bin``/``.pt`` pickles (file, or a directory of shards) — read with
  ``torch.load(weights_only=True)``. A pickle can run arbitrary code when loaded; anything
  that is not a plain ``{name: tensor}`` mapping is refused with ``UnsafeCheckpointError``;
* MindSpore ``.ckpt`` — written with ``mindspore.save_checkpoint`` in the model's parameter
  order and dtypes; read back with ``mindspore.load_checkpoint``.

Every conversion checks names, shapes and dtypes against the course model described by
``config.json`` (or a config you pass) and returns a ``ConversionReport``.

    report = torch_to_mindspore("hf_dir/", "model.ckpt")       # HF/PyTorch -> MindSpore
    report = mindspore_to_torch("model.ckpt", "hf_out/", config) # MindSpore -> HF safetensors
"""
from __future__ import annotations

import json
import pickle
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np

from .. import families, hf_weights
# The one safe pickle reader lives in the file layer (hf_weights); chapter 13 uses it as
# ``convert.load_torch_bin``.
from ..hf_weights import CheckpointError, UnsafeCheckpointError, load_torch_bin  # noqa: F401

TORCH_SUFFIXES = (".bin", ".pt", ".pth")
# Entries a training checkpoint holds besides the weights (LLMTrainer.save, Model.train):
# optimizer moments, step counters, lr schedule and metadata. Skipped, and reported.
NON_MODEL_PREFIXES = ("adam_m.", "adam_v.", "moment1.", "moment2.", "moments.", "accum.")
NON_MODEL_KEYS = {"global_step", "learning_rate", "current_iterator_step", "format", "step",
                  "total_steps", "batches_consumed", "data_seed", "history", "epoch_num",
                  "step_num", "loss_scale", "scale_sense"}


@dataclass
class ConversionReport:
    source: str
    target: str
    tensors: int
    parameters: int
    source_dtypes: dict = field(default_factory=dict)   # dtype name -> count, as read
    target_dtypes: dict = field(default_factory=dict)   # dtype name -> count, as written
    cast: list = field(default_factory=list)            # "name: float16 -> float32"
    skipped: list = field(default_factory=list)         # non-model entries left out
    missing: list = field(default_factory=list)
    unexpected: list = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"{self.source} -> {self.target}",
                 f"  tensors {self.tensors}, parameters {self.parameters:,}",
                 f"  dtypes read {dict(sorted(self.source_dtypes.items()))}, "
                 f"written {dict(sorted(self.target_dtypes.items()))}",
                 f"  cast {len(self.cast)}, skipped (optimizer/metadata) {len(self.skipped)}, "
                 f"missing {len(self.missing)}, unexpected {len(self.unexpected)}"]
        return "\n".join(lines)


def read_torch_checkpoint(path) -> tuple[dict[str, np.ndarray], str]:
    """Any PyTorch/HF checkpoint -> (``{name: array}``, format name)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"No checkpoint at {path}.")
    if path.is_file():
        if path.suffix == ".safetensors":
            return dict(hf_weights.load_state_dict(path)), "safetensors"
        if path.suffix in TORCH_SUFFIXES:
            return load_torch_bin(path), "pytorch-pickle"
        raise CheckpointError(f"Unknown checkpoint type {path.suffix!r} ({path}); expected "
                              f".safetensors or one of {TORCH_SUFFIXES}.")
    shards = hf_weights.checkpoint_shards(path)          # through the index when present
    state = {}
    for shard, names in shards:
        part = (dict(hf_weights.load_state_dict(shard)) if shard.suffix == ".safetensors"
                else load_torch_bin(shard))
        dup = sorted(set(part) & set(state))
        if dup:
            raise CheckpointError(f"{shard.name} repeats tensors of another shard, e.g. {dup[:3]}.")
        state.update({k: part[k] for k in (names or list(part))})
    fmt = "safetensors" if shards[0][0].suffix == ".safetensors" else "pytorch-pickle"
    return state, fmt


# --------------------------------------------------------------------------------------
# Model description
# --------------------------------------------------------------------------------------
def _config_for(path: Path, config):
    if config is not None:
        return config
    cfg_file = (path if path.is_dir() else path.parent) / hf_weights.CONFIG_NAME
    if not cfg_file.exists():
        raise FileNotFoundError(f"No {hf_weights.CONFIG_NAME} next to {path}: pass the course "
                                "config explicitly (e.g. config=internlm.tiny()).")
    return families.config_from_hf(json.loads(cfg_file.read_text()))


def skeleton(config):
    """The course model for ``config`` with placeholder (never allocated) weights: enough
    to know every parameter's name, shape and dtype, even for a 13B model."""
    from ..pretrained import build_empty
    return build_empty(config, "float32")


def _dtype_name(a) -> str:
    return str(getattr(a, "dtype", type(a).__name__)).replace("mindspore.", "").lower()


def _split_non_model(state: Mapping, model_names: set) -> tuple[dict, list]:
    kept, skipped = {}, []
    for k, v in state.items():
        if k not in model_names and (k in NON_MODEL_KEYS or k.startswith(NON_MODEL_PREFIXES)):
            skipped.append(k)
        else:
            kept[k] = v
    return kept, sorted(skipped)


# --------------------------------------------------------------------------------------
# Conversions
# --------------------------------------------------------------------------------------
def torch_to_mindspore(src, dst, config=None) -> ConversionReport:
    """PyTorch/HF checkpoint (``.safetensors``/``.bin``, file or directory) -> MindSpore
    ``.ckpt`` for the course model of ``config`` (default: the ``config.json`` beside it).

    Strict: every model parameter present, nothing unexpected, shapes equal, floating
    point only (``hf_weights.check_state_dict``). Tensors are written in the model's
    parameter dtype; any cast (e.g. float16 file -> float32 model) is listed."""
    import mindspore as ms
    from mindspore import Tensor
    src, dst = Path(src), Path(dst)
    state, fmt = read_torch_checkpoint(src)
    config = _config_for(src, config)
    model = skeleton(config)
    hf_weights.check_state_dict(model, state, strict=True)
    entries, cast, written = [], [], Counter()
    for name, param in model.parameters_and_names():
        arr = np.ascontiguousarray(state[name])
        target = ms.dtype_to_nptype(param.dtype)
        if arr.dtype != target:
            cast.append(f"{name}: {arr.dtype} -> {np.dtype(target)}")
        entries.append({"name": name, "data": Tensor(arr.astype(target, copy=False))})
        written[np.dtype(target).name] += 1
    dst.parent.mkdir(parents=True, exist_ok=True)
    ms.save_checkpoint(entries, str(dst))
    return ConversionReport(
        source=f"{src.name} ({fmt})", target=f"{dst.name} (mindspore-ckpt)", tensors=len(entries),
        parameters=int(sum(np.prod(np.shape(state[e['name']])) for e in entries)),
        source_dtypes=dict(Counter(_dtype_name(v) for v in state.values())),
        target_dtypes=dict(written), cast=cast)


def read_mindspore_checkpoint(path) -> dict[str, np.ndarray]:
    import mindspore as ms
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No MindSpore checkpoint at {path}.")
    try:
        params = ms.load_checkpoint(str(path))
    except Exception as err:  # noqa: BLE001 - MindSpore raises ValueError/RuntimeError
        raise CheckpointError(f"{path} is not a readable MindSpore checkpoint "
                              f"({type(err).__name__}). Re-save it with mindspore.save_checkpoint.") from None
    return {k: v.asnumpy() for k, v in params.items() if hasattr(v, "asnumpy")}


def mindspore_to_torch(src, dst_dir, config, dtype=np.float32, max_shard_bytes=None) -> ConversionReport:
    """MindSpore ``.ckpt`` (a model's weights, or an ``LLMTrainer.save`` file with optimizer
    state) -> Hugging Face directory: safetensors (+ index when sharded) and ``config.json``.
    Optimizer moments, step counters and metadata are skipped and reported."""
    src, dst_dir = Path(src), Path(dst_dir)
    raw = read_mindspore_checkpoint(src)
    model = skeleton(config)
    names = {n for n, _ in model.parameters_and_names()}
    state, skipped = _split_non_model(raw, names)
    hf_weights.check_state_dict(model, state, strict=True)
    target = np.dtype(dtype)
    cast = [f"{k}: {v.dtype} -> {target}" for k, v in state.items() if v.dtype != target]
    hf_weights.save_state_dict(state, dst_dir, max_shard_bytes=max_shard_bytes, dtype=target)
    cfg = families.hf_config(config)
    cfg["torch_dtype"] = {"float32": "float32", "float16": "float16"}.get(target.name, target.name)
    (dst_dir / hf_weights.CONFIG_NAME).write_text(json.dumps(cfg, indent=2))
    return ConversionReport(
        source=f"{src.name} (mindspore-ckpt)", target=f"{dst_dir.name}/ (safetensors)",
        tensors=len(state), parameters=int(sum(v.size for v in state.values())),
        source_dtypes=dict(Counter(v.dtype.name for v in state.values())),
        target_dtypes={target.name: len(state)}, cast=cast, skipped=skipped)


def load_mindspore_checkpoint(model, path) -> dict:
    """Load a ``.ckpt`` into ``model`` strictly: ``mindspore.load_param_into_net`` only
    *returns* the names it could not match; here any mismatch is an error."""
    import mindspore as ms
    raw = ms.load_checkpoint(str(path))
    names = {n for n, _ in model.parameters_and_names()}
    kept, skipped = _split_non_model(raw, names)
    hf_weights.check_state_dict(model, {k: v.asnumpy() for k, v in kept.items()}, strict=True)
    not_loaded, unused = ms.load_param_into_net(model, kept, strict_load=True)
    if not_loaded or unused:
        raise CheckpointError(f"{path}: parameters not loaded {not_loaded[:5]}, unused {unused[:5]}.")
    return {"loaded": len(kept), "skipped": skipped}


def max_state_diff(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> float:
    """Largest |a - b| over tensors with the same names (names must match exactly)."""
    if set(a) != set(b):
        raise CheckpointError(f"different tensor names: only in first {sorted(set(a) - set(b))[:3]}, "
                              f"only in second {sorted(set(b) - set(a))[:3]}")
    return float(max((np.abs(np.asarray(a[k], np.float64) - np.asarray(b[k], np.float64)).max()
                      for k in a), default=0.0))
