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
          wrong=((lambda: _solutions().wrong_lora_no_scaling, "没有缩放"),
                 (lambda: _solutions().wrong_lora_alpha_only, "用成了 alpha"),
                 (lambda: _solutions().wrong_lora_no_base, "基座"),
                 (lambda: _solutions().wrong_lora_super_twice, "加了两次")),
          targets=("course_lib.lora.LoRADense.construct",),
          question="在第 4 节“写代码：`LoRADense` 的前向”的脚手架里写 `MyLoRADense`（继承 `lora.LoRADense`）"
                   "的 `construct(x)`："
                   "基座 `nn.Dense` 的输出 $Wx + b$ 加上旁路 $\\frac{\\alpha}{r} B A x$。可用的属性："
                   "`self.weight`（形状 (out, in)）、`self.bias`、`self.lora_A`（(r, in)）、`self.lora_B`（(out, r)）、"
                   "`self.scaling`（$\\alpha / r$）；父类 `LoRADense` 自己的 `construct` 已经带着旁路。"
                   "`x` 的形状是 (..., in)，返回 (..., out)。检查器在两种层尺寸、几种输入形状上，"
                   "用隐藏的随机权重（$B \\neq 0$）比较输出（误差 1e-4 以内）和 `lora_A`、`lora_B` 的梯度，"
                   "并要求只有 `lora_A`、`lora_B` 可训练。")
def lora_forward(cls) -> bool:
    """``cls(base_dense, r, alpha)`` computes what ``lora.LoRADense`` computes, with the same
    parameters, outputs and gradients (random A and non-zero B: a zero B hides every bug)."""
    def body():
        from mindspore import Tensor, nn
        from ..lora import LoRADense
        from .cellcheck import compare_grads, copy_weights, randomize, same_parameters

        own = isinstance(cls, type) and getattr(cls, "construct", None) is not LoRADense.construct
        observe("类自己写了 construct（不是继承 LoRADense 的）", own, True)
        if not own:
            raise Mismatch("这个类没有自己的 construct：它用的是继承来的 LoRADense.construct，也就是库里的答案。"
                           "在类里写出 construct(self, x)。")
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
                          bug="输出对了但 lora_A/lora_B 的梯度不对：旁路在计算图里被截断了"
                              "（例如转成了 NumPy 再转回来）。")
            trainable = sorted(p.name.rpartition(".")[2] for p in mine.trainable_params())
            observe(f"r={r}、alpha={alpha:g}：可训练的参数", trainable, ["lora_A", "lora_B"])
            if trainable != ["lora_A", "lora_B"]:
                raise Mismatch(f"可训练的参数是 {trainable}，应只有 ['lora_A', 'lora_B']：基座的 "
                               "weight/bias 要冻结。")
    return run_code_check("ch08.lora_forward", "检查 construct 用到的属性名和形状：weight (out, in)、bias、"
                          "lora_A (r, in)、lora_B (out, r)、scaling（第 4 节“写代码：`LoRADense` 的前向”上面的说明）。",
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
        "你的输出等于没有缩放的 W x + b + B A x：回到第 4 节的公式，看旁路前面的系数。": base + detour,
        "旁路的系数用成了 alpha：第 4 节的缩放系数里还有 r。": base + detour * ref.alpha,
        "缩放倒过来了：你的旁路乘的是 r / alpha。": base + detour * ref.r / ref.alpha,
        "输出里只有旁路：冻结的基座那一项 W x + b 没有加上（第 4 节的公式有两项）。": detour * ref.scaling,
        "旁路加了两次：在 LoRADense 的子类里，super().construct(x) 是库里已经带着旁路的版本；"
        "基座那一项只能是冻结的 W x + b。": base + 2 * detour * ref.scaling,
        "旁路没有加上去（B = 0 时看不出来，检查时 B 是随机的）。": base,
    }
    if g.shape != w.shape:
        raise Mismatch(f"{what}：输出形状 {g.shape}，应为 {w.shape}。A 的形状是 (r, in)、B 是 (out, r)："
                       "旁路先从 in 维降到 r 维，再升到 out 维；看一看你的两次矩阵乘各用了哪一维"
                       "（nn.Dense 的权重按 (out, in) 存放）。")
    for bug, value in probes.items():
        if np.allclose(g, value, atol=1e-4, rtol=1e-4):
            compare(g, w, f"{what}的输出", atol=1e-4, rtol=1e-4, bug=bug)
    compare(g, w, f"{what}的输出", atol=1e-4, rtol=1e-4,
            bug="和第 4 节的公式逐项对照：基座、旁路、缩放各检查一遍。")


