"""Reference solutions for chapter 13 (PyTorch -> MindSpore migration)."""
from __future__ import annotations

import numpy as np
from mindspore import nn


class FeedForwardBlock(nn.Cell):
    """MindSpore translation of ``check.ch13.torch_block()``: x + fc2(act(fc1(norm(x)))).
    Same attribute names as the torch module, so checkpoint keys map one to one; every
    constructor argument of the torch module spelled out in MindSpore's terms (the
    defaults differ: LayerNorm epsilon 1e-7, GELU tanh, Dense with a bias)."""

    def __init__(self, hidden, inner):
        super().__init__()
        self.norm = nn.LayerNorm((hidden,), epsilon=1e-6)      # torch: LayerNorm(hidden, eps=1e-6)
        self.fc1 = nn.Dense(hidden, inner)                    # weight (out, in) as in torch
        self.act = nn.GELU(approximate=True)                  # torch: GELU(approximate="tanh")
        self.fc2 = nn.Dense(inner, hidden, has_bias=False)    # torch: Linear(..., bias=False)

    def construct(self, x):
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


def convert_state_dict(state: dict, module_types: dict) -> dict:
    """A torch ``state_dict`` ({name: array}) -> {MindSpore parameter name: float32 array}.
    ``module_types`` maps a module path ("blocks.0.ln1") to its torch class name. Only
    LayerNorm and Embedding rename their parameters; Linear -> Dense keeps name AND layout."""
    renames = {"LayerNorm": {"weight": "gamma", "bias": "beta"},
               "Embedding": {"weight": "embedding_table"}}
    out = {}
    for name, value in state.items():
        owner, _, suffix = name.rpartition(".")
        suffix = renames.get(module_types.get(owner, ""), {}).get(suffix, suffix)
        out[f"{owner}.{suffix}" if owner else suffix] = np.asarray(value, np.float32)
    return out


# ---- realistic wrong solutions ----------------------------------------------------------
class wrong_default_eps(FeedForwardBlock):  # noqa: N801
    """Copies the constructor call without eps: nn.LayerNorm((hidden,)), MindSpore's 1e-7."""

    def __init__(self, hidden, inner):
        super().__init__(hidden, inner)
        self.norm = nn.LayerNorm((hidden,))


class wrong_table_eps(FeedForwardBlock):  # noqa: N801
    """Copies the mapping table's row (epsilon=1e-5, torch's DEFAULT) instead of this module's eps."""

    def __init__(self, hidden, inner):
        super().__init__(hidden, inner)
        self.norm = nn.LayerNorm((hidden,), epsilon=1e-5)


class wrong_exact_gelu(FeedForwardBlock):  # noqa: N801
    """Copies the table's GELU row (exact erf) although this module asks for the tanh form."""

    def __init__(self, hidden, inner):
        super().__init__(hidden, inner)
        self.act = nn.GELU(approximate=False)


class wrong_fc2_bias(FeedForwardBlock):  # noqa: N801
    """nn.Dense(inner, hidden): a bias the torch module's fc2 does not have."""

    def __init__(self, hidden, inner):
        super().__init__(hidden, inner)
        self.fc2 = nn.Dense(inner, hidden)


def wrong_rename_all(state, module_types):
    """Renames every weight/bias to gamma/beta, Linear layers included."""
    names = {"weight": "gamma", "bias": "beta"}
    out = {}
    for name, value in state.items():
        owner, _, suffix = name.rpartition(".")
        if module_types.get(owner) == "Embedding":
            suffix = "embedding_table"
        out[f"{owner}.{names.get(suffix, suffix)}"] = np.asarray(value, np.float32)
    return out


def wrong_transpose_linear(state, module_types):
    """Transposes Linear weights ("Dense stores (in, out)" — it does not)."""
    out = convert_state_dict(state, module_types)
    for name in out:
        owner = name.rpartition(".")[0]
        if module_types.get(owner) == "Linear" and name.endswith(".weight"):
            out[name] = out[name].T.copy()
    return out


def wrong_float64_arrays(state, module_types):
    """Right names and values, but every array converted to float64."""
    return {k: np.asarray(v, np.float64) for k, v in convert_state_dict(state, module_types).items()}


def wrong_forgets_embedding(state, module_types):
    """Handles LayerNorm but keeps Embedding's ``weight``."""
    return convert_state_dict(state, {k: v for k, v in module_types.items() if v != "Embedding"})
