"""LoRA from first principles (Hu et al. 2021, arXiv 2106.09685; microsoft/LoRA loralib).

A frozen ``nn.Dense`` computes ``W x + b``. LoRA adds a trainable low-rank detour::

    y = W x + b + (B A x) * alpha / r        A: (r, in)  kaiming-uniform(a=sqrt(5))
                                             B: (out, r) zeros  -> starts equal to the base

Only A and B are trained: ``r * (in + out)`` numbers per layer instead of ``in * out``.
After training, ``B A alpha/r`` folds into W (``merge_lora``): a plain Dense again, no extra
latency at inference.

    report = inject_lora(model, targets=["q_proj", "v_proj"], r=8, alpha=16)
    print(report)                       # what was replaced, shapes, trainable fraction
    ...train model.trainable_params()   # only lora_A / lora_B are trainable
    save_adapter(model, "adapter.safetensors")          # a few KB, not the whole model
    load_adapter(fresh_base, "adapter.safetensors")     # checks it is the same base
    merge_lora(model)                   # LoRADense -> nn.Dense(W + B A alpha/r)

Design choice: ``LoRADense`` *is* an ``nn.Dense`` that shares the base layer's ``weight`` and
``bias`` Parameters, so parameter names do not change (``...q_proj.weight`` stays
``...q_proj.weight``; the adapter adds ``...q_proj.lora_A`` / ``...q_proj.lora_B``): a base
checkpoint still loads into an adapted model and the base forward pass is bit-identical.
"""
from __future__ import annotations

import difflib
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops
from mindspore.common.initializer import HeUniform, initializer
from mindspore.nn.utils import no_init_parameters

from .blocks import count_parameters
from .validate import is_int

LORA_PARAMS = ("lora_A", "lora_B")
ADAPTER_FORMAT = "course_lib.lora/1"


# --------------------------------------------------------------------------------------
# The layer
# --------------------------------------------------------------------------------------
class LoRADense(nn.Dense):
    """``base(x) + lora_B(lora_A(dropout(x))) * alpha / r`` with ``base`` frozen.

    Built from an existing ``nn.Dense``: its ``weight``/``bias`` Parameters are reused (not
    copied) and frozen; ``lora_A`` and ``lora_B`` are the only new (trainable) Parameters.
    """

    def __init__(self, base: nn.Dense, r: int, alpha: float, dropout: float = 0.0,
                 name: str = "layer"):
        if not isinstance(base, nn.Dense):
            raise TypeError(f"LoRADense wraps an nn.Dense; {name!r} is a {type(base).__name__}.")
        if isinstance(base, LoRADense):
            raise ValueError(f"{name!r} already has a LoRA adapter: inject only once "
                             "(merge_lora first if you want a second adapter).")
        if base.activation_flag:
            # LoRA's update belongs *before* the non-linearity; Dense fuses it after the bias.
            raise ValueError(f"{name!r} is an nn.Dense with a built-in activation; LoRA needs a "
                             "plain linear layer. Move the activation out of the Dense.")
        in_f, out_f = base.in_channels, base.out_channels
        check_rank(r, in_f, out_f, name)
        if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or alpha <= 0:
            raise ValueError(f"alpha must be a positive number (scaling = alpha / r), got {alpha!r}.")
        if not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}.")
        # nn.Dense.__init__ builds the matmul/bias ops; the weight it makes is replaced right
        # away by the base layer's own Parameters, so it is never allocated
        # (no_init_parameters defers it; it is dropped before anything could initialise it).
        with no_init_parameters():
            super().__init__(in_f, out_f, weight_init="zeros", bias_init="zeros",
                             has_bias=base.has_bias)
        self.weight = base.weight
        if base.has_bias:
            self.bias = base.bias
        self.weight.requires_grad = False
        if base.has_bias:
            self.bias.requires_grad = False
        self.r, self.alpha, self.dropout_p = int(r), float(alpha), float(dropout)
        self.scaling = self.alpha / self.r
        # kaiming_uniform_(a=sqrt(5)) as loralib/PEFT: U(-1/sqrt(in), 1/sqrt(in)).
        self.lora_A = Parameter(initializer(HeUniform(negative_slope=math.sqrt(5)), (r, in_f),
                                            ms.float32), name="lora_A")
        self.lora_B = Parameter(initializer("zeros", (out_f, r), ms.float32), name="lora_B")
        self.lora_dropout = nn.Dropout(p=dropout) if dropout > 0 else nn.Identity()

    def construct(self, x):
        base = super().construct(x)
        h = ops.dense(self.lora_dropout(x), self.lora_A.astype(x.dtype))       # (..., r)
        return base + ops.dense(h, self.lora_B.astype(x.dtype)) * self.scaling  # (..., out)

    def delta_weight(self) -> np.ndarray:
        """``B A alpha/r`` as a (out, in) float64 array: what merging adds to ``weight``."""
        a = self.lora_A.asnumpy().astype(np.float64)
        b = self.lora_B.asnumpy().astype(np.float64)
        return (b @ a) * self.scaling

    def extra_repr(self) -> str:
        return (f"in={self.in_channels}, out={self.out_channels}, r={self.r}, "
                f"alpha={self.alpha:g}, dropout={self.dropout_p:g}")