@exercise("code", "写 replace_layer(model, name, new)：按带点的名字替换子 Cell（seed 的 setattr 错在哪）",
          solution=lambda: _solutions().replace_layer,
          wrong=((lambda: _solutions().wrong_replace_setattr, "带点的名字"),
                 (lambda: _solutions().wrong_replace_on_root, "根 Cell"),
                 (lambda: _solutions().wrong_replace_keeps_short_names, "参数名")),
          targets=("course_lib.lora._set_child",),
          question="在第 5 节“写代码：按带点的名字替换一层”的脚手架里写 `my_replace_layer(model, name, new)`："
                   "把带点的完整名字（如 `model.layers.0.self_attn.q_proj`）"
                   "所指的层换成 `new`——一行 `setattr` 行不通：这一层挂在它的**父 Cell** 上，"
                   "中间的 `nn.CellList` 把子层登记在名字 `\"0\"`、`\"1\"`…下；挂上去之后参数名也不能和别的层重名"
                   "（`Parameter` 的 `name` 属性可以直接赋值）。"
                   "函数原地修改 `model`，不需要返回值。"
                   "检查器在一个 2 层的小 InternLM 上替换两个不同位置的层（`model.layers.1.self_attn.v_proj`、"
                   "`model.layers.0.mlp.down_proj`），与 `inject_lora` 的结果比较 Cell 树、参数名和输出。")
def replace_layer(func) -> bool:
    """After ``func(model, name, LoRADense(old, ...))`` the model must equal one adapted by
    ``lora.inject_lora`` on that layer: same Cell tree, same (full, unique) parameter names,
    same output."""
    def body():
        for name in ("model.layers.1.self_attn.v_proj", "model.layers.0.mlp.down_proj"):
            _check_replacement(func, name)
    return run_code_check("ch08.replace_layer", "回到第 5 节“写代码：按带点的名字替换一层”上面的说明：带点的名字、父 Cell、"
                          "nn.CellList 的下标、挂上去之后的参数名，这几处各检查一遍。", body)


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
            raise Mismatch(f"替换 {name!r} 时报 KeyError（{(err.args or [''])[0]}）：带点的名字不是一个属性名，"
                           "MindSpore 的子 Cell 名不能含 '.'。这一层挂在哪个 Cell 上？"
                           "回看第 5 节“写代码：按带点的名字替换一层”上面的说明。") from None
        raise
    cells = dict(mine.cells_and_names())
    observe(f"{name}：替换后模型的子 Cell", sorted(cells), ref_cells)
    observe(f"{name}：该位置是传进去的新层", cells.get(name) is new, True)
    extra = sorted(set(cells) - set(ref_cells))
    if extra:
        raise Mismatch(f"模型里多出了子 Cell {extra[:3]}：新层挂到了根 Cell 上（或别的地方），"
                       f"{name!r} 处仍是原来的层。这一层挂在它的父 Cell 上（第 5 节“写代码：按带点的名字替换一层”上面的说明）。")
    if cells.get(name) is not new:
        raise Mismatch(f"{name!r} 处不是你传进去的新层（是 {type(cells.get(name)).__name__}）。")
    names = [p.name for p in mine.get_parameters()]
    want = sorted(p.name for p in ref.get_parameters())
    observe(f"{name}：替换后模型的参数名", sorted(names), want)
    if sorted(names) != want:
        short = sorted(set(names) - set(want))
        raise Mismatch(f"参数名不对：出现了 {short[:3]}，应为 {name}.weight、{name}.lora_A 这样的完整名字。"
                       "把新层挂到父 Cell 上时，MindSpore 按父 Cell 重新给它的参数命名；"
                       "不同层的参数因此会重名，而优化器和检查点都靠名字区分参数（第 5 节“写代码：按带点的名字替换一层”上面的说明）。")
    ids = Tensor(hidden_rng(2).integers(0, cfg.vocab_size, (2, 6)).astype(np.int32))
    compare(mine(ids), ref(ids), "替换后模型的 logits", atol=1e-5)


