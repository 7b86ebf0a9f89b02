"""Checkers for notebook 13 (PyTorch -> MindSpore migration).

The expected values are computed from the installed frameworks, never typed in."""
from .common import close, verdict


def ex1(answer) -> bool:
    """MindSpore's default ``epsilon`` of ``nn.LayerNorm`` (a number)."""
    import inspect
    from mindspore import nn
    expected = inspect.signature(nn.LayerNorm.__init__).parameters["epsilon"].default
    return verdict(close(answer, expected, rel=1e-9), "看 nn.LayerNorm 的函数签名："
                   "inspect.signature(nn.LayerNorm.__init__)，或本章的对照表。", "ch13.ex1")


def ex2(answer) -> bool:
    """MindSpore name of the PyTorch parameter ``encoder.norm.weight`` of an ``nn.LayerNorm``."""
    from ..migration.mapping import builtin_param_name
    expected = "encoder.norm." + builtin_param_name("LayerNorm", "weight")
    ok = isinstance(answer, str) and answer.strip() == expected
    return verdict(ok, "LayerNorm 的 weight/bias 在 MindSpore 里叫什么？前缀保持不变。", "ch13.ex2")


def adamw_first_step(p0: float = 1.0, grad: float = 0.5, lr: float = 1e-3,
                     betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.01) -> float:
    """The parameter after one step of MindSpore's torch-equivalent AdamW (the row of the
    mapping table verified against torch.optim.AdamW)."""
    import numpy as np
    from mindspore import Parameter, Tensor
    from mindspore.experimental.optim import AdamW
    p = Parameter(Tensor(np.array([p0], np.float32)), name="p")
    AdamW([p], lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)((Tensor(np.array([grad], np.float32)),))
    return float(p.asnumpy()[0])


def ex3(answer) -> bool:
    """Value of p after ONE torch.optim.AdamW step: p0=1.0, grad=0.5, lr=1e-3,
    betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01."""
    ok = close(answer, adamw_first_step(), rel=0, abs_=1e-6)
    return verdict(ok, "第一步的偏差修正让 m̂ = g、v̂ = g²；先做解耦衰减 p·(1 - lr·wd)，"
                   "再减去 lr·m̂/(√v̂ + eps)。", "ch13.ex3")