def check_rank(r, in_features: int, out_features: int, name: str = "layer") -> None:
    if not is_int(r):
        raise TypeError(f"LoRA rank r must be an int, got {r!r}.")
    if r <= 0:
        raise ValueError(f"LoRA rank r must be >= 1, got {r}.")
    if r > min(in_features, out_features):
        raise ValueError(f"LoRA rank r={r} is larger than {name!r}'s dims (in={in_features}, "
                         f"out={out_features}): B·A would not be low-rank any more. Use "
                         f"r <= {min(in_features, out_features)}.")


# --------------------------------------------------------------------------------------
# Finding layers by name
# --------------------------------------------------------------------------------------
def _cells(model: nn.Cell) -> dict[str, nn.Cell]:
    return {name: cell for name, cell in model.cells_and_names() if name}


def lora_layers(model: nn.Cell) -> dict[str, LoRADense]:
    """Every ``LoRADense`` of ``model`` by full name."""
    return {n: c for n, c in _cells(model).items() if isinstance(c, LoRADense)}


def _matches(name: str, target) -> bool:
    if isinstance(target, re.Pattern):
        return target.fullmatch(name) is not None
    if target.startswith("re:"):
        return re.fullmatch(target[3:], name) is not None
    return name == target or name.endswith("." + target)


def match_targets(model: nn.Cell, targets) -> list[str]:
    """Full names of the ``nn.Dense`` layers selected by ``targets``, in model order.

    A target is an exact name (``model.layers.0.self_attn.q_proj``), a suffix on a dot
    boundary (``q_proj``, ``self_attn.v_proj``) or a regex over the full name, written
    ``"re:<pattern>"`` or passed as a compiled ``re.Pattern`` (full match).
    Every target must select at least one Dense layer.
    """
    if isinstance(targets, (str, re.Pattern)):
        targets = [targets]
    targets = list(targets)
    if not targets:
        raise ValueError("targets is empty: name the layers to adapt, e.g. ['q_proj', 'v_proj'].")
    for t in targets:
        if not isinstance(t, (str, re.Pattern)) or (isinstance(t, str) and not t.strip()):
            raise TypeError(f"A target must be a non-empty str or re.Pattern, got {t!r}.")
    cells = _cells(model)
    dense = [n for n, c in cells.items() if isinstance(c, nn.Dense)]
    chosen: list[str] = []
    for t in targets:
        hits = [n for n in dense if _matches(n, t)]
        if hits:
            chosen.extend(h for h in hits if h not in chosen)
            continue
        others = [f"{n} ({type(c).__name__})" for n, c in cells.items() if _matches(n, t)]
        if others:
            raise ValueError(f"Target {_show(t)} matches {others[:5]}, which are not nn.Dense "
                             "layers; LoRA wraps Dense layers — target their projections "
                             "(e.g. 'self_attn.q_proj').")
        pieces = sorted({p for n in dense for p in (n, n.split(".")[-1])})
        text = t.pattern if isinstance(t, re.Pattern) else t.removeprefix("re:")
        close = difflib.get_close_matches(text, pieces, n=5, cutoff=0.5)
        raise ValueError(f"Target {_show(t)} matches no nn.Dense layer. Close names: {close}. "
                         f"Dense layers here end in: {sorted({n.split('.')[-1] for n in dense})}.")
    order = {n: i for i, n in enumerate(dense)}
    return sorted(chosen, key=order.__getitem__)


