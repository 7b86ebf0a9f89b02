"""Helpers for checking a learner's ``nn.Cell`` against a reference Cell (chapters 06–09):
same parameter names and shapes, weights copied by name, outputs and gradients compared."""
from __future__ import annotations

import numpy as np

from .common import Mismatch, compare, hidden_rng, observe


def param_shapes(cell) -> dict:
    return {name: tuple(p.shape) for name, p in cell.parameters_and_names()}


def same_parameters(got, want, what: str = "参数") -> None:
    """Raise Mismatch unless ``got`` has exactly the parameter names/shapes of ``want``."""
    g, w = param_shapes(got), param_shapes(want)
    observe(f"{what}名和形状", g, w)
    missing = [n for n in w if n not in g]
    extra = [n for n in g if n not in w]
    if missing or extra:
        raise Mismatch(f"{what}名字不一致：缺少 {missing[:4]}，多出 {extra[:4]}。"
                       "参数名要和参考实现（也就是 Hugging Face 检查点的键）完全一样，"
                       "子 Cell 的属性名决定了参数名。")
    for n, shape in w.items():
        if g[n] != shape:
            raise Mismatch(f"参数 {n} 的形状是 {g[n]}，应为 {shape}。")


def randomize(cell, seed: int = 0, scale: float = 0.5) -> None:
    """Give every parameter random values (norm weights != 1, LoRA B != 0): a check with
    default initial values cannot see a missing weight or a skipped branch. The values are
    hidden (``hidden_rng``): new ones in every grading session."""
    from mindspore import Tensor
    rng = hidden_rng(seed)
    for _, p in cell.parameters_and_names():
        values = rng.standard_normal(p.shape) * scale
        if len(p.shape) == 1:
            values = 1.0 + values                  # norm weights near 1, biases non-zero
        else:
            values = values / np.sqrt(p.shape[-1])
        p.set_data(Tensor(values.astype(np.float32)))


def copy_weights(src, dst) -> None:
    """Copy every parameter of ``src`` into the parameter of ``dst`` with the same name."""
    target = dict(dst.parameters_and_names())
    for name, p in src.parameters_and_names():
        target[name].set_data(p.data.copy())


def output_and_grads(cell, inputs, params=None, seed: int = 1):
    """(output, gradient w.r.t. the first input, gradients w.r.t. ``params``) of
    ``sum(cell(*inputs) * probe)`` for a fixed random probe."""
    import mindspore as ms
    from mindspore import Tensor

    out = cell(*inputs)
    probe = Tensor(hidden_rng(seed).standard_normal(out.shape).astype(np.float32))

    def loss(*args):
        return (cell(*args).astype(ms.float32) * probe).sum()

    params = list(cell.trainable_params()) if params is None else params
    _, (g_in, g_params) = ms.value_and_grad(loss, grad_position=0, weights=params)(*inputs)
    return out, g_in, g_params


def compare_grads(got_cell, want_cell, inputs, *, atol=1e-4, rtol=1e-3, bug: str = "") -> None:
    """Gradients of the input and of every trainable parameter (matched by name) agree."""
    want_params = [p for _, p in want_cell.parameters_and_names() if p.requires_grad]
    names = [n for n, p in want_cell.parameters_and_names() if p.requires_grad]
    mine = dict(got_cell.parameters_and_names())
    got_params = [mine[n] for n in names]
    _, gi_w, gp_w = output_and_grads(want_cell, inputs, want_params)
    _, gi_g, gp_g = output_and_grads(got_cell, inputs, got_params)
    compare(gi_g, gi_w, "对输入的梯度", atol=atol, rtol=rtol, bug=bug)
    for n, g, w in zip(names, gp_g, gp_w):
        compare(g, w, f"参数 {n} 的梯度", atol=atol, rtol=rtol, bug=bug)
