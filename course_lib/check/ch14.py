"""Checkers for notebook 14 (dynamic shapes and graph compilation).

Code exercises compare with ``course_lib.solutions.ch14``; the numbers come from the same
functions the notebook measures with."""
from __future__ import annotations

import numpy as np

from ..solutions import ch14 as sol
from .common import (Mismatch, _to_numpy, check_number, compare, exercise, hidden_rng, observe,
                     run_code_check)

STREAM = (12, 20, 12, 33, 20, 8)     # sequence lengths of a stream of batches
BUCKETS = (16, 32, 64)
HIDDEN_BUCKETS = (8, 16, 24)
HIDDEN_LENGTHS = (5, 8, 13, 16, 1, 24, 9)


def _lm_batch(rng, rows, length):
    inputs = rng.integers(3, 90, (rows, length)).astype(np.int32)
    labels = rng.integers(3, 90, (rows, length)).astype(np.int32)
    labels[0, -1] = -100                                  # a label already ignored
    return inputs, labels


def _bucket_bug(got_i, got_l, want_i, want_l, inputs, pad_id) -> str:
    """What differs in the learner's padded batch (which case, which positions), never the fix."""
    t = inputs.shape[1]
    if got_i.shape[1] > want_i.shape[1] and t in HIDDEN_BUCKETS:
        return (f"这一批的长度 {t} 恰好等于一个桶，你却把它补到了 {got_i.shape[1]}："
                "等于桶长的一批放不放得进这个桶？")
    if got_i.shape == want_i.shape and np.array_equal(got_i[:, -t:], inputs) and t < got_i.shape[1]:
        return ("你的填充补在了左边（真实 token 不再从第 0 列开始）：这里的批次不带 attention mask，"
                "因果注意力里每个真实 token 会看到它前面的哪些位置？位置编号从哪里开始？")
    if got_i.shape == want_i.shape and (got_l[:, t:] == pad_id).all() and t < got_l.shape[1]:
        return (f"labels 的填充位置填了 pad_id={pad_id}：这些位置会被算进损失（模型被训练去预测填充符）。"
                "第 05 章的 `causal_lm_loss` 不计入哪些位置？第 2 节开头的数据整理器也是这样处理填充位置的。")
    return ""


@exercise("code", "写 pad_to_bucket：把变长批次补齐到最小的桶，让编译次数不超过桶数",
          solution=lambda: sol.pad_to_bucket,
          wrong=((lambda: sol.wrong_left_pad, "补在了左边"), (lambda: sol.wrong_label_pad_id, "labels 的填充位置填了 pad_id"),
                 (lambda: sol.wrong_strict_bucket, "恰好等于一个桶")),
          targets=("course_lib.migration.compile_stats.bucket_length",
                   "course_lib.migration.compile_stats.pad_batch"),
          # the signature the question states, and a line of run_stream's listing (section 2),
          # which calls the library's pad_batch: neither is the padding itself
          taught=(", pad_id: int = 0", "inputs.shape[1]"),
          question="在第 2 节“分桶填充”的脚手架里写 `my_pad_to_bucket(inputs, labels, buckets, pad_id=0)`："
                   "`inputs`、`labels` 是 (B, T) 的整数数组，`buckets` 是几个允许的长度（升序），"
                   "把这一批填充到**能装下它的最小的桶**（T 恰好等于某个桶时就用这个桶），"
                   "返回填充后的 `(inputs, labels)`；`inputs` 的填充位置填 `pad_id`。填充在哪一边、`labels` 的填充位置填什么"
                   "（课程的损失函数跳过哪个标签值，[第 05 章](05_llm_trainer.ipynb)讲过），"
                   "才能让（不带 attention mask 的）因果语言模型的损失不变？比最大的桶还长时，"
                   "抛出 `ValueError`（检查器只检查异常的类型；消息里写上这一批的长度和最大的桶，排错时用得上）。"
                   "不要调用第 2 节打印的 `compile_stats.bucket_length` / `pad_batch`：成绩册把用到它们的答案记为“借用”。")
