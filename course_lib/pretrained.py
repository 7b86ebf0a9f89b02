"""``from_pretrained``: the chapter-06 Cell, filled with the weights of a real model directory.

    model = course_lib.from_pretrained("/cache/Baichuan-13B-Chat", dtype="bfloat16")

What happens, in order (each step is a function below, ~20 lines each):

1. **Which network?** ``config.json`` is read and the architecture decided from the file's
   own evidence (``hf_weights.config_from_hf``): Baichuan-13B (ALiBi) vs Baichuan-7B (RoPE)
   by ``architectures``/``model_max_length``/``max_position_embeddings`` — never by the
   width; InternLM-7B by ``model_type: internlm`` + ``bias``. Anything else (Baichuan2's
   NormHead, InternLM2, GQA) is refused with the reason.
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

from . import hf_weights, memory

DTYPES = ("float32", "float16", "bfloat16")
GENERATION_CONFIG = "generation_config.json"


def _ms_dtype(name: str):
    import mindspore as ms
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {name!r}.")
    return {"float32": ms.float32, "float16": ms.float16, "bfloat16": ms.bfloat16}[name]


def family_of(hf_cfg: dict, config) -> str:
    """``baichuan-13b`` / ``baichuan-7b`` / ``internlm`` / ``llama``: selects the chat format
    and stop ids (``course_lib.conversation``)."""
    kind = hf_cfg.get("model_type")
    if kind == "baichuan":
        return "baichuan-13b" if config.position == "alibi" else "baichuan-7b"
    return kind


def compute_dtype_for(dtype: str, device: str) -> str:
    """The matmul dtype for weights stored in ``dtype`` on ``device`` (table above)."""
    if dtype == "bfloat16" and device == "CPU":
        return "float32"
    return dtype


def build_empty(config, dtype: str):
    """The course model for ``config`` with un-allocated parameters of ``dtype``."""
    import mindspore as ms
    from mindspore.nn.utils import no_init_parameters
    from .baichuan import BaichuanConfig, BaichuanForCausalLM
    from .internlm import InternLMForCausalLM
    cls = BaichuanForCausalLM if isinstance(config, BaichuanConfig) else InternLMForCausalLM
    target = _ms_dtype(dtype)
    with no_init_parameters():
        model = cls(config)
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
    """Baichuan-13B(-Chat), Baichuan-7B or InternLM(-chat)-7B from its downloaded directory,
    parameters in ``dtype``. Prints the memory plan and the load time (``verbose``);
    raises ``MemoryError`` with the numbers when the plan does not fit, ``CheckpointError``
    with a diagnosis when the files do not fit the architecture. The returned model has
    ``.family``, ``.hf_config``, ``.generation_config`` and ``.load_report``."""
    import mindspore as ms
    path = Path(path)
    hf_cfg = hf_weights.read_config(path)
    config = hf_weights.config_from_hf(hf_cfg)
    plan = plan_for(config, dtype, host_memory_gib, device_memory_gib)
    if verbose:
        print(plan)
    if not plan.fits:
        raise MemoryError(f"{plan}\nChoose a smaller dtype (bfloat16/float16 halve float32), "
                          "a machine with more memory, or an Ascend device with enough HBM.")
    start = time.perf_counter()
    model = build_empty(config, dtype)
    report = hf_weights.load_weights(model, path)
    device = ms.get_context("device_target")
    compute = compute_dtype or compute_dtype_for(dtype, device)
    if compute != "float32" or dtype != "float32":
        model.to_float(_ms_dtype(compute))
    model.set_train(False)
    model.family = family_of(hf_cfg, config)
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
