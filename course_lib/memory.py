"""Memory calculator: what a model needs to be stored, served and trained — and how a
data/tensor/pipeline-parallel layout spreads it over devices. The reason Baichuan-13B is
trained on clusters.

Units: bytes everywhere; ``GiB = 2**30`` (binary units, like the "MiB" = 2**20 bytes of
``nvidia-smi``'s memory column).

Assumptions (state them whenever you quote a number):

* **Training state, mixed precision** (16-bit compute with float32 master weights, AdamW):
  16-bit weights 2 B + 16-bit gradients 2 B + float32 master copy 4 B + AdamW m 4 B +
  v 4 B = **16 bytes per trainable parameter** (the ZeRO paper's 16Ψ). Pure float32
  training: weights 4 + gradients 4 + m 4 + v 4 = also 16 B, without a master copy.
  Frozen parameters (e.g. LoRA's base model) cost only their weights.
* **Activations** kept for the backward pass, per layer and per token, in 16-bit values
  (no dropout; small float32 norm statistics ignored), for hidden h, FFN f, heads a,
  sequence s:  attention ``6h + a·s`` (norm input, q/k/v-projection input, Q, K, V,
  softmax output a·s, context) + SwiGLU ``2h + 4f`` (norm input, MLP input, gate, up,
  silu(gate), product)  =  ``8h + 4f + a·s`` values. FlashAttention-style kernels drop
  ``a·s`` (they recompute it). Full recomputation keeps only each layer's input (h values)
  plus one layer's activations while it is recomputed. The head keeps float32 logits
  (4·V bytes per token) for the cross-entropy and its input (the final norm's input and
  output, two h-vectors of 16-bit values: 4h bytes per token).
* **Parallelism** (Megatron-LM / ZeRO conventions, the paper's stages; in MindSpore:
  ``tensor``/``pipeline`` parallel and the *parallel optimizer*, whose ``optimizer_level``
  levels do not map one to one: its docs say level1 already shards the weights and
  optimizer state, level2 adds the gradients; this calculator models ZeRO-1/2/3 only):
  tensor parallel (with sequence parallelism) divides weights, gradients, optimizer state
  and activations by ``tp``; pipeline parallel divides the model state by ``pp`` but, with
  the 1F1B schedule, the first stage keeps ``pp`` micro-batches in flight, so activation
  memory per device stays that of the whole model for one micro-batch (Korthikanti et
  al. 2022); data parallel replicates everything unless ZeRO shards optimizer state
  (stage 1), + gradients (stage 2), + weights (stage 3) over ``dp``.
* Real runs need more (framework workspace, communication buffers, fragmentation): keep
  10-20 % headroom before trusting a "fits".
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from mindspore.nn.utils import no_init_parameters

from .blocks import count_parameters  # noqa: F401  (chapters 06-07 import it from here)

GiB = 2 ** 30
BYTES_PER_VALUE = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1, "int4": 0.5}
PRECISIONS = ("mixed", "fp32")


def _bytes_per(dtype: str) -> float:
    if dtype not in BYTES_PER_VALUE:
        raise ValueError(f"Unknown dtype {dtype!r}; use one of {sorted(BYTES_PER_VALUE)}.")
    return BYTES_PER_VALUE[dtype]


def _n_params(config_or_count) -> int:
    if isinstance(config_or_count, (int, float)):
        return int(config_or_count)
    if hasattr(config_or_count, "num_parameters"):
        return int(config_or_count.num_parameters())
    raise TypeError("Pass a model config (with num_parameters()) or a parameter count.")


# --------------------------------------------------------------------------------------
# Counting parameters (``count_parameters`` is the one in ``blocks``, chapter 01)
# --------------------------------------------------------------------------------------
def build_lazy(model_cls, config):
    """Instantiate ``model_cls(config)`` without allocating its weights, using MindSpore's
    ``nn.utils.no_init_parameters``: shapes exist, memory does not (until loaded/initialised).
    Chapter 06 prints what a Baichuan-13B build takes on its machine, instead of 53 GB."""
    with no_init_parameters():
        return model_cls(config)


# --------------------------------------------------------------------------------------
# Inference: weights and KV cache
# --------------------------------------------------------------------------------------
def weight_bytes(config_or_count, dtype: str = "fp16") -> int:
    """Bytes to hold the weights at ``dtype`` (fp32/fp16/bf16/int8/int4; quantisation scales
    ignored)."""
    return int(_n_params(config_or_count) * _bytes_per(dtype))


def kv_cache_bytes(config, batch: int, seq_len: int, dtype: str = "fp16") -> int:
    """Keys + values of every layer for ``batch`` sequences of ``seq_len`` tokens:
    2 · layers · batch · seq_len · kv_heads · head_dim values (= hidden without GQA)."""
    width = getattr(config, "kv_heads", config.num_heads) * getattr(
        config, "head_dim", config.hidden_size // config.num_heads)
    return int(2 * config.num_layers * batch * seq_len * width * _bytes_per(dtype))


# --------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------
def activation_values_per_token_per_layer(config, seq_len: int, flash_attention: bool = False) -> int:
    """``8h + 4f + a·s`` (``8h + 4f`` with flash attention) — see the module docstring."""
    h, f, a = config.hidden_size, config.intermediate_size, config.num_heads
    return 8 * h + 4 * f + (0 if flash_attention else a * seq_len)


def activation_bytes(config, micro_batch: int, seq_len: int, dtype: str = "fp16",
                     recompute: bool = False, flash_attention: bool = False, tp: int = 1) -> int:
    """Activations of one micro-batch kept for backward (whole model, divided by ``tp``)."""
    per_layer = activation_values_per_token_per_layer(config, seq_len, flash_attention)
    if recompute:
        values = config.num_layers * config.hidden_size + per_layer
    else:
        values = config.num_layers * per_layer
    b = _bytes_per(dtype)
    head = 4 * config.vocab_size + 2 * b * config.hidden_size   # fp32 logits + head input
    return int(micro_batch * seq_len * (values * b + head) / tp)


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per device, by kind."""

    weights: float = 0
    gradients: float = 0
    master_weights: float = 0
    optimizer_states: float = 0
    activations: float = 0

    @property
    def total(self) -> float:
        return (self.weights + self.gradients + self.master_weights + self.optimizer_states
                + self.activations)

    def gib(self) -> dict[str, float]:
        """Every entry (and the total) in GiB, rounded to 0.01."""
        d = {k: getattr(self, k) for k in ("weights", "gradients", "master_weights",
                                            "optimizer_states", "activations")}
        d["total"] = self.total
        return {k: round(v / GiB, 2) for k, v in d.items()}


