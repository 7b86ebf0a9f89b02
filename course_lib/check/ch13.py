"""Checkers for notebook 13 (PyTorch -> MindSpore migration).

Expected values are computed from the installed frameworks (real PyTorch on CPU is the
independent reference), never typed in. torch is imported inside the functions only: this
module may be imported in notebook 11's mindnlp kernel, where ``torch`` is mindtorch."""
from __future__ import annotations

import math

import numpy as np

from ..solutions import ch13 as sol
from .common import (Mismatch, _to_numpy, check_number, compare, exercise, hidden_rng, observe,
                     recognised, run_code_check)

BLOCK_SIZES = ((8, 20), (6, 6))                 # (hidden, inner): one square inner layer


def torch_block():
    """The PyTorch module the learner translates (returns the class)."""
    import torch

    class FeedForwardBlock(torch.nn.Module):
        """Pre-LN residual feed-forward block (the MLP half of a transformer block), with the
        settings a translation must carry over: LayerNorm with eps=1e-6, the tanh
        approximation of GELU, an output projection without bias."""

        def __init__(self, hidden: int, inner: int):
            super().__init__()
            self.norm = torch.nn.LayerNorm(hidden, eps=1e-6)
            self.fc1 = torch.nn.Linear(hidden, inner)
            self.act = torch.nn.GELU(approximate="tanh")
            self.fc2 = torch.nn.Linear(inner, hidden, bias=False)

        def forward(self, x):
            return x + self.fc2(self.act(self.fc1(self.norm(x))))
    return FeedForwardBlock


TORCH_TYPES = {"norm": "LayerNorm", "fc1": "Linear", "fc2": "Linear"}


def _torch_state(module) -> dict:
    return {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}


def _load(cell, ms_state: dict) -> None:
    """Copy weights into the learner's Cell by MindSpore name; names/shapes must match."""
    import mindspore as ms
    params = dict(cell.parameters_and_names())
    alt = {k.replace(".gamma", ".weight").replace(".beta", ".bias"): v for k, v in ms_state.items()}
    want = ms_state if set(params) != set(alt) else alt           # accept mint.nn.LayerNorm names
    missing, extra = sorted(set(want) - set(params)), sorted(set(params) - set(want))
    observe("缺少的参数", missing, [])
    observe("多出的参数", extra, [])
    if set(params) != set(want):
        diff = "；".join(part for part in (f"缺少 {missing}" if missing else "",
                                           f"多出 {extra}" if extra else "") if part)
        raise Mismatch(f"参数名与 PyTorch 模块的 state_dict（按第 1 节对照表换成 MindSpore 的名字）不一致："
                       f"{diff}。对照上面 PyTorch 模块里每个子模块的属性名和构造参数。")
    for name, value in want.items():
        observe(f"参数 {name} 的形状", list(params[name].shape), list(value.shape))
        if tuple(params[name].shape) != value.shape:
            raise Mismatch(f"参数 {name} 的形状是 {tuple(params[name].shape)}，应为 {value.shape}："
                           "对照 PyTorch 模块里这一层的输入、输出宽度（第 1 节对照表 Linear -> Dense 一行）。")
        params[name].set_data(ms.Tensor(value))


def _torch_variants(tb, x):
    """Outputs of the torch block with the classic translation slips (for the diagnosis):
    each is what a translation with that slip computes, so a match names the slip."""
    import torch
    import torch.nn.functional as F
    with torch.no_grad():
        t = torch.tensor(x)
        for eps in (1e-7, 1e-5):          # MindSpore's default epsilon; the mapping table's row
            h = F.layer_norm(t, tb.norm.normalized_shape, tb.norm.weight, tb.norm.bias, eps=eps)
            yield (f"你的输出与把 LayerNorm 的 eps 换成 {eps:g} 后的 PyTorch 模块一致：这个模块的 LayerNorm "
                   "用的 eps 是多少，你的 nn.LayerNorm 的 epsilon 又是多少？（第 1 节对照表 LayerNorm 一行）"), \
                (t + tb.fc2(tb.act(tb.fc1(h)))).numpy()
        yield ("你的输出与把 GELU 换成精确的 erf 版本后的 PyTorch 模块一致：这个模块用的是哪一种 GELU？"
               "你的 GELU 在 MindSpore 里是哪一种（第 1 节对照表 GELU 一行：两个框架的默认值相反）？"), \
            (t + tb.fc2(F.gelu(tb.fc1(tb.norm(t))))).numpy()


