"""Reference solutions of chapter 08's code exercises (LoRA), and the realistic wrong
versions the self-test feeds to the checkers.

Load one after trying: ``from course_lib.check import show_solution; show_solution("ch08.lora_forward")``.
"""
from __future__ import annotations

from mindspore import nn, ops

from course_lib.lora import LoRADense


# ------------------------------------------------------------------ 1. the LoRA forward pass
class MyLoRADense(LoRADense):
    """y = W x + b + B (A x) · alpha / r, with W, b frozen (``nn.Dense.construct``)."""

    def construct(self, x):
        base = nn.Dense.construct(self, x)                              # W x + b (frozen)
        h = ops.dense(self.lora_dropout(x), self.lora_A.astype(x.dtype))      # (..., r)
        return base + ops.dense(h, self.lora_B.astype(x.dtype)) * self.scaling


class wrong_lora_no_scaling(LoRADense):
    """Forgets alpha / r."""

    def construct(self, x):
        return nn.Dense.construct(self, x) + ops.dense(ops.dense(x, self.lora_A), self.lora_B)


class wrong_lora_alpha_only(LoRADense):
    """Scales by alpha instead of alpha / r."""

    def construct(self, x):
        return nn.Dense.construct(self, x) + ops.dense(ops.dense(x, self.lora_A), self.lora_B) * self.alpha


class wrong_lora_no_base(LoRADense):
    """Returns only the low-rank detour, without the frozen base layer."""

    def construct(self, x):
        return ops.dense(ops.dense(x, self.lora_A), self.lora_B) * self.scaling


class wrong_lora_super_twice(LoRADense):
    """Takes the base from ``super().construct`` (the library's LoRADense: already with the
    detour) and adds the detour again."""

    def construct(self, x):
        return super().construct(x) + ops.dense(ops.dense(x, self.lora_A), self.lora_B) * self.scaling


# ------------------------------------------------------------------ 2. replace a layer by its dotted name
def replace_layer(model: nn.Cell, name: str, new: nn.Cell) -> None:
    """Put ``new`` where ``model``'s sub-Cell ``name`` (e.g. ``model.layers.0.self_attn.q_proj``)
    is. ``setattr(model, name, new)`` cannot do it: a dotted name is not an attribute, and
    the layer lives on its PARENT (``...self_attn``), reached one name piece at a time."""
    parent_name, _, attr = name.rpartition(".")
    parent = model
    for piece in parent_name.split(".") if parent_name else []:
        parent = parent[int(piece)] if isinstance(parent, (nn.CellList, nn.SequentialCell)) \
            else getattr(parent, piece)
    if isinstance(parent, (nn.CellList, nn.SequentialCell)):
        parent[int(attr)] = new
    else:
        setattr(parent, attr, new)
    # Attaching renames the new Cell's Parameters relative to the parent ("q_proj.weight"):
    # give them back their full, unique names (optimizers and checkpoints go by name).
    for local, p in new.parameters_and_names():
        p.name = f"{name}.{local}"


def wrong_replace_on_root(model, name, new):
    """Attaches the new layer to the ROOT under its last name piece: the old layer stays."""
    setattr(model, name.rpartition(".")[2], new)


def wrong_replace_keeps_short_names(model, name, new):
    """Finds the right parent but leaves the Parameters named relative to it."""
    parent_name, _, attr = name.rpartition(".")
    parent = model
    for piece in parent_name.split("."):
        parent = parent[int(piece)] if isinstance(parent, (nn.CellList, nn.SequentialCell)) \
            else getattr(parent, piece)
    setattr(parent, attr, new)


def wrong_replace_setattr(model, name, new):
    """The seed's one-liner: a dotted name is not an attribute name."""
    setattr(model, name, new)
