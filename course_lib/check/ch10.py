"""Checkers for notebook 10 (data-parallel training with msrun, parallel strategies)."""
from .common import verdict


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def ex1(answer) -> bool:
    """8 devices in data parallel, micro-batch 4 per device, gradients accumulated over 2
    micro-batches before each update: how many sequences does one parameter update see?"""
    devices, micro_batch, accumulation = 8, 4, 2
    expected = devices * micro_batch * accumulation
    return verdict(_is_int(answer) and answer == expected,
                   "全局 batch = 卡数 × 每卡 micro-batch × 梯度累积步数；all-reduce 求的是它们的平均梯度。",
                   "ch10.ex1")


def ex2(answer) -> bool:
    """The largest tensor-parallel size mp <= 16 that Baichuan-13B accepts
    (``strategies.check_tensor_parallel`` must not raise)."""
    from ..baichuan import baichuan_13b
    from ..distributed.strategies import check_tensor_parallel
    config = baichuan_13b()
    valid = []
    for mp in range(1, 17):
        try:
            check_tensor_parallel(config, mp)
            valid.append(mp)
        except ValueError:
            pass
    return verdict(_is_int(answer) and answer == max(valid),
                   "mp 必须同时整除头数 40、FFN 宽度 13696 和词表 64000；逐个试 check_tensor_parallel。",
                   "ch10.ex2")


def ex3(answer) -> bool:
    """Baichuan-13B, mixed precision AdamW, sequence 4096, micro-batch 1, full
    recomputation, ZeRO-3 (optimizer level3), no tensor/pipeline parallel: the smallest
    number of 32 GiB devices on which it fits (``memory.devices_needed``)?"""
    from ..baichuan import baichuan_13b
    from ..memory import devices_needed
    expected = devices_needed(baichuan_13b(), 32, zero=3, recompute=True).devices
    return verdict(_is_int(answer) and answer == expected,
                   "用 memory.devices_needed(baichuan_13b(), 32, zero=3, recompute=True).devices；"
                   "ZeRO-3 把权重、梯度和优化器状态都按数据并行份数切开。", "ch10.ex3")
