"""Checkers for notebook 08 (InternLM + LoRA).

Code exercises compare the learner's code with the library's own ``course_lib.lora``
(``LoRADense``, ``inject_lora``) on hidden random weights and inputs."""
from __future__ import annotations

import numpy as np

from .common import Mismatch, check_number, compare, exercise, hidden_rng, observe, run_code_check


def _solutions():
    from ..solutions import ch08
    return ch08


# ====================================================================== code exercises
@exercise("code", "写 LoRADense.construct：y = W x + b + B(A x)·alpha/r",
          solution=lambda: _solutions().MyLoRADense,
          wrong=((lambda: _solutions().wrong_lora_no_scaling, "alpha / r"),
                 (lambda: _solutions().wrong_lora_alpha_only, "乘的是 alpha"),
                 (lambda: _solutions().wrong_lora_no_base, "基座")),
          targets=("course_lib.lora.LoRADense.construct",),
          question="在第 4 节“LoRA 从零开始”的脚手架里写 `MyLoRADense`（继承 `lora.LoRADense`）"
                   "的 `construct(x)`："
                   "基座 `nn.Dense` 的输出 $Wx + b$ 加上旁路 $\\frac{\\alpha}{r} B A x$（缩放系数是 `self.scaling`）。")
def lora_forward(cls) -> bool:
    """``cls(base_dense, r, alpha)`` computes what ``lora.LoRADense`` computes, with the same
    parameters, outputs and gradients (random A and non-zero B: a zero B hides every bug)."""
    def body():
        from mindspore import Tensor, nn
        from ..lora import LoRADense
        from .cellcheck import compare_grads, copy_weights, randomize, same_parameters

        rng = hidden_rng(31)
        for n_in, n_out, r, alpha in ((12, 10, 3, 6.0), (8, 16, 4, 4.0)):
            base = nn.Dense(n_in, n_out)
            base_copy = nn.Dense(n_in, n_out)
            randomize(base, seed=n_in)
            copy_weights(base, base_copy)
            ref, mine = LoRADense(base, r, alpha), cls(base_copy, r, alpha)
            same_parameters(mine, ref)
            randomize(ref, seed=r)                   # random W, b, A and non-zero B
            copy_weights(ref, mine)
            for shape in ((2, 5, n_in), (1, n_in), (3, 1, n_in)):
                x = Tensor(rng.standard_normal(shape).astype(np.float32))
                _diagnose_lora(ref, mine(x), ref(x), x, f"r={r}、alpha={alpha:g}、输入 {shape}")
            compare_grads(mine, ref, [Tensor(rng.standard_normal((2, 3, n_in)).astype(np.float32))],
                          bug="输出对了但 lora_A/lora_B 的梯度不对：是不是用 asnumpy() 或 "
                              "stop_gradient 截断了旁路？")
            trainable = sorted(p.name.rpartition(".")[2] for p in mine.trainable_params())
            observe(f"r={r}、alpha={alpha:g}：可训练的参数", trainable, ["lora_A", "lora_B"])
            if trainable != ["lora_A", "lora_B"]:
                raise Mismatch(f"可训练的参数是 {trainable}，应只有 ['lora_A', 'lora_B']：基座的 "
                               "weight/bias 要冻结。")
    return run_code_check("ch08.lora_forward", "基座输出 nn.Dense.construct(self, x)（W x + b），"
                          "加上 ops.dense(ops.dense(x, lora_A), lora_B) * self.scaling（scaling = alpha / r）。",
                          body)


