"""Checkers for notebook 10 (data-parallel training with msrun, parallel strategies)."""
from __future__ import annotations

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
        return "按连续的块切分了；GeneratorDataset(num_shards, shard_id) 是交错取：rank, rank+world, …"
    if got and got[0] == (rank + 1) % n:
        return "rank 从 1 开始数了：rank 0 取的第一条应是第 0 条。"
    return "第 i 条应是原数据的第 (rank + i·world) % n 条。"


@exercise("code", "写 ShardedSource：按 rank 交错切分可随机访问的数据源，各 rank 条数相同",
          solution=lambda: sol.ShardedSource,
          wrong=((lambda: sol.wrong_contiguous, "按连续的块切分"),
                 (lambda: sol.wrong_unequal, "各 rank 的条数不同"),
                 (lambda: sol.wrong_no_shard, "每个 rank 都读了全部数据")),
          targets=("course_lib.distributed.train_dp.sharded_dataset",),
          question="在第 3 节“按 rank 切分一个可随机访问的数据源”的脚手架里写 `MyShardedSource(source, rank, world)`："
                   "一个可随机访问的数据源（`__len__` + `__getitem__`），各 rank **交错**取、"
                   "每个 rank 的条数相同（都是 ⌈n / world⌉，超出末尾的下标从头接着数），"
                   "读到的内容与 `GeneratorDataset(source, num_shards=world, shard_id=rank, shuffle=False)` **完全相同**。")
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
    return run_code_check("ch10.shard_source", "rank r 取第 r, r+world, r+2·world, … 条；"
                          "一共 ceil(n/world) 条，超出末尾的下标对 n 取余。", body)


def _grad_cases():
    rng = hidden_rng(10)
    shapes = [(3, 4), (4,), (2, 2)]
    for world, scale, max_norm in ((2, 1.0, 1.0), (3, 0.05, 1.0), (4, 3.0, 2.0), (2, 0.3, 0.5)):
        yield [[(rng.standard_normal(s) * scale * (1 + r)).astype(np.float32) for s in shapes]
               for r in range(world)], max_norm


def _grad_bug(got, grads, max_norm) -> str:
    s = sol
    for wrong, bug in ((s.wrong_clip_then_average, "先裁剪、后平均了：每个 rank 的裁剪系数不同，"
                        "要先 all-reduce 求平均，再在平均梯度上按全局范数裁剪。"),
                       (s.wrong_sum, "梯度是各 rank 的和而不是平均（gradients_mean=False）：再除以 rank 数。"),
                       (s.wrong_per_tensor_clip, "按每个张量自己的范数裁剪了；应该用所有张量合在一起的全局范数。")):
        w = wrong(grads, max_norm)
        if len(w) == len(got) and all(np.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(got, w)):
            return bug
    return "先对每个参数在各 rank 间求平均，再算全局范数 √Σ‖g‖²，超过 max_norm 时整体乘 max_norm/范数。"


@exercise("code", "写 average_then_clip：数据并行中各 rank 实际用来更新的梯度（先平均、再全局裁剪）",
          solution=lambda: sol.average_then_clip,
          wrong=((lambda: sol.wrong_clip_then_average, "先裁剪、后平均"),
                 (lambda: sol.wrong_sum, "和而不是平均"),
                 (lambda: sol.wrong_per_tensor_clip, "全局范数")),
          targets=("course_lib.distributed.train_dp.DataParallelTrainStep",),
          question="在第 5 节“每个 rank 实际用来更新的梯度”的脚手架里用 NumPy 写 `my_average_then_clip(rank_grads, max_norm)`："
                   "`DataParallelTrainStep` 在反向传播之后做的两件事（all-reduce 求平均，"
                   "再按**全局**范数裁剪）；`rank_grads[r][i]` 是 rank r 上第 i 个参数的梯度，"
                   "返回每个参数最终用来更新的梯度（一个列表）。")
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
    return run_code_check("ch10.grad_average", "平均：Σ_r g_r / world；全局范数：所有参数一起算；"
                          "系数 min(1, max_norm / 范数)。", body)


# --------------------------------------------------------------------------- numbers
@exercise("number", "8 卡 × micro-batch 4 × 累积 2：一次更新看到多少条序列", solution=lambda: 8 * 4 * 2,
          question="8 张卡数据并行，每卡 micro-batch 为 4，每 2 个 micro-batch 累积一次梯度再更新："
                   "一次参数更新“看到”多少条序列？")
def ex1(answer) -> bool:
    """8 devices in data parallel, micro-batch 4 per device, gradients accumulated over 2
    micro-batches before each update: how many sequences does one parameter update see?"""
    devices, micro_batch, accumulation = 8, 4, 2
    return check_number(answer, devices * micro_batch * accumulation, name="ch10.ex1", integer=True,
                        hint="全局 batch = 卡数 × 每卡 micro-batch × 梯度累积步数；all-reduce 求的是它们的平均梯度。")


def _largest_mp() -> int:
    from ..baichuan import baichuan_13b
    from ..distributed.strategies import check_tensor_parallel
    config, valid = baichuan_13b(), []
    for mp in range(1, 17):
        try:
            check_tensor_parallel(config, mp)
            valid.append(mp)
        except ValueError:
            pass
    return max(valid)


@exercise("number", "Baichuan-13B 可用的、不超过 16 的最大张量并行度", solution=_largest_mp,
          question="Baichuan-13B 能接受的、不超过 16 的最大张量并行度 `mp` 是多少？（提示："
                   "`strategies.check_tensor_parallel`）")
def ex2(answer) -> bool:
    """The largest tensor-parallel size mp <= 16 that Baichuan-13B accepts."""
    return check_number(answer, _largest_mp(), name="ch10.ex2", integer=True,
                        hint="mp 必须同时整除头数 40、FFN 宽度 13696 和词表 64000。")


def _zero3_devices() -> int:
    from ..baichuan import baichuan_13b
    from ..memory import GiB, training_state_bytes
    state = training_state_bytes(baichuan_13b().num_parameters())
    return math.ceil(state.total / (32 * GiB))


@exercise("number", "ZeRO-3、忽略激活值：放下 Baichuan-13B 训练状态最少要几张 32 GiB 的卡",
          solution=_zero3_devices,
          question="只看训练状态（第 1 节的每参数 16 字节），**不算激活值**："
                   "ZeRO-3 把它平均分到 N 张 32 GiB 的卡上（N 可以是任意整数），"
                   "Baichuan-13B 最少需要几张卡？和第 8 节 `devices_needed` 给出的卡数比一比，差在哪里？")
def ex3(answer) -> bool:
    """ZeRO-3 splits weights, gradients, master weights and AdamW moments (16 bytes per
    parameter in all) evenly over N devices. IGNORING activations and any other overhead, and
    allowing any whole N: the smallest N of 32 GiB devices that holds Baichuan-13B's state."""
    return check_number(answer, _zero3_devices(), name="ch10.ex3", integer=True,
                        hint="每卡 16 字节 × 参数量 / N ≤ 32 GiB（1 GiB = 2**30 字节），N 向上取整。"
                             "这里不算激活值，所以比第 8 节的 devices_needed 结果小。")