# ====================================================================== number exercises
def _lora_params(config, r: int, projections: int) -> int:
    """r·(in + out) per adapted square projection, ``projections`` of them per layer."""
    h = config.hidden_size
    return config.num_layers * projections * r * (h + h)


def _all_seven(config, r: int) -> int:
    """LoRA r on every linear layer of every block: r·(in + out) for q, k, v, o (hidden ->
    hidden), gate, up (hidden -> FFN) and down (FFN -> hidden)."""
    h, f = config.hidden_size, config.intermediate_size
    return config.num_layers * r * (4 * (h + h) + 2 * (h + f) + (f + h))


def _ex1() -> int:
    from ..internlm import internlm_7b
    return _all_seven(internlm_7b(), r=8)


@exercise("number", "InternLM-7B 预设上 r=8 的 LoRA 适配每层全部 7 个线性层，新增多少可训练参数", solution=_ex1,
          question="InternLM-7B 预设（`internlm_7b()`）上，LoRA（r=8）适配每层**全部 7 个**线性层"
                   "（`q_proj`、`k_proj`、`v_proj`、`o_proj`、`gate_proj`、`up_proj`、`down_proj`），"
                   "一共新增多少可训练参数？（整数，要完全相等；各层的形状从 `internlm_7b()` 的配置读出，"
                   "手算。不要调用 `lora.inject_lora`：这道题要你自己从各层的形状算出它会报告的数，"
                   "成绩册把用它得到的答案记为“借用”）",
          targets=("course_lib.lora.inject_lora",))
def ex1(answer) -> bool:
    """How many trainable parameters does LoRA r=8 on all seven linear layers of every block
    (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj) add to the InternLM-7B preset?"""
    return check_number(answer, _ex1(), name="ch08.ex1", integer=True, rel=0,
                        hint="先在 InternLM-tiny 上核对你的算法：第 5 节 inject_lora 的报告列出了每个被适配层的形状"
                             "和新增的参数。7B 预设的 7 个线性层并不都是同一个形状（看 internlm_7b() 的配置）。")


def _with_vocab(vocab_size: int) -> float:
    """Trainable share, in percent, of LoRA r=8 on all seven linear layers of InternLM-tiny
    with another vocabulary (total = base + adapters, as parameter_counts reports it)."""
    from ..internlm import tiny
    cfg = tiny(vocab_size=vocab_size)
    added = _all_seven(cfg, r=8)
    return 100 * added / (cfg.num_parameters() + added)


def _ex2() -> float:
    from ..internlm import internlm_7b
    return _with_vocab(internlm_7b().vocab_size)


@exercise("number", "InternLM-tiny 换成 7B 的词表后，r=8、7 个线性层的 LoRA 可训练参数占总参数的百分之几",
          solution=_ex2,
          question="第 5 节：InternLM-tiny 上 r=8 适配全部 7 个线性层，可训练参数占总参数（含适配器，和报告里的 "
                   "`total` 一样）的 1.583%。如果把 InternLM-tiny 的词表换成 InternLM-7B 的 103,168 个词"
                   "（`internlm_7b().vocab_size`；hidden、层数、FFN 都不变，词嵌入和输出层仍是两份独立的权重），"
                   "这个百分比是多少？（写百分数的数值，例如 0.123 表示 0.123%；保留 3 位有效数字）"
                   "适配器和总参数自己数（在答案里直接调用 `lora.inject_lora` 得到的，成绩册记为“借用”）。",
          targets=("course_lib.lora.inject_lora",))