def _block_case(cls, hidden, inner, rng):
    import mindspore as ms
    import torch
    torch.manual_seed(int(hidden_rng(130 + hidden).integers(2**31)))    # the hidden weights
    tb = torch_block()(hidden, inner).eval()
    with torch.no_grad():
        for p in tb.parameters():                   # non-trivial norm weights/biases
            p.add_(torch.randn_like(p) * 0.1)
        tb.fc1.weight.mul_(3.0)     # pre-activations spread to |x| ~ 2-3, where the two GELU forms differ most
    cell = cls(hidden, inner)
    _load(cell, sol.convert_state_dict(_torch_state(tb), TORCH_TYPES))
    for shape in ((1, 5, hidden), (3, 7, hidden)):
        # small activations (std 0.01, variance 1e-4): the LayerNorm epsilon is visible
        x = (rng.standard_normal(shape) * 0.01 + 0.1).astype(np.float32)
        got = _to_numpy(cell(ms.Tensor(x)))
        want = tb(torch.tensor(x)).detach().numpy()
        bug = next((b for b, v in _torch_variants(tb, x)
                    if got.shape == v.shape and np.allclose(got, v, atol=1e-5, rtol=1e-4)), "")
        compare(got, want, f"输入 {shape} 的输出", atol=1e-5, rtol=1e-4, bug=bug)
    return tb, cell, x


def _check_grads(tb, cell, x):
    import mindspore as ms
    import torch
    t = torch.tensor(x)
    tb.zero_grad()
    tb(t).pow(2).sum().backward()
    weights = cell.trainable_params()
    grads = ms.value_and_grad(lambda v: (cell(v) ** 2).sum(), None, weights)(ms.Tensor(x))[1]
    torch_grads = sol.convert_state_dict({k: p.grad.numpy() for k, p in tb.named_parameters()}, TORCH_TYPES)
    by_key = {}                       # by the torch-side name: the order parameters were registered in may differ
    for p, g in zip(weights, grads):
        key = p.name if p.name in torch_grads else p.name.replace(".weight", ".gamma").replace(".bias", ".beta")
        by_key[key] = (p.name, g)
    observe("有梯度的参数", sorted(by_key), sorted(torch_grads))
    for key in sorted(by_key):
        name, g = by_key[key]
        compare(g, torch_grads[key], f"参数 {name} 的梯度", atol=1e-4, rtol=1e-3,
                bug="前向一致但梯度不同：是否用了 stop_gradient，或在 construct 里改了参数？")


@exercise("code", "把 PyTorch 的 FeedForwardBlock 翻译成 nn.Cell：拷贝同一份权重后输出与梯度都与 PyTorch 相同",
          solution=lambda: sol.FeedForwardBlock,
          wrong=((lambda: sol.wrong_default_eps, "epsilon"), (lambda: sol.wrong_table_eps, "eps 换成 1e-05"),
                 (lambda: sol.wrong_exact_gelu, "GELU"), (lambda: sol.wrong_fc2_bias, "fc2.bias")),
          targets=("course_lib.solutions.ch13.FeedForwardBlock",),
          # shown before the exercise on purpose: the mapping table's constructors (section 1:
          # Linear(in, out) -> Dense(in, out), LayerNorm with a tuple shape, GELU's flag) applied to
          # the sizes of the printed torch module, and the Cell boilerplate the scaffold shows too.
          # The values this module needs (eps 1e-6, the tanh GELU, no fc2 bias) are the exercise.
          taught=("nn.LayerNorm((", "nn.GELU(approximate=", "nn.Dense(hidden, inner)", "super().__init__()"),
          question="在第 1 节“把一个 PyTorch 模块翻译成 `nn.Cell`”的脚手架里写 `MyFeedForwardBlock(hidden, inner)` "
                   "的 `__init__`：把那里打印的 PyTorch 模块（pre-LN 残差前馈块）的四个子模块 `norm`、`fc1`、`act`、`fc2` "
                   "翻译成 MindSpore 的层，属性名不变、每个构造参数都要对应（`construct` 已经写好）。检查器把 PyTorch "
                   "模块的**同一份权重**拷进你的 Cell（参数名按第 1 节对照表换成 MindSpore 的名字），在 float32、"
                   "数值较小（标准差 0.01，这样 LayerNorm 的 eps 会影响结果）的输入上比较输出（绝对误差 1e-5、相对误差 1e-4 以内）和梯度。")
