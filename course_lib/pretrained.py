"""``from_pretrained``: the chapter-06 Cell, filled with the weights of a real model directory.

    model = course_lib.from_pretrained("/cache/Baichuan-13B-Chat", dtype="bfloat16")

What happens, in order (each step is a function below, ~20 lines each):

1. **Which network?** ``config.json`` is read and the architecture decided from the file's
   own evidence (``families.config_from_hf``): Qwen2/2.5, Qwen3, Llama-2/-3, InternLM2/2.5,
   Baichuan2-7B/-13B, and the first generation — Baichuan-13B (ALiBi) vs Baichuan-7B
   (RoPE) by ``architectures``/``model_max_length``/``max_position_embeddings``, never by
   the width; InternLM-7B by ``model_type: internlm`` + ``bias``. What the course's layers
   do not compute (sliding windows, MoE, yarn rope scaling, ...) is refused with the reason.
2. **Will it fit?** ``memory.load_plan`` is printed for this host (and device), and the
   load is refused *before reading a byte of weights* when the peak does not fit.
3. **Build without weights.** ``no_init_parameters`` builds the Cell with placeholder
   parameters; each is switched to the requested dtype (``float16``/``bfloat16``/``float32``).
4. **Stream the shards.** ``hf_weights.load_weights`` checks every name/shape/dtype against
   the model (one checker, one message format), then copies tensor by tensor, shard by
   shard, through the index (``model.safetensors.index.json`` or
   ``pytorch_model.bin.index.json``; ``.bin`` only through ``torch.load(weights_only=True)``).
   Rotary ``inv_freq`` buffers are skipped and listed.
5. **Choose how to compute.** Parameters stay in the storage dtype. RMSNorm and softmax
   always run in float32 (``layers.Float32Cell``). The matmuls run in:

   ========  ==================  ==========================================================
   storage   Ascend              CPU
   ========  ==================  ==========================================================
   float16   float16             float16
   bfloat16  bfloat16            float32 — MindSpore's CPU MatMul has no bfloat16 kernel
                                 ("Select CPU operator[MatMul] fail! Unsupported data
                                 type"); bf16 -> fp32 is exact, fp16 could overflow
   float32   float32             float32
   ========  ==================  ==========================================================

   ``model.to_float(compute)`` casts each operator's inputs (the weights included) at run
   time; the stored parameters keep their dtype.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from . import families, hf_weights, memory
from .safeio import write_text_atomic

DTYPES = ("float32", "float16", "bfloat16")
GENERATION_CONFIG = "generation_config.json"


def _ms_dtype(name: str):
    import mindspore as ms
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {name!r}.")
    return {"float32": ms.float32, "float16": ms.float16, "bfloat16": ms.bfloat16}[name]


family_of = families.family_of      # the family string: chat format, stop ids, LoRA targets


def compute_dtype_for(dtype: str, device: str) -> str:
    """The matmul dtype for weights stored in ``dtype`` on ``device`` (table above)."""
    if dtype == "bfloat16" and device == "CPU":
        return "float32"
    return dtype


def model_class(config):
    """The Cell class for a course config: Baichuan's and InternLM's named subclasses, the
    plain ``CausalLM`` for the newer families (same layers, parameter names)."""
    from .baichuan import BaichuanConfig, BaichuanForCausalLM
    from .internlm import InternLMConfig, InternLMForCausalLM
    from .layers import CausalLM
    if isinstance(config, BaichuanConfig):
        return BaichuanForCausalLM
    return InternLMForCausalLM if isinstance(config, InternLMConfig) else CausalLM


def build_empty(config, dtype: str):
    """The course model for ``config`` with un-allocated parameters of ``dtype``."""
    import mindspore as ms
    from mindspore.nn.utils import no_init_parameters
    target = _ms_dtype(dtype)
    with no_init_parameters():
        model = model_class(config)(config)
        if target != ms.float32:
            _lazy_retype(model, target)
    return model


def _lazy_retype(model, target) -> None:
    """Replace every (still unallocated) parameter by an unallocated one of ``target``
    dtype. ``Parameter.set_dtype`` would not do: on a lazy parameter it runs the
    initializer, i.e. allocates and fills the whole model with random numbers first."""
    from mindspore import Parameter
    from mindspore.common.initializer import initializer
    for _, cell in model.cells_and_names():
        for attr, p in list(cell._params.items()):
            if p is not None and p.dtype != target:
                setattr(cell, attr, Parameter(initializer("zeros", p.shape, target), name=p.name,
                                              requires_grad=p.requires_grad))


def plan_for(config, dtype: str, host_memory_gib=None, device_memory_gib=None):
    """The memory plan of this load on this machine (``memory.load_plan``)."""
    import mindspore as ms
    device = ms.get_context("device_target")
    host = None if host_memory_gib is None else int(host_memory_gib * memory.GiB)
    if device_memory_gib is None and device != "CPU":
        device_memory_gib = _device_gib()
    return memory.load_plan(config, dtype, host_available=host, device=device,
                            device_gib=device_memory_gib)


def _device_gib():
    """Total memory of the current Ascend/GPU device in GiB, or None if MindSpore cannot
    tell (then only the host side is planned)."""
    try:
        import mindspore as ms
        return ms.hal.get_device_properties(0).total_memory / memory.GiB
    except Exception:  # noqa: BLE001 - the API differs across backends/versions
        return None


def from_pretrained(path, dtype: str = "float16", *, compute_dtype: str | None = None,
                    host_memory_gib: float | None = None, device_memory_gib: float | None = None,
                    verbose: bool = True):
    """Any family of ``families`` (Qwen2/2.5, Qwen3, Llama-2/-3, InternLM2/2.5, Baichuan2,
    Baichuan-13B/-7B, InternLM-7B) from its downloaded directory,
    parameters in ``dtype``. Prints the memory plan and the load time (``verbose``);
    raises ``MemoryError`` with the numbers when the plan does not fit, ``CheckpointError``
    with a diagnosis when the files do not fit the architecture. The returned model has
    ``.family``, ``.hf_config``, ``.generation_config`` and ``.load_report``."""
    import mindspore as ms
    path = Path(path)
    hf_cfg = hf_weights.read_config(path)
    config = families.config_from_hf(hf_cfg)
    family = families.family_of(hf_cfg, config)
    plan = plan_for(config, dtype, host_memory_gib, device_memory_gib)
    if verbose:
        print(plan)
    if not plan.fits:
        raise MemoryError(f"{plan}\nChoose a smaller dtype (bfloat16/float16 halve float32), "
                          "a machine with more memory, or an Ascend device with enough HBM.")
    start = time.perf_counter()
    model = build_empty(config, dtype)
    report = hf_weights.load_weights(model, path, rename=families.renamer(family))
    device = ms.get_context("device_target")
    compute = compute_dtype or compute_dtype_for(dtype, device)
    if compute != "float32" or dtype != "float32":
        model.to_float(_ms_dtype(compute))
    model.set_train(False)
    model.family = family
    model.hf_config = hf_cfg
    model.generation_config = _read_json(path / GENERATION_CONFIG)
    model.load_report = dict(report, seconds=time.perf_counter() - start, dtype=dtype,
                             compute_dtype=compute)
    if verbose:
        print(f"Loaded {config.name} ({model.family}) from {path.name}: parameters {dtype}, "
              f"matmuls {compute} on {device}, {model.load_report['seconds']:.1f} s"
              + (f"; skipped buffers: {len(report['skipped'])}" if report["skipped"] else ""))
    return model


def _read_json(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise hf_weights.CheckpointError(f"{path} is not valid JSON ({e}).") from None


def save_pretrained(model, directory, dtype=np.float32, max_shard_bytes: int | None = None) -> Path:
    """``config.json`` (``families.hf_config``) + safetensors weights (sharded if
    ``max_shard_bytes``) in Hugging Face layout: what ``from_pretrained`` reads back.
    Returns the directory."""
    directory = Path(directory)
    hf_weights.save_state_dict(hf_weights.state_dict(model), directory, max_shard_bytes, dtype=dtype)
    cfg = families.hf_config(model.config)
    cfg["torch_dtype"] = {np.float32: "float32", np.float16: "float16"}.get(np.dtype(dtype).type, "float32")
    write_text_atomic(directory / hf_weights.CONFIG_NAME, json.dumps(cfg, indent=2))
    return directory