def training_state_bytes(trainable: int, frozen: int = 0, precision: str = "mixed",
                         half: str = "fp16") -> MemoryBreakdown:
    """Weights, gradients, master copy and AdamW m/v for ``trainable`` parameters, plus the
    weights of ``frozen`` ones (LoRA: frozen = base model, trainable = adapters)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision == "mixed":
        w = _bytes_per(half)
        return MemoryBreakdown(weights=(trainable + frozen) * w, gradients=trainable * w,
                               master_weights=trainable * 4, optimizer_states=trainable * 8)
    return MemoryBreakdown(weights=(trainable + frozen) * 4, gradients=trainable * 4,
                           optimizer_states=trainable * 8)


@dataclass(frozen=True)
class Layout:
    """How training is spread: ``dp`` x ``tp`` x ``pp`` devices, ZeRO stage 0-3 as in the ZeRO
    paper (MindSpore's parallel-optimizer levels do not map one to one: its level1 already
    shards weights and optimizer state), full recomputation or not."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    zero: int = 0
    recompute: bool = False
    flash_attention: bool = False
    micro_batch: int = 1
    seq_len: int | None = None      # default: the model's max_seq_len

    def __post_init__(self):
        for name in ("dp", "tp", "pp", "micro_batch"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.zero not in (0, 1, 2, 3):
            raise ValueError(f"zero must be 0, 1, 2 or 3 (ZeRO stage), got {self.zero}")

    @property
    def devices(self) -> int:
        return self.dp * self.tp * self.pp


def per_device_memory(config, layout: Layout = Layout(), precision: str = "mixed",
                      half: str = "fp16") -> MemoryBreakdown:
    """Bytes one device holds when training ``config`` with ``layout`` (see assumptions)."""
    state = training_state_bytes(config.num_parameters(), 0, precision, half)
    model_split = layout.tp * layout.pp
    dp_shard = lambda stage: layout.dp if layout.zero >= stage else 1  # noqa: E731
    seq_len = layout.seq_len or config.max_seq_len
    act = activation_bytes(config, layout.micro_batch, seq_len,
                           half if precision == "mixed" else "fp32",
                           layout.recompute, layout.flash_attention, layout.tp)
    return MemoryBreakdown(
        weights=state.weights / model_split / dp_shard(3),
        gradients=state.gradients / model_split / dp_shard(2),
        master_weights=state.master_weights / model_split / dp_shard(1),
        optimizer_states=state.optimizer_states / model_split / dp_shard(1),
        activations=act)


@dataclass(frozen=True)
class Plan:
    layout: Layout
    memory: MemoryBreakdown
    device_gib: float

    @property
    def devices(self) -> int:
        return self.layout.devices

    @property
    def fits(self) -> bool:
        return self.memory.total <= self.device_gib * GiB


def plan(config, device_gib: float, layout: Layout = Layout(), precision: str = "mixed") -> Plan:
    """Per-device memory of ``layout`` and whether it fits devices of ``device_gib`` GiB."""
    return Plan(layout, per_device_memory(config, layout, precision), device_gib)


def devices_needed(config, device_gib: float, *, tp: int = 1, pp: int = 1, zero: int = 0,
                   recompute: bool = False, flash_attention: bool = False, micro_batch: int = 1,
                   seq_len: int | None = None, precision: str = "mixed",
                   max_dp: int = 4096) -> Plan:
    """The smallest data-parallel size that makes a ``tp`` x ``pp`` layout fit, as a
    ``Plan`` (``plan.devices`` = dp·tp·pp). Without ZeRO, data parallelism copies the whole
    training state, so only ``tp``/``pp`` (or recompute) can make it fit."""
    base = Layout(1, tp, pp, zero, recompute, flash_attention, micro_batch, seq_len)
    first = plan(config, device_gib, base, precision)
    if first.fits:
        return first
    if zero == 0:
        raise ValueError(
            f"{first.memory.total / GiB:.1f} GiB per device with tp={tp}, pp={pp} exceeds "
            f"{device_gib} GiB, and without ZeRO/optimizer sharding more data parallelism does "
            "not help: raise tp or pp, enable recompute, or shard the optimizer (zero>=1).")
    for dp in range(2, max_dp + 1):
        p = plan(config, device_gib, replace(base, dp=dp), precision)
        if p.fits:
            return p
    raise ValueError(f"No data-parallel size up to {max_dp} fits {device_gib} GiB with tp={tp}, "
                     f"pp={pp}, zero={zero}: the unsharded part ({p.memory.total / GiB:.1f} GiB, "
                     "mostly activations) is too big — enable recompute or raise tp.")


# --------------------------------------------------------------------------------------
# Compute: the other reason for a cluster
# --------------------------------------------------------------------------------------
def training_flops(config_or_count, tokens: float) -> float:
    """≈ 6·N·D floating-point operations to train N parameters on D tokens (2·N·D forward,
    4·N·D backward; Kaplan et al. 2020). Ignores attention's s² term (small at s = 4096)."""
    return 6.0 * _n_params(config_or_count) * float(tokens)


def training_days(config_or_count, tokens: float, devices: int, device_tflops: float,
                  utilization: float = 0.4) -> float:
    """Wall-clock days for ``training_flops`` on ``devices`` devices of ``device_tflops``
    peak TFLOP/s each, of which a fraction ``utilization`` (MFU) is achieved."""
    if devices < 1 or device_tflops <= 0 or not 0 < utilization <= 1:
        raise ValueError("Need devices >= 1, device_tflops > 0 and 0 < utilization <= 1.")
    seconds = training_flops(config_or_count, tokens) / (devices * device_tflops * 1e12 * utilization)
    return seconds / 86400.0


# --------------------------------------------------------------------------------------
# Loading a checkpoint: the plan printed (and enforced) before reading any weight
# --------------------------------------------------------------------------------------
DTYPE_ALIASES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16",
                 "fp32": "fp32", "fp16": "fp16", "bf16": "bf16"}