def _diagnose_lora(ref, got, want, x, what) -> None:
    from mindspore import ops
    from mindspore.nn import Dense
    g, w = got.asnumpy(), want.asnumpy()
    observe(f"{what}的输出", g, w, atol=1e-4, rtol=1e-4)
    if g.shape == w.shape and np.allclose(g, w, atol=1e-4, rtol=1e-4):
        return
    base = Dense.construct(ref, x).asnumpy()
    detour = ops.dense(ops.dense(x, ref.lora_A), ref.lora_B).asnumpy()
    probes = {
        "缺了缩放 alpha / r：旁路的输出要乘 self.scaling。": base + detour,
        "乘的是 alpha，应为 alpha / r（self.scaling）。": base + detour * ref.alpha,
        "缩放倒过来了：是 alpha / r，不是 r / alpha。": base + detour * ref.r / ref.alpha,
        "只有旁路、丢了基座：先算冻结的基座层 W x + b（nn.Dense.construct(self, x)），再加旁路。":
            detour * ref.scaling,
        "旁路加了两次：在 LoRADense 的子类里 super().construct(x) 是库里已经带旁路的版本，"
        "基座要用 nn.Dense.construct(self, x)。": base + 2 * detour * ref.scaling,
        "旁路没有加上去（B = 0 时看不出来，检查时 B 是随机的）。": base,
    }
    if g.shape != w.shape:
        raise Mismatch(f"{what}：输出形状 {g.shape}，应为 {w.shape}。A 的形状是 (r, in)、B 是 (out, r)："
                       "ops.dense(x, A) 得到 (..., r)，再 ops.dense(·, B) 得到 (..., out)。")
    for bug, value in probes.items():
        if np.allclose(g, value, atol=1e-4, rtol=1e-4):
            compare(g, w, f"{what}的输出", atol=1e-4, rtol=1e-4, bug=bug)
    compare(g, w, f"{what}的输出", atol=1e-4, rtol=1e-4,
            bug="y = W x + b + (B A x) · alpha / r，逐项检查。")


@exercise("code", "写 replace_layer(model, name, new)：按带点的名字替换子 Cell（seed 的 setattr 错在哪）",
          solution=lambda: _solutions().replace_layer,
          wrong=((lambda: _solutions().wrong_replace_setattr, "带点的名字"),
                 (lambda: _solutions().wrong_replace_on_root, "根 Cell"),
                 (lambda: _solutions().wrong_replace_keeps_short_names, "参数名")),
          targets=("course_lib.lora._set_child",),
          question="在第 5 节“练习 2（写代码）：按带点的名字替换一层”的脚手架里写 `my_replace_layer(model, name, new)`："
                   "把带点的完整名字（如 `model.layers.0.self_attn.q_proj`）"
                   "所指的层换成 `new`——一行 `setattr` 行不通：这一层挂在它的**父 Cell** 上，"
                   "中间的 `nn.CellList` 要用下标取；挂上去之后参数名也不能和别的层重名。"
                   "检查函数与 `inject_lora` 的结果比较 Cell 树、参数名和输出。")
def replace_layer(func) -> bool:
    """After ``func(model, name, LoRADense(old, ...))`` the model must equal one adapted by
    ``lora.inject_lora`` on that layer: same Cell tree, same (full, unique) parameter names,
    same output."""
    def body():
        for name in ("model.layers.1.self_attn.v_proj", "model.layers.0.mlp.down_proj"):
            _check_replacement(func, name)
    return run_code_check("ch08.replace_layer", "按 '.' 切开名字，从 model 一段一段走到父 Cell（CellList 用下标），"
                          "在父 Cell 上 setattr(最后一段, new)，再把 new 的参数改回完整名字。", body)