def pad_to_bucket(func) -> bool:
    """``func(inputs, labels, buckets, pad_id)`` -> (inputs, labels) padded to a bucket."""
    def body():
        rng, widths, want_widths = hidden_rng(14), set(), set()
        for k, t in enumerate(HIDDEN_LENGTHS):
            inputs, labels = _lm_batch(rng, 1 + k % 3, t)
            pad_id = 0 if k % 2 else 1
            got = func(inputs.copy(), labels.copy(), HIDDEN_BUCKETS, pad_id)
            observe(f"长度 {t} 时返回值的项数", len(got) if isinstance(got, (tuple, list)) else None, 2)
            if not isinstance(got, (tuple, list)) or len(got) != 2:
                raise Mismatch("应返回 (inputs, labels) 两项。")
            gi, gl = (_to_numpy(x) for x in got)
            wi, wl = sol.pad_to_bucket(inputs, labels, HIDDEN_BUCKETS, pad_id)
            bug = _bucket_bug(gi, gl, wi, wl, inputs, pad_id)
            what = f"长度 {t}、桶 {HIDDEN_BUCKETS} 时"
            compare(gi, wi, f"{what}补齐后的 inputs", atol=0, rtol=0, bug=bug)
            compare(gl, wl, f"{what}补齐后的 labels", atol=0, rtol=0, bug=bug)
            widths.add(gi.shape[1])
            want_widths.add(wi.shape[1])
        observe("补齐后出现的长度种数", len(widths), len(want_widths))
        if len(widths) > len(HIDDEN_BUCKETS):
            raise Mismatch(f"出现了 {len(widths)} 种长度，多于桶数 {len(HIDDEN_BUCKETS)}。")
        try:
            func(*_lm_batch(rng, 2, max(HIDDEN_BUCKETS) + 3), HIDDEN_BUCKETS, 0)
        except ValueError:
            observe("超过最大的桶时抛出 ValueError", True, True)
            return
        observe("超过最大的桶时抛出 ValueError", False, True)
        raise Mismatch(f"长度 {max(HIDDEN_BUCKETS) + 3} 超过了最大的桶 {max(HIDDEN_BUCKETS)}，却没有抛出 "
                       "ValueError（题目要求在这时报错，并说明怎么办）。")
    return run_code_check("ch14.pad_to_bucket", "对照第 2 节练习的说明核对输入和返回值：inputs、labels 是 (B, T) "
                          "的整数数组，返回填充后的 (inputs, labels) 两项。", body)


def _dynamic_case():
    rng = hidden_rng(4)
    hidden = rng.standard_normal((2, 5, 8)).astype(np.float16)
    ids = rng.integers(0, 50, (2, 5)).astype(np.int32)
    return [hidden, ids], (1,)


def _compiles_once(placeholders) -> int:
    from mindspore import Tensor, nn
    from ..migration.compile_stats import CompileCounter
    from ..runtime import execution_mode

    class Probe(nn.Cell):
        def construct(self, h, ids):
            return h.sum(-1) + ids.astype(h.dtype)
    hidden, ids = _dynamic_case()[0]
    with execution_mode("graph"):
        probe = Probe()
        probe.set_inputs(*placeholders)
        with CompileCounter() as counter:
            for t in (3, 5, 7):
                probe(Tensor(np.resize(hidden, (2, t, 8))), Tensor(np.resize(ids, (2, t))))
    return counter.count


