"""Checkers for notebook 10 (data-parallel training with msrun, parallel strategies)."""
from __future__ import annotations

import functools
import math

import numpy as np

from ..solutions import ch10 as sol
from .common import Mismatch, check_number, compare, exercise, hidden_rng, observe, run_code_check

SHARD_CASES = ((12, 4), (7, 2), (10, 3), (5, 4), (3, 1))     # (items, world): hidden inputs


class _Items:
    """A random-access source whose item i is i (so a shard's items name their indices)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(f"index {i} out of range for a source of {self.n} items")
        return i


def _read(cls, n, rank, world) -> list:
    shard = cls(_Items(n), rank, world)
    return [int(np.asarray(shard[i]).reshape(-1)[0]) for i in range(len(shard))]


def _shard_bug(got: list, n: int, rank: int, world: int, lengths: set) -> str:
    if got == list(range(n)) and world > 1:
        return "每个 rank 都读了全部数据：没有按 rank 切分，N 张卡算 N 遍同一批数据。"
    if len(lengths) > 1:
        return (f"各 rank 的条数不同 {sorted(lengths)}：数据条数不能整除卡数时要从头补齐，"
                "否则条数多的 rank 多走一步，在 all-reduce 里永远等不到别人。")
    if got == _read(sol.wrong_contiguous, n, rank, world):
        return ("按连续的块切分了；GeneratorDataset(num_shards, shard_id) 是交错取的"
                "（第 3 节练习上面的第一条规则）。")
    if got and got[0] == (rank + 1) % n:
        return "rank 从 1 开始数了：rank 0 取的第一条应是第 0 条。"
    return "对照第 3 节练习上面的两条规则逐条检查：交错取，以及条数相同、超出末尾时从头接着数。"


@exercise("code", "写 ShardedSource：按 rank 交错切分可随机访问的数据源，各 rank 条数相同",
          solution=lambda: sol.ShardedSource,
          wrong=((lambda: sol.wrong_contiguous, "按连续的块切分"),
                 (lambda: sol.wrong_unequal, "各 rank 的条数不同"),
                 (lambda: sol.wrong_no_shard, "每个 rank 都读了全部数据")),
          targets=("course_lib.distributed.train_dp.sharded_dataset",),
          question="在第 3 节“练习 1（写代码）：按 rank 切分一个可随机访问的数据源”的脚手架里写 "
                   "`MyShardedSource(source, rank, world)`："
                   "一个可随机访问的数据源（`__len__` + `__getitem__`），各 rank **交错**取、"
                   "每个 rank 的条数相同（都是 ⌈n / world⌉，超出末尾的下标从头接着数），"
                   "读到的内容与 `GeneratorDataset(source, num_shards=world, shard_id=rank, shuffle=False)` **完全相同**。"
                   "检查器在几种 (条数, rank 数) 组合上（含条数不能整除 rank 数、只有 1 个 rank 的情形）逐个 rank 比较。")
def shard_source(cls) -> bool:
    """``cls(source, rank, world)`` must read what GeneratorDataset(num_shards=world,
    shard_id=rank, shuffle=False) reads from ``source``."""
    def body():
        for n, world in SHARD_CASES:
            lengths = {len(cls(_Items(n), r, world)) for r in range(world)}
            for rank in range(world):
                got = _read(cls, n, rank, world)
                want = _read(sol.ShardedSource, n, rank, world)
                observe(f"{n} 条数据、{world} 个 rank 时 rank {rank} 读到的条目", got, want)
                if got != want:
                    raise Mismatch(f"{n} 条数据、{world} 个 rank 时，rank {rank} 读到 {got}，应为 {want}："
                                   + _shard_bug(got, n, rank, world, lengths))
    return run_code_check("ch10.shard_source", "检查 __init__、__len__ 和 __getitem__：对每种 (条数, rank 数) 组合"
                          "都要能用，下标 i 从 0 到 len - 1（第 3 节练习上面的两条规则）。", body)


def _grad_cases():
    rng = hidden_rng(10)
    shapes = [(3, 4), (4,), (2, 2)]
    for world, scale, max_norm in ((2, 1.0, 1.0), (3, 0.05, 1.0), (4, 3.0, 2.0), (2, 0.3, 0.5)):
        yield [[(rng.standard_normal(s) * scale * (1 + r)).astype(np.float32) for s in shapes]
               for r in range(world)], max_norm


def _grad_bug(got, grads, max_norm) -> str:
    s = sol
    for wrong, bug in ((s.wrong_clip_then_average, "先裁剪、后平均了：每个 rank 的裁剪系数不同；"
                        "裁剪作用在 all-reduce 之后的平均梯度上（第 3 节打印的 DataParallelTrainStep 源代码里的顺序）。"),
                       (s.wrong_sum, "梯度是各 rank 的和而不是平均（相当于 gradients_mean=False）。"),
                       (s.wrong_per_tensor_clip, "按每个张量自己的范数裁剪了；ops.clip_by_global_norm "
                        "用的是全局范数（第 5 节练习上面的链接）。")):
        w = wrong(grads, max_norm)
        if len(w) == len(got) and all(np.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(got, w)):
            return bug
    return ("对照第 3 节打印的 DataParallelTrainStep：先做什么、后做什么；ops.clip_by_global_norm 的范数怎么算、"
            "什么时候才缩放（第 5 节练习上面的链接）。")


@exercise("code", "写 average_then_clip：数据并行中各 rank 实际用来更新的梯度（先平均、再全局裁剪）",
          solution=lambda: sol.average_then_clip,
          wrong=((lambda: sol.wrong_clip_then_average, "先裁剪、后平均"),
                 (lambda: sol.wrong_sum, "和而不是平均"),
                 (lambda: sol.wrong_per_tensor_clip, "全局范数")),
          targets=("course_lib.distributed.train_dp.DataParallelTrainStep",),
          question="在第 5 节“练习 2（写代码）：每个 rank 实际用来更新的梯度”的脚手架里用 NumPy 写 "
                   "`my_average_then_clip(rank_grads, max_norm)`："
                   "`DataParallelTrainStep` 在反向传播之后做的两件事（all-reduce 求平均，"
                   "再按**全局**范数裁剪，与 `ops.clip_by_global_norm` 相同）；`rank_grads[r][i]` 是 rank r 上第 i 个参数的梯度"
                   "（NumPy 数组），返回每个参数最终用来更新的梯度（一个列表，第 i 个与参数 i 的梯度同形状）。"
                   "检查器用几组隐藏的随机梯度（2–4 个 rank，范数有的超过 `max_norm`、有的没有）比较，每个元素的误差在 1e-6 加上它的 1e-4 倍以内。")
def grad_average(func) -> bool:
    """``func(rank_grads, max_norm)``: rank_grads[r][i] is rank r's gradient of parameter i."""
    def body():
        for k, (grads, max_norm) in enumerate(_grad_cases()):
            got = func([[g.copy() for g in gs] for gs in grads], max_norm)
            want = sol.average_then_clip(grads, max_norm)
            observe(f"第 {k + 1} 组输入返回的梯度个数", None if got is None else len(got), len(want))
            if got is None or len(got) != len(want):
                raise Mismatch(f"返回了 {0 if got is None else len(got)} 个梯度，应为 {len(want)} 个"
                               "（每个参数一个）。")
            bug = _grad_bug([np.asarray(g) for g in got], grads, max_norm)
            for i, (g, w) in enumerate(zip(got, want)):
                compare(g, w, f"第 {k + 1} 组输入（{len(grads)} 个 rank）参数 {i} 的梯度", atol=1e-6,
                        rtol=1e-4, bug=bug)
    return run_code_check("ch10.grad_average", "rank_grads 是一个列表的列表：rank_grads[r][i] 是 rank r 上参数 i 的梯度；"
                          "返回一个列表，每个参数一个梯度（第 5 节练习上面的说明）。", body)