def _check_replacement(func, name) -> None:
    import mindspore as ms
    from mindspore import Tensor
    from ..internlm import InternLMForCausalLM, tiny
    from ..lora import LoRADense, inject_lora, lora_layers
    from .cellcheck import copy_weights

    cfg = tiny(vocab_size=40, hidden_size=16, num_heads=2, intermediate_size=24, num_layers=2,
               max_seq_len=16)
    ms.set_seed(0)
    ref, mine = InternLMForCausalLM(cfg), InternLMForCausalLM(cfg)
    copy_weights(ref, mine)
    inject_lora(ref, [name], r=2, alpha=4)
    rng = hidden_rng(4)
    for p in (lora_layers(ref)[name].lora_A, lora_layers(ref)[name].lora_B):
        p.set_data(Tensor(rng.standard_normal(p.shape).astype(np.float32) * 0.5))
    old = dict(mine.cells_and_names())[name]
    new = LoRADense(old, 2, 4, name=name)
    new.lora_A.set_data(lora_layers(ref)[name].lora_A.data.copy())
    new.lora_B.set_data(lora_layers(ref)[name].lora_B.data.copy())
    ref_cells = sorted(dict(ref.cells_and_names()))
    try:
        func(mine, name, new)
    except Exception as err:                          # noqa: BLE001 - observed, then reported
        observe(f"{name}：替换后模型的子 Cell", None, ref_cells)
        if isinstance(err, KeyError) and "." in str(err) and "can not contain" in str(err):
            raise Mismatch(f"setattr(model, {name!r}, new) 报 KeyError：带点的名字不是一个属性名，"
                           "MindSpore 的子 Cell 名不能含 '.'。这一层挂在它的父 Cell（…self_attn）上："
                           "按 '.' 切开，一段一段 getattr 走到父 Cell 再 setattr。") from None
        raise
    cells = dict(mine.cells_and_names())
    observe(f"{name}：替换后模型的子 Cell", sorted(cells), ref_cells)
    observe(f"{name}：该位置是传进去的新层", cells.get(name) is new, True)
    extra = sorted(set(cells) - set(ref_cells))
    if extra:
        raise Mismatch(f"模型里多出了子 Cell {extra[:3]}：新层挂到了根 Cell 上（或别的地方），"
                       f"{name!r} 处仍是原来的层。要在它的父 Cell 上替换。")
    if cells.get(name) is not new:
        raise Mismatch(f"{name!r} 处不是你传进去的新层（是 {type(cells.get(name)).__name__}）。")
    names = [p.name for p in mine.get_parameters()]
    want = sorted(p.name for p in ref.get_parameters())
    observe(f"{name}：替换后模型的参数名", sorted(names), want)
    if sorted(names) != want:
        short = sorted(set(names) - set(want))
        raise Mismatch(f"参数名不对：出现了 {short[:3]}，应为 {name}.weight、{name}.lora_A 这样的完整名字。"
                       "在父 Cell 上 setattr 时 MindSpore 按父 Cell 重新给参数命名；"
                       "不同层的参数会重名，优化器和检查点都靠名字区分参数——把它们改回完整名字。")
    ids = Tensor(hidden_rng(2).integers(0, cfg.vocab_size, (2, 6)).astype(np.int32))
    compare(mine(ids), ref(ids), "替换后模型的 logits", atol=1e-5)


# ====================================================================== number exercises
def _lora_params(config, r: int, projections: int) -> int:
    """r·(in + out) per adapted square projection, ``projections`` of them per layer."""
    h = config.hidden_size
    return config.num_layers * projections * r * (h + h)


def _ex1() -> int:
    from ..internlm import tiny
    c = tiny()
    h, f = c.hidden_size, c.intermediate_size
    per_layer = 4 * (h + h) + 2 * (h + f) + (f + h)       # q, k, v, o; gate, up; down
    return c.num_layers * 3 * per_layer                   # r=3: a rank the chapter's sweep skips


@exercise("number", "InternLM-tiny 上 r=3 的 LoRA 适配每层全部 7 个线性层，新增多少可训练参数", solution=_ex1,
          question="LoRA（r=3）适配 InternLM-tiny 每层**全部 7 个**线性层（`q_proj`、`k_proj`、`v_proj`、"
                   "`o_proj`、`gate_proj`、`up_proj`、`down_proj`），一共新增多少可训练参数？"
                   "（第 8 节的扫描没有 r=3 这一行：用它打印的几个 r 核对你的公式。）")