def ex2(answer) -> bool:
    """Trainable share, in percent (adapters / all parameters incl. adapters × 100), of LoRA r=8
    on all seven linear layers of InternLM-tiny with InternLM-7B's vocabulary of 103,168."""
    return check_number(answer, _ex2(), name="ch08.ex2", rel=3e-3,
                        hint="第 5 节的表按模块列出了可训练参数和总参数：换了词表之后，哪几行会变、哪几行不变？"
                             "LoRA 新增的参数和词表有关吗？第 9 节解释了这个小模型为什么只减少了约九成八。")


LONG_ANSWER = "这是一条正面评论"


def _ex3() -> int:
    from ..sft import IGNORE_INDEX, instruction, pack_example
    from ..tokenizer import load_tokenizer
    tokenizer = load_tokenizer()
    ids, learned = tokenizer.encode_chat(instruction("质量很好"), LONG_ANSWER)
    _, labels = pack_example(tokenizer, ids, learned, max_len=len(ids))   # as encode_example does
    return int((labels != IGNORE_INDEX).sum())                # the answer's tokens + <|end|>


@exercise("number", "回答换成一句话后，一条 SFT 样本里有多少个标签位置不是 IGNORE_INDEX", solution=_ex3,
          question=f"第 2 节的 SFT 样本里，助手的回答是“正面”或“负面”。如果把正面评论的回答换成一句话"
                   f"“{LONG_ANSWER}”（对话模板、指令和评论都不变，评论不长、不会被截断），"
                   "这样一条样本里有多少个标签位置**不是** `IGNORE_INDEX`？（整数；规则与 `sft.encode_example` 相同。它只接受标签 0/1，"
                   "要编码这句回答，可以照它的源码用 `tok.encode_chat(sft.instruction(评论), 回答)` 和 `sft.pack_example` 搭出这条样本，也可以按规则手数）")
def ex3(answer) -> bool:
    """How many label positions are NOT IGNORE_INDEX in an SFT example whose answer is the
    sentence LONG_ANSWER — i.e. how many tokens does the loss learn per example?"""
    return check_number(answer, _ex3(), name="ch08.ex3", integer=True, rel=0,
                        hint="回到第 2 节：提示词、回答、结尾标记、填充，各自位置上的标签是什么？"
                             "第 2 节第二格打印了一条样本的损失学的是哪段文字；换成这句回答，数一数损失要学的是哪几个 token。")


def _ex4() -> float:
    from ..internlm import internlm_7b
    from ..memory import GiB, training_state_bytes
    cfg = internlm_7b()
    lora = _lora_params(cfg, r=64, projections=4)
    return training_state_bytes(trainable=lora, frozen=cfg.num_parameters()).total / GiB


@exercise("number", "InternLM-7B 的 LoRA（r=64，q/k/v/o）训练状态共多少 GiB（混合精度，不含激活）",
          solution=_ex4,
          question="InternLM-7B 预设上 LoRA（r=64，适配 `q_proj`、`k_proj`、`v_proj`、`o_proj`）"
                   "的训练状态共多少 GiB（混合精度，不含激活；包括冻结的基座权重，和第 9 节的表一样；1 GiB = 2**30 字节，误差 1% 以内）？"
                   "用 `memory.training_state_bytes` 算；第 9 节的表（r=8、q/v）可以用来核对你的做法。"
                   "适配器的参数个数自己数（在答案里直接调用 `lora.inject_lora` 得到的，成绩册记为“借用”）。",
          targets=("course_lib.lora.inject_lora",))
def ex4(answer) -> bool:
    """Training state of LoRA (r=64 on q_proj, k_proj, v_proj, o_proj) for the InternLM-7B
    preset, mixed precision, in GiB (weights + gradients + master weights + AdamW states; no
    activations)."""
    return check_number(answer, _ex4(), name="ch08.ex4", rel=0.01,
                        hint="回到第 9 节的表：哪几项只为可训练参数存在、哪一项连冻结的基座也要存？"
                             "先数出 r=64、q/k/v/o 的适配器参数，再想清楚 memory.training_state_bytes 的 "
                             "trainable 和 frozen 各该是什么。用第 9 节的表（r=8、q/v）核对你的做法。")
