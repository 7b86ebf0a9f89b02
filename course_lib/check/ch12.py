"""Checkers for notebook 12 (dynamic batching, static decode step, MINDIR deployment).

The code exercises are self-contained: arrays in, arrays out, compared with the NumPy
reference in ``course_lib.solutions.ch12`` (no inference-engine internals)."""
from __future__ import annotations

import numpy as np

from ..solutions import ch12 as sol
from .common import Mismatch, _to_numpy, check_number, compare, exercise, hidden_rng, observe, run_code_check

LAYERS, HEADS, HEAD_DIM = 2, 2, 3
MERGE_CASES = ((2, 5, 1, 3), (1, 2, 3, 6), (2, 4, 2, 4), (3, 1, 1, 4))   # (Ba, Ta, Bb, Tb)


def _batch(rng, rows, width, pad_id):
    lengths = rng.integers(1, width + 1, rows)
    lengths[0] = width                                   # the longest row fills the width
    mask = (np.arange(width)[None, :] >= (width - lengths)[:, None]).astype(np.int32)
    ids = np.where(mask == 1, rng.integers(3, 50, (rows, width)), pad_id).astype(np.int32)
    cache = [tuple((rng.standard_normal((rows, HEADS, width, HEAD_DIM)) * mask[:, None, :, None])
                   .astype(np.float32) for _ in range(2)) for _ in range(LAYERS)]
    return ids, mask, cache


def _unpack(out, what=""):
    observe(f"{what}返回值的项数", len(out) if isinstance(out, (tuple, list)) else None, 3)
    if not isinstance(out, (tuple, list)) or len(out) != 3:
        raise Mismatch("应返回 (ids, mask, cache) 三项。")
    ids, mask, cache = out
    observe(f"{what}cache 每层的项数", [len(kv) for kv in cache], [2] * LAYERS)
    if len(cache) != LAYERS or any(len(kv) != 2 for kv in cache):
        raise Mismatch(f"cache 应是 {LAYERS} 层、每层 (keys, values) 的列表。")
    return _to_numpy(ids), _to_numpy(mask), [tuple(_to_numpy(t) for t in kv) for kv in cache]


def _merge_bug(ids, mask, a, b, pad_id) -> str:
    right = sol.wrong_right_pad(a, b, pad_id)
    if ids.shape == right[0].shape and np.array_equal(ids, right[0]):
        return "填充加在了右边：解码时新 token 接在最右列，填充必须在左边，真实 token 才靠右对齐。"
    return "较窄的一方在左边补齐（ids 用 pad_id），再按行拼接，先 a 后 b。"


def _check_merge(func, case, pad_id):
    rng = hidden_rng(sum(case) + 12)
    ba, ta, bb, tb = case
    a, b = _batch(rng, ba, ta, pad_id), _batch(rng, bb, tb, pad_id)
    copy = lambda x: (x[0].copy(), x[1].copy(), [tuple(t.copy() for t in kv) for kv in x[2]])  # noqa: E731
    what = f"a 为 ({ba}, {ta})、b 为 ({bb}, {tb}) 时"
    ids, mask, cache = _unpack(func(copy(a), copy(b), pad_id), what)
    want_ids, want_mask, want_cache = sol.merge_batches(a, b, pad_id)
    compare(ids, want_ids, f"{what}合并后的 ids", atol=0, rtol=0, bug=_merge_bug(ids, mask, a, b, pad_id))
    if mask.shape == want_mask.shape:
        observe(f"{what}填充位置的 mask", mask[want_mask == 0], np.zeros(int((want_mask == 0).sum())))
    if mask.shape == want_mask.shape and (mask[want_mask == 0] != 0).any():
        raise Mismatch(f"{what}填充位置的 mask 是 1：填充位置的 mask 应为 0，否则注意力会看到填充的 key/value。")
    compare(mask, want_mask, f"{what}合并后的 mask", atol=0, rtol=0)
    for layer, ((k, v), (wk, wv)) in enumerate(zip(cache, want_cache)):
        for name, got, want in (("keys", k, wk), ("values", v, wv)):
            observe(f"{what}第 {layer} 层 {name} 的形状", list(got.shape), list(want.shape))
            if got.shape != want.shape:
                raise Mismatch(f"{what}第 {layer} 层的 {name} 形状是 {tuple(got.shape)}，应为 {tuple(want.shape)}："
                               "KV cache 没有一起在左边补齐（时间轴是第 2 维），每一层的 keys 和 values 都要补。")
            real = want_mask[:, None, :, None].astype(bool)
            compare(np.where(real, got, 0), np.where(real, want, 0), f"{what}第 {layer} 层 {name} 的真实位置",
                    atol=1e-6, bug="cache 的补齐方向或行顺序与 ids 不一致。")