def host_available_bytes() -> int:
    """Memory the OS can give this process now (``MemAvailable``: free + reclaimable cache)."""
    import psutil
    return int(psutil.virtual_memory().available)


@dataclass(frozen=True)
class LoadPlan:
    """What loading ``name`` at ``dtype`` needs, and whether it fits.

    Host peak = weights at ``dtype`` + the largest single tensor — an upper bound: shards
    are memory-mapped and copied in ~4 MB blocks whose file pages are released at once
    (at most 1.15x for a 142M-parameter bf16 load: tests/test_pretrained.py measures and
    prints it). On a device
    (Ascend NPU) the weights move to device memory, plus the KV cache of one full-length
    sequence."""

    name: str
    dtype: str
    parameters: int
    weights: int
    largest_tensor: int
    host_available: int
    device: str = "CPU"
    device_capacity: int | None = None
    kv_cache: int = 0

    @property
    def host_peak(self) -> int:
        return self.weights + self.largest_tensor

    @property
    def device_need(self) -> int:
        return self.weights + self.kv_cache

    @property
    def fits(self) -> bool:
        host_ok = self.host_peak <= self.host_available
        return host_ok and (self.device_capacity is None or self.device_need <= self.device_capacity)

    def __str__(self) -> str:
        g = _human
        lines = [f"Memory plan: {self.name}, {self.parameters:,} parameters at {self.dtype}",
                 f"  host: weights {g(self.weights)} + largest tensor {g(self.largest_tensor)}"
                 f" = peak {g(self.host_peak)}; available {g(self.host_available)}"]
        if self.device_capacity is not None:
            lines.append(f"  {self.device}: weights + KV cache of one full sequence "
                         f"{g(self.device_need)}; device memory {g(self.device_capacity)}")
        lines.append("  fits" if self.fits else "  DOES NOT FIT")
        return "\n".join(lines)