def _compare_placeholders(got, want, axes) -> None:
    """Raise Mismatch where the learner's placeholders differ from the reference's."""
    from mindspore import Tensor
    observe("占位符的个数", None if got is None else len(got), len(want))
    if got is None or len(got) != len(want):
        raise Mismatch(f"应为每个输入各返回一个占位 Tensor，共 {len(want)} 个。")
    for i, (g, w) in enumerate(zip(got, want)):
        observe(f"第 {i} 个占位符是 Tensor", isinstance(g, Tensor), True)
        if not isinstance(g, Tensor):
            raise Mismatch(f"第 {i} 个占位符是 {type(g).__name__}：应是 Tensor(shape=[...], dtype=...)。")
        observe(f"第 {i} 个占位符的 dtype", str(g.dtype), str(w.dtype))
        if g.dtype != w.dtype:
            raise Mismatch(f"第 {i} 个占位符的 dtype 是 {g.dtype}，真实输入是 {w.dtype}：dtype 与真实输入不一致，"
                           "set_inputs 会拒绝这次调用。")
        observe(f"第 {i} 个占位符的形状（-1 即 None），dynamic_axes={tuple(axes)}", list(g.shape), list(w.shape))
        if tuple(g.shape) != tuple(w.shape):
            dyn = [a for a, n in enumerate(g.shape) if n == -1]
            hint = ("没有任何一维写成 None：每个新长度都会再编译一次。" if not dyn else
                    f"写成 None 的是第 {dyn} 维，而这次的 dynamic_axes 是 {tuple(axes)}。")
            raise Mismatch(f"第 {i} 个占位符的形状是 {tuple(g.shape)}，应为 {tuple(w.shape)}（-1 即 None）：{hint}")


@exercise("code", "写 dynamic_inputs：为 cell.set_inputs 生成占位 Tensor（可变维度写 None，dtype 与输入一致）",
          solution=lambda: sol.dynamic_inputs,
          wrong=((lambda: sol.wrong_fixed_shape, "None"), (lambda: sol.wrong_float32, "dtype"),
                 (lambda: sol.wrong_batch_axis, "dynamic_axes 是"),
                 (lambda: sol.wrong_length_axis_always, "dynamic_axes 是")),
          targets=("course_lib.solutions.ch14.dynamic_inputs",),
          question="在第 2.1 节“为 `set_inputs` 生成占位符”的脚手架里写 `my_dynamic_inputs(examples, dynamic_axes)`："
                   "`examples` 是一组样例输入（NumPy 数组），"
                   "`dynamic_axes` 是会变化的维度（例如 `(1,)` 表示长度会变）；"
                   "为每个输入返回一个占位 `Tensor(shape=..., dtype=...)`（按输入的顺序放在一个列表里），"
                   "可以直接 `cell.set_inputs(*占位符)`：秩和 dtype 与样例相同，只有 `dynamic_axes` 里的维度可以变"
                   "（`Tensor` 的 `dtype` 要用 MindSpore 的类型，例如 `ms.float32`，NumPy 的 dtype 会被拒绝）。"
                   "检查器在两组不同的 `dynamic_axes` 上比较占位符，再在 GRAPH 模式下用它们喂 3 种长度，数编译次数。")
def dynamic_inputs(func) -> bool:
    """``func(examples, dynamic_axes)`` -> list of placeholders, compared with the reference
    for the case's axes and for batch and length both dynamic; then a Probe Cell fed the
    first case's placeholders must compile once for three lengths."""
    def body():
        examples, axes = _dynamic_case()
        got = func([x.copy() for x in examples], axes)
        _compare_placeholders(got, sol.dynamic_inputs(examples, axes), axes)
        both = (0, 1)                    # an answer that ignores dynamic_axes fails here
        _compare_placeholders(func([x.copy() for x in examples], both),
                              sol.dynamic_inputs(examples, both), both)
        n = _compiles_once(got)
        observe("长度 3、5、7 的三次调用的编译次数", n, 1)
        if n != 1:
            raise Mismatch(f"长度 3、5、7 的三次调用编译了 {n} 次，应只编译 1 次。")
    return run_code_check("ch14.dynamic_inputs", "对照第 2.1 节练习的说明核对输入和返回值：examples 是一组 NumPy "
                          "数组，返回每个输入一个占位 Tensor(shape=..., dtype=...) 的列表。", body)


# --------------------------------------------------------------------------- numbers
TEMPERATURES = (0.7, 0.7, 1.0, 0.7, 0.7, 1.0)      # ex1: a Python float passed with each batch


def _graphs_with_scalars() -> int:
    """Graphs a GRAPH-mode Cell compiles for the calls (x of length STREAM[i], t = TEMPERATURES[i])
    with t a Python float: the compile key holds the input shapes AND the constant's value
    (sections 1 and 3). tests/test_check_ch14.py counts the real compilations."""
    return len(set(zip(STREAM, TEMPERATURES)))


