"""Checkers for notebook 06 (building Baichuan-13B)."""
from .common import close, verdict


def ex1(answer) -> bool:
    """The 12 ALiBi slopes of a 12-head model (Baichuan's _get_interleave rule)."""
    from ..layers import alibi_slopes
    ok = isinstance(answer, (list, tuple)) and close(list(answer), alibi_slopes(12), rel=1e-6)
    return verdict(ok, "12 不是 2 的幂：先取最近的 2 的幂 8 的 8 个斜率 2^(-1)..2^(-8)，"
                   "再从 16 个头的斜率序列里隔一个取一个（下标 0, 2, 4, 6），补足 4 个。", "ch06.ex1")


def ex2(answer) -> bool:
    """Parameters of ONE Baichuan-13B decoder layer (attention + MLP + its two RMSNorms)."""
    from ..baichuan import baichuan_13b
    shapes = baichuan_13b().parameter_shapes()
    expected = sum(_size(s) for n, s in shapes.items() if n.startswith("model.layers.0."))
    ok = isinstance(answer, int) and answer == expected
    return verdict(ok, "W_pack (3h×h) + o_proj (h×h) + gate/up (f×h 各一) + down (h×f) + 两个 RMSNorm (h 各一)，"
                   "h=5120, f=13696。", "ch06.ex2")


def ex3(answer) -> bool:
    """Memory (GiB, 2**30 bytes) of Baichuan-13B's weights in int8."""
    from ..baichuan import baichuan_13b
    from ..memory import GiB, weight_bytes
    ok = close(answer, weight_bytes(baichuan_13b(), "int8") / GiB, rel=5e-3)
    return verdict(ok, "int8 每个参数 1 字节；参数量 / 2**30。", "ch06.ex3")


def ex4(answer) -> bool:
    """Fewest 16 GiB devices to train Baichuan-13B (seq 4096, micro-batch 1) with tensor
    parallel 8, ZeRO-1 and full recomputation, as memory.devices_needed plans it."""
    from ..baichuan import baichuan_13b
    from ..memory import devices_needed
    expected = devices_needed(baichuan_13b(), 16, tp=8, zero=1, recompute=True, seq_len=4096).devices
    ok = isinstance(answer, int) and answer == expected
    return verdict(ok, "调用 devices_needed(cfg, 16, tp=8, zero=1, recompute=True, seq_len=4096)，"
                   "读它返回的 .devices（= dp × tp × pp）。", "ch06.ex4")


def _size(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