@exercise("code", "写 merge_batches：两个解码批次左填充对齐后合并（ids、mask 和每层 KV cache）",
          solution=lambda: sol.merge_batches,
          wrong=((lambda: sol.wrong_right_pad, "填充加在了右边"),
                 (lambda: sol.wrong_mask_ones, "mask 应为 0"),
                 (lambda: sol.wrong_cache_not_padded, "KV cache 没有一起在左边补齐")),
          targets=("course_lib.inference.merge_states",),
          question="在第 2 节“新请求并入正在解码的批次”的脚手架里写 `my_merge_batches(a, b, pad_id=0)`："
                   "每个批次是 `(ids, mask, cache)`，返回合并后的 `(ids, mask, cache)`——a 的行在前、"
                   "b 的行在后，列数取两者的最大值；较窄的一方补在哪一边、补什么？")
def merge_batches(func) -> bool:
    """``func(a, b, pad_id)`` with a = (ids, mask, cache) -> the merged (ids, mask, cache)."""
    def body():
        for case in MERGE_CASES:
            _check_merge(func, case, pad_id=0 if case[0] % 2 else 2)
    return run_code_check("ch12.merge_batches", "先求两边的最大宽度，较窄的一方左边补 pad_id / 0 / 全零的"
                          "key、value（第 2 维），然后按行拼接，a 在前。", body)


ADMIT_CASES = (
    ([(0, 0.0), (1, 0.1), (2, 0.5), (3, 0.2)], 2, 0.3),
    ([(5, 1.0), (3, 0.4), (4, 0.4), (9, 0.05)], 3, 0.5),
    ([(0, 0.0), (1, 0.0), (2, 0.0)], 0, 1.0),
    ([(7, 2.0), (8, 0.1)], 4, 1.5),
    ([(i, 0.1 * (6 - i)) for i in range(6)], 4, 0.35),
)


def _admit_cases() -> tuple:
    """The fixed cases and one drawn from the hidden inputs (arrivals on a half-second grid,
    so some arrive together and the tie goes by id)."""
    rng = hidden_rng(120)
    ids = rng.permutation(20)[:7]
    waiting = [(int(r), float(t)) for r, t in zip(ids, rng.integers(0, 6, len(ids)) / 2)]
    return ADMIT_CASES + ((waiting, int(rng.integers(1, 5)), 1.5),)


def _admit_bug(got, waiting, free, now) -> str:
    arrival = dict(waiting)
    if any(arrival.get(r, -1) > now for r in got):
        return "收进了还没到达的请求：只有 arrival <= now 的请求才能加入。"
    if len(got) > max(free, 0):
        return f"收进了 {len(got)} 个请求，但只有 {free} 个空位：批次不能超过 max_batch。"
    if got == sol.wrong_newest_first(waiting, free, now):
        return "后到的先服务了：按到达时间从早到晚（同时到达按 id）先到先服务。"
    return "在已到达的请求里按 (到达时间, id) 排序，取前 free_slots 个。"


@exercise("code", "写 admit：在 now 时刻按先到先服务、不超过空位数，挑出可以加入批次的请求",
          solution=lambda: sol.admit,
          wrong=((lambda: sol.wrong_ignores_arrival, "还没到达"),
                 (lambda: sol.wrong_ignores_limit, "空位"),
                 (lambda: sol.wrong_newest_first, "先到先服务")),
          targets=("course_lib.inference._admit",),
          question="在第 2 节“谁能加入批次？”的脚手架里写 `my_admit(waiting, free_slots, now)`："
                   "`waiting` 是 `[(request_id, arrival_seconds), ...]`（顺序任意），"
                   "`free_slots` 是批次里的空位数，返回现在加入的请求 id 列表——只收已经到达的请求，"
                   "先到先服务（同时到达按 id），不超过空位数。")