def translate_block(cls) -> bool:
    """``cls(hidden, inner)``: a Cell with attributes norm, fc1, act, fc2, run next to real PyTorch."""
    def body():
        rng = hidden_rng(13)
        for hidden, inner in BLOCK_SIZES:
            tb, cell, x = _block_case(cls, hidden, inner, rng)
        _check_grads(tb, cell, x)
    return run_code_check("ch13.translate_block", "对照第 1 节的对照表，逐个子模块核对 MindSpore 层的名字和构造参数"
                          "（同名的参数，两个框架的默认值不一定相同）。", body)


def _gpt_like_state(rng):
    """A TinyGPT-shaped torch state dict (as arrays) and its module types."""
    h, v = 6, 11
    types = {"tok": "Embedding", "pos": "Embedding", "blocks.0.ln1": "LayerNorm",
             "blocks.0.attn.qkv": "Linear", "blocks.0.attn.proj": "Linear", "blocks.0.fc": "Linear",
             "ln_f": "LayerNorm", "head": "Linear"}
    shapes = {"tok.weight": (v, h), "pos.weight": (9, h), "blocks.0.ln1.weight": (h,),
              "blocks.0.ln1.bias": (h,), "blocks.0.attn.qkv.weight": (3 * h, h),
              "blocks.0.attn.qkv.bias": (3 * h,), "blocks.0.attn.proj.weight": (h, h),
              "blocks.0.attn.proj.bias": (h,), "blocks.0.fc.weight": (4 * h, h), "blocks.0.fc.bias": (4 * h,),
              "ln_f.weight": (h,), "ln_f.bias": (h,), "head.weight": (v, h)}
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}, types


@exercise("code", "写 convert_state_dict：PyTorch state_dict 的键名/数组 → MindSpore 参数名/数组",
          solution=lambda: sol.convert_state_dict,
          wrong=((lambda: sol.wrong_rename_all, "Linear"), (lambda: sol.wrong_transpose_linear, "转置"),
                 (lambda: sol.wrong_forgets_embedding, "embedding_table"),
                 (lambda: sol.wrong_float64_arrays, "dtype 却是 float64")),
          targets=("course_lib.migration.mapping.torch_state_to_mindspore",
                   "course_lib.migration.mapping.builtin_param_name"),
          question="在第 2 节“state_dict 的键名 → MindSpore 的参数名”的脚手架里写 `my_convert_state_dict(state, module_types)`："
                   "`state` 是 PyTorch 的 state_dict（键名 → NumPy 数组），"
                   "`module_types` 告诉你每个模块路径是哪种 torch 模块（`\"Linear\"`、`\"LayerNorm\"` 或 "
                   "`\"Embedding\"`）；返回 MindSpore 参数名 → float32 数组（检查器逐个键比较名字和数值，"
                   "不能多也不能少）。哪些内置层在 MindSpore 里改了参数名？权重的布局要不要变？"
                   "不要调用 `mapping.torch_state_to_mindspore` 或 `mapping.builtin_param_name`：成绩册把用它们得到的答案记为“借用”。")