def _show(t) -> str:
    return repr(t.pattern if isinstance(t, re.Pattern) else t)


def _set_child(model: nn.Cell, name: str, new: nn.Cell) -> None:
    parent_name, _, attr = name.rpartition(".")
    parent = model if not parent_name else _cells(model)[parent_name]
    if isinstance(parent, (nn.CellList, nn.SequentialCell)):
        parent[int(attr)] = new
    else:
        setattr(parent, attr, new)
    # Attaching a Cell renames its Parameters relative to the parent; restore full names
    # (optimizers and checkpoints need them unique and stable).
    for local, p in new.parameters_and_names():
        p.name = f"{name}.{local}"


# --------------------------------------------------------------------------------------
# Counting
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ParamCount:
    trainable: int
    total: int

    @property
    def fraction(self) -> float:
        return self.trainable / self.total if self.total else 0.0

    def __str__(self) -> str:
        return (f"trainable {self.trainable:,} / total {self.total:,} "
                f"({100 * self.fraction:.4f}%)")


def parameter_counts(model: nn.Cell) -> ParamCount:
    """Trainable and total parameters of ``model`` (``blocks.count_parameters`` twice)."""
    return ParamCount(count_parameters(model, trainable_only=True), count_parameters(model))


def parameter_table(model: nn.Cell) -> str:
    """Trainable / total numbers per module, with layer indices collapsed to ``*``."""
    rows: dict[str, list[int]] = {}
    for name, p in model.parameters_and_names():
        module = re.sub(r"\.\d+\.", ".*.", name.rpartition(".")[0] or name)
        row = rows.setdefault(module, [0, 0])
        row[0] += p.size if p.requires_grad else 0
        row[1] += p.size
    width = max(len(m) for m in rows) if rows else 10
    lines = [f"{'module':<{width}}  {'trainable':>12}  {'total':>12}"]
    lines += [f"{m:<{width}}  {t:>12,}  {n:>12,}" for m, (t, n) in rows.items()]
    c = parameter_counts(model)
    lines.append(f"{'TOTAL':<{width}}  {c.trainable:>12,}  {c.total:>12,}  "
                 f"({100 * c.fraction:.4f}% trainable)")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# Injecting
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReplacedLayer:
    name: str
    in_features: int
    out_features: int
    added: int          # r * (in + out)


@dataclass
class LoRAReport:
    """What ``inject_lora`` (or ``load_adapter``/``unmerge_lora``) did."""

    r: int
    alpha: float
    dropout: float
    replaced: list[ReplacedLayer] = field(default_factory=list)
    count: ParamCount = ParamCount(0, 0)

    @property
    def added(self) -> int:
        return sum(x.added for x in self.replaced)

    def __str__(self) -> str:
        width = max([len(x.name) for x in self.replaced] + [5])
        lines = [f"LoRA r={self.r} alpha={self.alpha:g} (scaling {self.alpha / self.r:g}) "
                 f"dropout={self.dropout:g} on {len(self.replaced)} layers"]
        lines += [f"  {x.name:<{width}}  ({x.out_features}, {x.in_features})  "
                  f"+{x.added:,}" for x in self.replaced]
        lines.append(f"  added {self.added:,} parameters; {self.count}")
        return "\n".join(lines)