# --------------------------------------------------------------------------- numbers
def _zero1_state_gib(dp: int = 16) -> float:
    """Training state (no activations) per device of Baichuan-13B under DP x ZeRO-1, the
    memory calculator's ``zero=1``: master weights and AdamW moments sharded over ``dp``."""
    from ..baichuan import baichuan_13b
    from ..memory import GiB, Layout, per_device_memory
    m = per_device_memory(baichuan_13b(), Layout(dp=dp, zero=1))
    return (m.total - m.activations) / GiB


@exercise("number", "DP16 + ZeRO-1：Baichuan-13B 每卡的训练状态多少 GiB（不算激活值）", solution=_zero1_state_gib,
          question="Baichuan-13B 用 16 张卡做数据并行，并开 ZeRO-1（第 8 节计算器的 `zero=1`：只把 float32 主权重"
                   "和 AdamW 的 m、v 平均分到 16 张卡上）。**不算激活值**，每张卡要存多少 GiB 的训练状态？"
                   "（混合精度，第 1 节的每参数 16 字节；1 GiB = 2**30 字节，保留 2 位小数）。参数量可以从配置取；"
                   "每卡的字节数按第 1 节的分项自己算，不要调用 `memory.per_device_memory` 或 `memory.plan`："
                   "成绩册把用它们得到的答案记为“借用”。",
          targets=("course_lib.memory.per_device_memory", "course_lib.memory.plan"))