def convert_state_dict(func) -> bool:
    """``func(state, module_types)`` -> {MindSpore name: array}, compared key by key."""
    def body():
        state, types = _gpt_like_state(hidden_rng(31))
        got = func({k: v.copy() for k, v in state.items()}, dict(types))
        want = sol.convert_state_dict(state, types)
        observe("返回值是 dict", isinstance(got, dict), True)
        if not isinstance(got, dict):
            raise Mismatch(f"应返回 dict（MindSpore 参数名 → 数组），得到 {type(got).__name__}。")
        observe("缺少的参数名", [k for k in want if k not in got], [])
        for key in want:
            if key not in got:
                owner = key.rpartition(".")[0]
                wrong = sorted(k for k in got if k.rpartition(".")[0] == owner)
                kind = types.get(owner, "?")
                raise Mismatch(f"缺少 {key}（{owner} 是 {kind}，你给出的这个模块的参数是 {wrong}）："
                               f"对照第 1 节对照表里 {kind} 那一行，MindSpore 的层把这个参数叫什么？")
        extra = sorted(set(got) - set(want))
        observe("多出的参数名", [str(k) for k in extra], [])
        if extra:
            raise Mismatch(f"多出了 {extra}：每个 torch 张量只对应一个 MindSpore 参数。")
        for key, value in want.items():
            g = _to_numpy(got[key])
            bug = ("你的数组是应有数组的转置：对照第 1 节对照表 Linear -> Dense 一行，两边权重的布局一样吗？"
                   "（方阵层转置后形状照样对得上，所以要比数值。）"
                   if g.shape == value.T.shape and np.array_equal(g, value.T) else "")
            compare(g, value, f"参数 {key}", atol=0, rtol=0, bug=bug)
            observe(f"参数 {key} 的 dtype", str(g.dtype), "float32")
            if g.dtype != np.float32:
                raise Mismatch(f"参数 {key} 的数值对了，dtype 却是 {g.dtype}：题目要 float32 数组"
                               "（MindSpore 的参数是 float32，别的 dtype 会让文件变大、加载时类型不符）。")
    return run_code_check("ch13.convert_state_dict", "对照第 2 节练习的说明核对输入和返回值（返回 dict："
                          "MindSpore 参数名 → float32 数组），以及第 1 节对照表里各层的参数名和权重形状。", body)


# --------------------------------------------------------------------------- numbers
def _layernorm_ratio(variance: float = 1e-5) -> float:
    """Output of MindSpore's nn.LayerNorm with its default epsilon divided by torch's
    nn.LayerNorm with its default eps, for a zero-mean row of the given variance."""
    import inspect
    from mindspore import nn
    ms_eps = inspect.signature(nn.LayerNorm.__init__).parameters["epsilon"].default
    torch_eps = 1e-5             # torch.nn.LayerNorm(eps=1e-05); tests read it from torch itself
    return math.sqrt((variance + torch_eps) / (variance + ms_eps))


@exercise("number", "方差 1e-5 的一行：默认 epsilon 的 MindSpore LayerNorm / PyTorch LayerNorm 的输出之比",
          solution=_layernorm_ratio,
          question="一行均值为 0、方差为 1e-5 的隐藏状态，分别经过 `torch.nn.LayerNorm(h)`（默认 eps）"
                   "和照抄构造函数的 `nn.LayerNorm((h,))`（MindSpore 默认 epsilon）。"
                   "MindSpore 的输出是 PyTorch 的多少倍（两者的 weight / gamma 都是 1、bias / beta 都是 0）？"
                   "答案精确到 ±5e-4。（先从两个框架的函数签名读出默认值，再推导。）")
def ex1(answer) -> bool:
    """A zero-mean row with variance 1e-5 goes through torch.nn.LayerNorm(h) (default eps) and
    through a translation that copied the call, nn.LayerNorm((h,)) (MindSpore's default
    epsilon). By what factor is the MindSpore output larger?"""
    return check_number(answer, _layernorm_ratio(), name="ch13.ex1", rel=0.0, abs_=5e-4,
                        hint="回到第 1 节对照表 LayerNorm 一行：两个框架的默认 eps 各是多少？"
                             "LayerNorm 的输出里 eps 出现在哪里？方差只有 1e-5 时，它还能忽略吗？")


EX2_MODULES = {"tok": "Embedding", "blocks.0.ln1": "LayerNorm", "blocks.0.fc": "Linear",
               "ln_f": "LayerNorm", "head": "Linear"}
EX2_KEYS = ("tok.weight", "blocks.0.ln1.weight", "blocks.0.ln1.bias", "blocks.0.fc.weight",
            "blocks.0.fc.bias", "ln_f.weight", "ln_f.bias", "head.weight")