def inject_lora(model: nn.Cell, targets, r: int = 8, alpha: float = 16.0,
                dropout: float = 0.0) -> LoRAReport:
    """Wrap the target Dense layers in ``LoRADense`` and freeze every other parameter.

    Returns a ``LoRAReport``. Raises ``ValueError`` for a target that matches nothing (with
    close names), a bad rank, or a model that already carries LoRA adapters.
    """
    existing = lora_layers(model)
    if existing:
        raise ValueError(f"This model already has LoRA adapters on {sorted(existing)[:4]}"
                         f"{' ...' if len(existing) > 4 else ''}; injecting twice would stack "
                         "adapters. Use merge_lora(model) first, or start from a fresh base.")
    names = match_targets(model, targets)
    cells = _cells(model)
    # Validate everything before touching the model: a failure leaves it unchanged.
    for n in names:
        check_rank(r, cells[n].in_channels, cells[n].out_channels, n)
    new_layers = {n: LoRADense(cells[n], r, alpha, dropout, name=n) for n in names}
    for n, layer in new_layers.items():
        _set_child(model, n, layer)
    freeze_all_but_lora(model)
    replaced = [ReplacedLayer(n, l.in_channels, l.out_channels,
                              l.r * (l.in_channels + l.out_channels))
                for n, l in new_layers.items()]
    return LoRAReport(int(r), float(alpha), float(dropout), replaced, parameter_counts(model))


def freeze_all_but_lora(model: nn.Cell) -> ParamCount:
    """``requires_grad`` True only for ``lora_A``/``lora_B``; returns the new counts."""
    for name, p in model.parameters_and_names():
        p.requires_grad = name.rpartition(".")[2] in LORA_PARAMS
    return parameter_counts(model)


def lora_parameters(model: nn.Cell) -> list[Parameter]:
    """The adapter Parameters (what the optimizer should own)."""
    return [p for n, p in model.parameters_and_names() if n.rpartition(".")[2] in LORA_PARAMS]


# --------------------------------------------------------------------------------------
# Saving / loading adapters only
# --------------------------------------------------------------------------------------
def _fingerprint(weight: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(weight, np.float32).tobytes()).hexdigest()[:16]


def adapter_state(model: nn.Cell) -> tuple[dict[str, np.ndarray], dict]:
    """(tensors, metadata) of the adapters: ``<layer>.lora_A`` / ``<layer>.lora_B`` arrays
    plus r, alpha, dropout and, per layer, its shape and a fingerprint of its base weight."""
    layers = lora_layers(model)
    if not layers:
        raise ValueError("This model has no LoRA adapters to save; call inject_lora first.")
    first = next(iter(layers.values()))
    tensors, info = {}, {}
    for n, l in layers.items():
        tensors[f"{n}.lora_A"] = l.lora_A.asnumpy().astype(np.float32)
        tensors[f"{n}.lora_B"] = l.lora_B.asnumpy().astype(np.float32)
        info[n] = {"in": l.in_channels, "out": l.out_channels,
                   "base": _fingerprint(l.weight.asnumpy())}
    meta = {"format": ADAPTER_FORMAT, "r": first.r, "alpha": first.alpha,
            "dropout": first.dropout_p, "layers": info}
    return tensors, meta


def save_adapter(model: nn.Cell, path) -> Path:
    """Write only the adapter (safetensors + JSON metadata, like PEFT's adapter_model)."""
    from safetensors.numpy import save_file
    tensors, meta = adapter_state(model)
    from .safeio import atomic_write
    return atomic_write(path, lambda tmp: save_file(
        tensors, str(tmp), metadata={"course_lora": json.dumps(meta)}))