def ex1(answer) -> bool:
    """How many trainable parameters does LoRA r=3 on all seven linear layers of every block
    (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj) add to InternLM-tiny?"""
    return check_number(answer, _ex1(), name="ch08.ex1", integer=True, rel=0,
                        hint="每个被适配的 Dense(in, out) 增加 r·(in + out) 个参数（这里 r=3）；注意力的 4 个投影是 "
                             "hidden→hidden，gate/up 是 hidden→FFN，down 是 FFN→hidden；再乘层数。")


def _ex2() -> float:
    from ..internlm import internlm_7b
    cfg = internlm_7b()
    return 100 * _lora_params(cfg, r=16, projections=4) / cfg.num_parameters()


@exercise("number", "InternLM-7B 上 r=16 适配 q/k/v/o 四个投影：可训练参数占基座的百分之几", solution=_ex2,
          question="InternLM-7B 预设上，r=16 适配 `q_proj`、`k_proj`、`v_proj`、`o_proj` 时，"
                   "可训练参数占基座参数的百分之几？（保留 3 位有效数字，例如 0.123 表示 0.123%）")
def ex2(answer) -> bool:
    """Trainable fraction, in percent, of LoRA r=16 on q_proj, k_proj, v_proj and o_proj at the
    InternLM-7B preset's shapes (adapter parameters / base parameters × 100)."""
    return check_number(answer, _ex2(), name="ch08.ex2", rel=3e-3,
                        hint="分子：层数 × 4 个投影 × r × (in + out)，in = out = hidden；"
                             "分母：基座参数量（第 1 节打印过 7B 预设的参数量）。别忘了乘 100。")


def _ex3() -> int:
    from ..tokenizer import load_tokenizer
    return len(load_tokenizer().encode("负面")) + 1          # answer tokens + <|end|>


@exercise("number", "一条负面评论的 SFT 样本里有多少个标签位置不是 IGNORE_INDEX", solution=_ex3,
          question="一条负面评论的 SFT 样本里，有多少个标签位置**不是** `IGNORE_INDEX`？")
def ex3(answer) -> bool:
    """How many label positions are NOT IGNORE_INDEX in the SFT example of a negative
    review (answer 负面) — i.e. how many tokens does the loss learn per example?"""
    return check_number(answer, _ex3(), name="ch08.ex3", integer=True, rel=0,
                        hint="提示词的标签都是 -100；只剩回答的 token 和结尾的 <|end|>。"
                             "回答“负面”被分词器切成几个 token？（tok.encode 试一试）")


def _ex4() -> float:
    from ..internlm import internlm_7b
    from ..memory import GiB, training_state_bytes
    cfg = internlm_7b()
    lora = _lora_params(cfg, r=64, projections=4)
    return training_state_bytes(trainable=lora, frozen=cfg.num_parameters()).total / GiB


@exercise("number", "InternLM-7B 的 LoRA（r=64，q/k/v/o）训练状态共多少 GiB（混合精度，不含激活）",
          solution=_ex4,
          question="InternLM-7B 预设上 LoRA（r=64，适配 `q_proj`、`k_proj`、`v_proj`、`o_proj`）"
                   "的训练状态共多少 GiB（混合精度，不含激活）？用 `memory.training_state_bytes` 算；"
                   "第 9 节的表（r=8、q/v）可以用来核对你的公式。")
def ex4(answer) -> bool:
    """Training state of LoRA (r=64 on q_proj, k_proj, v_proj, o_proj) for the InternLM-7B
    preset, mixed precision, in GiB (weights + gradients + master weights + AdamW states; no
    activations)."""
    return check_number(answer, _ex4(), name="ch08.ex4", rel=0.01,
                        hint="冻结的基座只有 16 位权重（每参数 2 字节）；可训练的适配器参数每个 16 字节"
                             "（16 位权重 2 + 梯度 2 + float32 主权重 4 + Adam m、v 各 4）。除以 2**30。"
                             "第 9 节的表（r=8、q/v）可以用来核对你的公式。")