def _ex2_answer() -> int:
    """How many of EX2_KEYS change their name in MindSpore (mindspore.nn layers)."""
    state = {k: np.zeros(1, np.float32) for k in EX2_KEYS}
    return sum(k not in sol.convert_state_dict(state, EX2_MODULES) for k in EX2_KEYS)


def _ex2_question() -> str:
    keys = "、".join(f"`{k}`" for k in EX2_KEYS)
    kinds = "；".join(f"`{m}` 是 `torch.nn.{t}`" for m, t in EX2_MODULES.items())
    return (f"一个 PyTorch 模型的 state_dict 有 {len(EX2_KEYS)} 个键：{keys}（{kinds}）。"
            "把它换成用 `mindspore.nn` 的对应层（`nn.Embedding`、`nn.LayerNorm`、`nn.Dense`）搭的同一个模型，"
            "其中有几个键的名字要改？答案是一个整数。把这条规则写成代码，就是第 2 节的练习 `convert_state_dict`。")


@exercise("number", "一个小 state_dict 换成 mindspore.nn 的层：几个键要改名", solution=_ex2_answer,
          question=_ex2_question())
def ex2(answer) -> bool:
    """How many keys of the state_dict EX2_KEYS change their name with mindspore.nn layers."""
    return check_number(answer, _ex2_answer(), name="ch13.ex2", integer=True,
                        hint="逐个键对照第 1 节的对照表：哪几种内置层在 MindSpore 里换了参数名，"
                             "每种换了几个？Linear → Dense 一行的参数名变不变？")


def adamw_first_step(p0: float = 1.0, grad: float = 0.5, lr: float = 1e-3,
                     betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.01) -> float:
    """The parameter after one step of MindSpore's torch-equivalent AdamW (the row of the
    mapping table verified against torch.optim.AdamW)."""
    from mindspore import Parameter, Tensor
    from mindspore.experimental.optim import AdamW
    p = Parameter(Tensor(np.array([p0], np.float32)), name="p")
    AdamW([p], lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)((Tensor(np.array([grad], np.float32)),))
    return float(p.asnumpy()[0])


@exercise("number", "p0=1、g=0.5 时 torch AdamW 一步之后的 p", solution=adamw_first_step,
          question="参数 `p0 = 1.0`、梯度 `g = 0.5`，"
                   "用 `torch.optim.AdamW(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)` 更新**一步**后 `p` 是多少？"
                   "答案精确到 ±1e-6。按 `torch.optim.AdamW` 文档里写的算法手算（本课程环境里 "
                   "`torch/optim/adamw.py` 第 61 行起的算法框；它与 AdamW 论文的算法 2 "
                   "在权重衰减乘的系数上不同，以 PyTorch 的为准）。不要在答题单元里让优化器替你算"
                   "（`torch.optim.AdamW`、MindSpore 的 AdamW 类）：成绩册把这样得到的答案记为“借用”。",
          targets=("torch.optim.AdamW", "torch.optim.adamw", "torch.optim.Adam", "torch.optim.adam",
                   "mindspore.nn.AdamWeightDecay", "mindspore.mint.optim.AdamW",
                   "mindspore.experimental.optim.AdamW"))
def ex3(answer) -> bool:
    """Value of p after ONE torch.optim.AdamW step: p0=1.0, grad=0.5, lr=1e-3,
    betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01."""
    paper = 1.0 - (1e-3 + 0.01 * 1.0)       # decay not scaled by lr (a schedule factor of 1)
    hint = recognised(answer, [("权重衰减这一项的系数不对：PyTorch 的算法框里它乘的是什么"
                                "（与论文的算法 2 不同）？", paper)],
                      "回到第 1 节“AdamW 的第一步为什么差这么多”：偏差修正之后第一步的 m̂、v̂ 是什么？"
                      "再看对照表 AdamW 一行的“注意”：PyTorch 的 AdamW 怎样做权重衰减？", abs_=1e-6)
    return check_number(answer, adamw_first_step(), name="ch13.ex3", rel=0, abs_=1e-6, hint=hint)