def read_adapter(path) -> tuple[dict[str, np.ndarray], dict]:
    from safetensors import SafetensorError, safe_open
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No adapter file at {path}. Save one with save_adapter(model, path).")
    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = json.loads((f.metadata() or {}).get("course_lora", "null"))
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError, ValueError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not a readable adapter file ({err}); it may be truncated "
                         "or corrupt — save it again with save_adapter.") from err
    if not isinstance(meta, dict) or meta.get("format") != ADAPTER_FORMAT:
        raise ValueError(f"{path} is a safetensors file but not a course LoRA adapter "
                         f"(missing '{ADAPTER_FORMAT}' metadata).")
    return tensors, meta


def _check_adapter_fits(model: nn.Cell, tensors: dict, meta: dict, strict_base: bool,
                        source: str) -> None:
    cells = _cells(model)
    missing = [n for n in meta["layers"] if n not in cells]
    if missing:
        raise ValueError(f"Adapter {source} was made for layers {missing[:4]} which this model "
                         "does not have: it belongs to a different architecture.")
    for n, info in meta["layers"].items():
        c = cells[n]
        if not isinstance(c, nn.Dense):
            raise ValueError(f"Adapter {source}: {n!r} is a {type(c).__name__} here, not nn.Dense.")
        if (c.out_channels, c.in_channels) != (info["out"], info["in"]):
            raise ValueError(f"Adapter {source} expects {n!r} of shape (out={info['out']}, "
                             f"in={info['in']}), this model's layer is (out={c.out_channels}, "
                             f"in={c.in_channels}): a different model size.")
        if strict_base and _fingerprint(c.weight.asnumpy()) != info["base"]:
            raise ValueError(f"Adapter {source} was trained on a different base model: the weight "
                             f"of {n!r} differs from the one it was saved with. Load the same "
                             "base checkpoint first (or pass strict_base=False if you really "
                             "mean to apply it to another base).")
    from .hf_weights import check_compatible
    r = meta["r"]
    check_compatible({f"{n}.lora_{x}": shape for n, i in meta["layers"].items()
                      for x, shape in (("A", (r, i["in"])), ("B", (i["out"], r)))},
                     tensors, source=f"adapter {source}", target="its own metadata (save it again)")


def load_adapter(model: nn.Cell, path, strict_base: bool = True) -> LoRAReport:
    """Put a saved adapter onto ``model``.

    On a plain base model the adapters are injected first (exact layer names from the file);
    on a model that already has LoRA layers, the same layers must be adapted. Checks names,
    shapes and — with ``strict_base`` — that the base weights are those the adapter was
    trained on.
    """
    tensors, meta = read_adapter(path)
    return _apply_adapter(model, tensors, meta, strict_base, str(path))


def _apply_adapter(model, tensors, meta, strict_base, source) -> LoRAReport:
    _check_adapter_fits(model, tensors, meta, strict_base, source)
    present = lora_layers(model)
    wanted = sorted(meta["layers"])
    if present and sorted(present) != wanted:
        raise ValueError(f"The model has LoRA on {sorted(present)[:4]} but adapter {source} is "
                         f"for {wanted[:4]}; start from a model without adapters.")
    if present:
        bad = [n for n, l in present.items() if l.r != meta["r"]]
        if bad:
            raise ValueError(f"Adapter {source} has r={meta['r']} but the model's LoRA layers "
                             f"{bad[:4]} have r={present[bad[0]].r}.")
        report = LoRAReport(meta["r"], meta["alpha"], meta["dropout"],
                            [ReplacedLayer(n, l.in_channels, l.out_channels,
                                           l.r * (l.in_channels + l.out_channels))
                             for n, l in present.items()])
    else:
        report = inject_lora(model, wanted, r=meta["r"], alpha=meta["alpha"],
                             dropout=meta["dropout"])
    layers = lora_layers(model)
    for n in wanted:
        layers[n].scaling = float(meta["alpha"]) / int(meta["r"])
        layers[n].alpha = float(meta["alpha"])
        layers[n].lora_A.set_data(Tensor(tensors[f"{n}.lora_A"], ms.float32))
        layers[n].lora_B.set_data(Tensor(tensors[f"{n}.lora_B"], ms.float32))
    report.count = parameter_counts(model)
    return report