@exercise("number", "GRAPH 模式下长度流 (12, 20, 12, 33, 20, 8) 配 Python float 温度：编译几张图",
          solution=_graphs_with_scalars,
          question="第 3 节的 `Scale`（`construct(self, x, t)`）在 GRAPH_MODE 下依次被调用 6 次：`x` 是 float32 的 "
                   f"`(2, T)`，T 依次是 `{STREAM}`；温度 `t` 依次是 `{TEMPERATURES}`，以普通的 Python float 传入。"
                   "一共编译几张图？答案是一个整数。先按第 1、3 节讲的编译缓存的键推出来，再提交。")
def ex1(answer) -> bool:
    """GRAPH mode: Scale(x, t) over the lengths STREAM with the Python-float temperatures
    TEMPERATURES: how many graphs?"""
    return check_number(answer, _graphs_with_scalars(), name="ch14.ex1", integer=True,
                        hint="回到第 1 节和第 3 节：编译好的图按什么查找（键里有哪些东西）？"
                             "逐个调用看一看，哪些调用能用上前面已经编译过的图？")


def _bucketed() -> int:
    from ..migration.compile_stats import bucket_length
    return len({bucket_length(n, BUCKETS) for n in STREAM})


@exercise("number", "分桶 (16, 32, 64) 后同一长度流编译几张图", solution=_bucketed,
          targets=("course_lib.migration.compile_stats.bucket_length",
                   "course_lib.migration.compile_stats.pad_batch"),
          question=f"一串批次的长度依次是 `{STREAM}`（没有其他 Python 常量参数），分桶填充，桶为 `{BUCKETS}`："
                   "GRAPH_MODE 下一共编译几张图？答案是一个整数（手算，或用你自己的 `my_pad_to_bucket`；"
                   "用 `compile_stats.bucket_length` / `pad_batch` 得到的答案，成绩册记为“借用”）。")
def ex2(answer) -> bool:
    """Bucketed padding with BUCKETS: how many graphs for the same stream?"""
    return check_number(answer, _bucketed(), name="ch14.ex2", integer=True,
                        hint="回到第 2 节 bucketed 策略：填充之后，送进模型的是哪几种长度？")


def _ex3_answer():
    import mindspore as ms
    from mindspore import Tensor
    return Tensor(shape=[1, None, 64], dtype=ms.float16)


@exercise("number", "set_inputs 的占位符：float16 的 (1, seq_len, 64)，只有 seq_len 可变", solution=_ex3_answer,
          question="写出 `set_inputs` 的参数：float16 的隐藏状态，形状 (1, seq_len, 64)，"
                   "**只有** seq_len 可变（batch 固定为 1、宽度固定为 64）。"
                   "答案写成 `Tensor(shape=[...], dtype=...)`（检查器比较它的 dtype 和形状）。")
def ex3(answer) -> bool:
    """The argument of ``cell.set_inputs`` for float16 hidden states of shape (1, seq_len, 64)
    where ONLY seq_len varies (batch stays 1, width stays 64)."""
    import mindspore as ms
    from mindspore import Tensor
    from .common import verdict
    observe("答案的 dtype 与形状（-1 即 None）",
            [str(answer.dtype), list(answer.shape)] if isinstance(answer, Tensor) else answer,
            [str(ms.float16), [1, -1, 64]])
    ok = (isinstance(answer, Tensor) and answer.dtype == ms.float16
          and tuple(answer.shape) == (1, -1, 64))
    if not isinstance(answer, Tensor):
        hint = (f"答案是 {type(answer).__name__}：这里要的是一个占位 Tensor，"
                "写成 Tensor(shape=[...], dtype=...)（第 2 节的表，dynamic 一行）。")
    elif answer.dtype != ms.float16:
        hint = f"占位符的 dtype 是 {answer.dtype}，和题目里隐藏状态的 dtype 不一致。"
    else:
        hint = (f"占位符的形状是 {list(answer.shape)}（-1 表示 None）：题目说哪几维会变、哪几维固定？"
                "（第 2 节“常见误区”里关于 set_inputs 的一条）")
    return verdict(ok, hint, "ch14.ex3")