def admit(func) -> bool:
    """``func(waiting, free_slots, now)`` -> list of request ids that join now."""
    def body():
        for waiting, free, now in _admit_cases():
            got = func(list(waiting), free, now)
            got = [int(r) for r in (got if got is not None else [None])]
            want = sol.admit(waiting, free, now)
            observe(f"等待 {waiting}、空位 {free}、now={now} 时返回的请求 id", got, want)
            if got != want:
                raise Mismatch(f"等待 {waiting}、空位 {free}、now={now} 时返回 {got}，应为 {want}："
                               + _admit_bug(got, waiting, free, now))
    return run_code_check("ch12.admit", "已到达（arrival <= now）→ 按 (arrival, id) 排序 → 取前 free_slots 个。",
                          body)


# --------------------------------------------------------------------------- numbers
def _serve_passes() -> int:
    import course_lib as cl
    from ..baichuan import BaichuanForCausalLM, tiny
    from ..inference import make_requests, serve
    cl.seed_everything(0)
    model = BaichuanForCausalLM(tiny(vocab_size=64, hidden_size=16, num_layers=1, num_heads=2,
                                     intermediate_size=32, max_seq_len=32))
    return len(serve(model, make_requests([[3, 4, 5]] * 10, 5), max_batch=4).passes)


@exercise("number", "10 个请求、每个 5 个 token、max_batch=4：serve 做几次前向", solution=_serve_passes,
          question="10 个请求同时到达，每个都恰好生成 5 个 token（不会遇到 EOS），`max_batch=4`："
                   "`serve` 一共做了多少次前向计算（prefill 和解码步都算）？")
def ex1(answer) -> bool:
    """10 requests at t=0, each generating exactly 5 tokens (no EOS), max_batch=4: how many
    forward passes (prefills + decode steps) does ``inference.serve`` make?"""
    return check_number(answer, _serve_passes(), name="ch12.ex1", integer=True,
                        hint="每组请求：1 次 prefill 给出第 1 个 token，再做 4 步解码；10 个请求分成几组？")


def _kv_gib() -> float:
    from ..internlm import internlm_7b
    from ..memory import GiB, kv_cache_bytes
    return kv_cache_bytes(internlm_7b(), 8, 2048, "fp16") / GiB


@exercise("number", "InternLM-7B、fp16、8 条 × 2048 token 的 KV cache 占多少 GiB", solution=_kv_gib,
          question="InternLM-7B（32 层、隐藏 4096）用 fp16 的 KV cache 服务 8 条长 2048 的序列，"
                   "cache 占多少 GiB？（提示：`course_lib.memory.kv_cache_bytes`；保留两位小数即可。）")
def ex2(answer) -> bool:
    """KV cache of InternLM-7B (32 layers, hidden 4096), fp16, 8 sequences of 2048 tokens, in GiB."""
    return check_number(answer, _kv_gib(), name="ch12.ex2", rel=0, abs_=0.01,
                        hint="K 和 V 两份 × 层数 × batch × 序列长 × hidden × 2 字节，再除以 2**30。")


EX3_PROMPTS = [[5, 6, 7], [8], [9, 10]]


def _third_mask() -> list:
    from ..generation import left_pad
    return left_pad(EX3_PROMPTS)[1][2].tolist()


@exercise("number", "左填充 [[5, 6, 7], [8], [9, 10]] 后第三行的 attention mask", solution=_third_mask,
          question="把提示 `[[5, 6, 7], [8], [9, 10]]` 左填充成一个批次后，"
                   "**第三行**的 attention mask 是什么？写成列表。")
def ex3(answer) -> bool:
    """The attention-mask row of the THIRD prompt after left-padding [[5, 6, 7], [8], [9, 10]]."""
    return check_number(answer, _third_mask(), name="ch12.ex3", integer=True,
                        hint="左填充：填充在左边、真实 token 靠右；mask 中真实 token 为 1，长度等于最长的提示。")