def load_plan(config, dtype: str = "bf16", host_available: int | None = None,
              device: str = "CPU", device_gib: float | None = None) -> LoadPlan:
    """The memory plan for loading ``config``'s weights at ``dtype`` (fp32/fp16/bf16 or the
    torch-style names). ``host_available`` defaults to what the OS reports now."""
    dt = DTYPE_ALIASES.get(str(dtype))
    if dt is None:
        raise ValueError(f"Unknown dtype {dtype!r}; use float32, float16 or bfloat16.")
    shapes = config.parameter_shapes()
    largest = max(int(_prod(s)) for s in shapes.values())
    return LoadPlan(
        name=getattr(config, "name", "model"), dtype=dt, parameters=config.num_parameters(),
        weights=weight_bytes(config, dt), largest_tensor=int(largest * _bytes_per(dt)),
        host_available=host_available_bytes() if host_available is None else int(host_available),
        device=device, device_capacity=None if device_gib is None else int(device_gib * GiB),
        kv_cache=kv_cache_bytes(config, 1, config.max_seq_len, dt) if device_gib else 0)


def _human(b: float) -> str:
    return f"{b / GiB:.2f} GiB" if b >= GiB else f"{b / 2 ** 20:.2f} MiB"


def _prod(shape) -> int:
    out = 1
    for s in shape:
        out *= int(s)
    return out