def ex1(answer) -> bool:
    """Per-device training state (no activations) of Baichuan-13B, mixed precision, with 16-way
    data parallelism and ZeRO-1 (fp32 master weights and AdamW m, v sharded), in GiB."""
    return check_number(answer, _zero1_state_gib(), name="ch10.ex1", rel=0, abs_=0.01,
                        hint="第 1 节把 16 字节拆成了几项（state.gib() 那一行）：ZeRO-1 切分的是哪几项、"
                             "哪几项每张卡仍然各存一整份？第 8 节的表（8 张卡）可以用来核对你的做法，"
                             "但那里的数包含激活值。")


@functools.lru_cache(maxsize=None)
def _tp_layer_params(mp: int = 8) -> int:
    """Parameters of one Baichuan-13B decoder layer on each device under the Megatron plan of
    ``strategies.tensor_parallel_plan`` with ``mp`` devices: every planned Dense is split in
    ``mp`` equal parts, everything else (the two RMSNorm weights) is kept whole on each."""
    import dataclasses
    from ..baichuan import BaichuanForCausalLM, baichuan_13b
    from ..distributed.strategies import tensor_parallel_plan
    from ..memory import build_lazy
    model = build_lazy(BaichuanForCausalLM, dataclasses.replace(baichuan_13b(), num_layers=1))
    plan = tensor_parallel_plan(model)
    total = 0
    for name, p in model.parameters_and_names():
        if name.startswith("model.layers.0."):
            size = math.prod(p.shape)
            total += size // mp if name.rpartition(".")[0] in plan else size
    return total


@exercise("number", "Baichuan-13B 张量并行 mp=8：每张卡上一个解码层有多少个参数", solution=_tp_layer_params,
          question="Baichuan-13B 按第 7.1 节课程的切法做 mp=8 的张量并行：`strategies.tensor_parallel_plan` "
                   "列出的 Dense 层，每个的权重都平均切成 8 份，每张卡存 1 份；计划里没有的参数每张卡各存一份完整的。"
                   "每张卡上**一个解码层**有多少个参数？（整数，要完全相等；从 `baichuan_13b()` 配置里的尺寸算，"
                   "不要真的建出 13B 的模型：它的 float32 权重要 49 GiB 内存）")
def ex2(answer) -> bool:
    """Parameters of one Baichuan-13B decoder layer held by each device under 8-way tensor
    parallelism (the course's Megatron plan; parameters outside the plan are replicated)."""
    return check_number(answer, _tp_layer_params(), name="ch10.ex2", integer=True, rel=0,
                        hint="一个解码层里有哪些参数、各是什么形状（Baichuan-13B 的 q/k/v 合并成一个 W_pack）？"
                             "计划里有哪几层（第 7.1 节只打印了其中几层，`strategies.tensor_parallel_plan` 返回整个计划），哪些参数不在计划里？")


def _largest_micro_batch_16() -> int:
    from ..baichuan import baichuan_13b
    from ..memory import Layout, plan
    big, micro_batch = baichuan_13b(), 0
    while plan(big, 32, Layout(dp=16, zero=3, recompute=True, micro_batch=micro_batch + 1)).fits:
        micro_batch += 1
    return micro_batch


@exercise("number", "16 张 32 GiB 的卡、ZeRO-3 + 重计算：Baichuan-13B 的 micro-batch 最大可以是几",
          solution=_largest_micro_batch_16,
          question="第 8 节最后一格：Baichuan-13B 在 32 GiB 的卡上只用数据并行 + ZeRO-3 + 重计算（micro-batch 1、"
                   "序列长 4096），`devices_needed` 给出的是 8 张卡。现在有 16 张这样的卡，其余不变：每张卡的 "
                   "micro-batch 最大可以是几，训练状态和激活值仍放得下？（整数；按第 8 节计算器的假设算，“放得下”就是计算器的 `fits`，不再另留余量：`memory.Layout` 的 `micro_batch` 字段就是每卡的 micro-batch。"
                   "这一题可以用计算器 `memory.plan` 逐个试 micro-batch，也可以手算：要想清楚的是卡数翻倍时哪一部分变小、"
                   "micro-batch 变大时哪一部分变大）")
def ex3(answer) -> bool:
    """Baichuan-13B on 16 devices of 32 GiB, data parallel + ZeRO-3 + full recomputation,
    sequence 4096: the largest micro-batch that still fits (the memory calculator's assumptions)."""
    return check_number(answer, _largest_micro_batch_16(), name="ch10.ex3", integer=True, rel=0,
                        hint="第 8 节：ZeRO-3 把哪些东西平均分到 16 张卡上，哪些每张卡各存一份？"
                             "micro-batch 变大时，哪一部分跟着变大？再核对：你的 micro-batch 加 1 之后还放得下吗？")