# --------------------------------------------------------------------------------------
# Merging
# --------------------------------------------------------------------------------------
@dataclass
class MergeReport:
    """The layers folded by ``merge_lora`` and the adapters that were folded in (so that
    ``unmerge_lora(model, report)`` can take them out again)."""

    merged: list[str]
    tensors: dict[str, np.ndarray]
    meta: dict

    def __str__(self) -> str:
        return (f"merged {len(self.merged)} LoRA layers into plain nn.Dense "
                f"(r={self.meta['r']}, alpha={self.meta['alpha']:g})")


def merge_lora(model: nn.Cell) -> MergeReport:
    """Replace every ``LoRADense`` by a plain ``nn.Dense`` with weight ``W + B A alpha/r``.

    The computation is done in float64 and stored as float32. The new weight keeps the
    parameter name and ``requires_grad`` of the base weight; the bias Parameter is reused.
    """
    layers = lora_layers(model)
    if not layers:
        raise ValueError("merge_lora: this model has no LoRA layers (nothing to merge). "
                         "inject_lora or load_adapter first.")
    tensors, meta = adapter_state(model)
    for n, l in layers.items():
        merged = l.weight.asnumpy().astype(np.float64) + l.delta_weight()
        _set_child(model, n, _plain_dense(l, merged.astype(np.float32)))
    return MergeReport(sorted(layers), tensors, meta)


def _plain_dense(layer: nn.Dense, weight: np.ndarray) -> nn.Dense:
    dense = nn.Dense(layer.in_channels, layer.out_channels, weight_init="zeros",
                     bias_init="zeros", has_bias=layer.has_bias)
    dense.weight = Parameter(Tensor(weight, ms.float32), name="weight",
                             requires_grad=layer.weight.requires_grad)
    if layer.has_bias:
        dense.bias = layer.bias
    return dense


def unmerge_lora(model: nn.Cell, adapters) -> LoRAReport:
    """Undo ``merge_lora``: subtract ``B A alpha/r`` again and restore ``LoRADense`` layers.

    ``adapters`` is the ``MergeReport`` returned by ``merge_lora`` or an adapter file from
    ``save_adapter``. The base weight comes back up to float32 rounding (not bit-exact).
    """
    if isinstance(adapters, MergeReport):
        tensors, meta, source = adapters.tensors, adapters.meta, "from merge_lora"
    else:
        (tensors, meta), source = read_adapter(adapters), str(adapters)
    if lora_layers(model):
        raise ValueError("unmerge_lora: this model still has (unmerged) LoRA layers; "
                         "nothing was merged.")
    _check_adapter_fits(model, tensors, meta, strict_base=False, source=source)
    cells = _cells(model)
    never_merged = [n for n in meta["layers"] if np.any(tensors[f"{n}.lora_B"])
                    and _fingerprint(cells[n].weight.asnumpy()) == meta["layers"][n]["base"]]
    if never_merged:
        raise ValueError(f"unmerge_lora: {never_merged[:3]} hold exactly the base weights the "
                         f"adapter {source} was trained on, i.e. it was never merged into "
                         "them; subtracting it would give W - dW. Use load_adapter(model, "
                         "path) to attach the adapter to this base instead.")
    scaling = float(meta["alpha"]) / int(meta["r"])
    for n in meta["layers"]:
        a = tensors[f"{n}.lora_A"].astype(np.float64)
        b = tensors[f"{n}.lora_B"].astype(np.float64)
        base = cells[n].weight.asnumpy().astype(np.float64) - (b @ a) * scaling
        cells[n].weight.set_data(Tensor(base.astype(np.float32)))
    return _apply_adapter(model, tensors, meta, False, source)
