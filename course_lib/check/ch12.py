"""Checkers for notebook 12 (continuous batching, static decode step, MINDIR deployment).

The code exercises are self-contained: arrays in, arrays out, compared with the NumPy
reference in ``course_lib.solutions.ch12`` (no inference-engine internals)."""
from __future__ import annotations

import functools

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


def _merge_bug(ids, a, b, pad_id) -> str:
    """What differs in the merged ids (a diagnosis of the learner's result, never the fix)."""
    right = sol.wrong_right_pad(a, b, pad_id)
    if ids.shape == right[0].shape and np.array_equal(ids, right[0]):
        return ("你的结果里真实 token 靠左、填充在右：下一步解码时新 token 接在最右一列之后，"
                "这一行的真实 token 和新 token 之间会隔着什么？（第 2 节，以及第 07 章批量生成的提示怎样对齐）")
    swapped = sol.merge_batches(b, a, pad_id)[0]
    if ids.shape == swapped.shape and np.array_equal(ids, swapped):
        return "行的顺序与题目不同：题目要求 a 的行在前、b 的行在后。"
    want_ids, want_mask, _ = sol.merge_batches(a, b, pad_id)
    if ids.shape == want_ids.shape:
        pads = ids[want_mask == 0]
        if pads.size and (pads != pad_id).any():
            return f"补出来的位置上 ids 是 {int(pads[pads != pad_id][0])}，而这次调用的 pad_id 是 {pad_id}。"
    return ""


def _check_merge(func, case, pad_id):
    rng = hidden_rng(sum(case) + 12)
    ba, ta, bb, tb = case
    a, b = _batch(rng, ba, ta, pad_id), _batch(rng, bb, tb, pad_id)
    copy = lambda x: (x[0].copy(), x[1].copy(), [tuple(t.copy() for t in kv) for kv in x[2]])  # noqa: E731
    what = f"a 为 ({ba}, {ta})、b 为 ({bb}, {tb})、pad_id={pad_id} 时"
    ids, mask, cache = _unpack(func(copy(a), copy(b), pad_id), what)
    want_ids, want_mask, want_cache = sol.merge_batches(a, b, pad_id)
    compare(ids, want_ids, f"{what}合并后的 ids", atol=0, rtol=0, bug=_merge_bug(ids, a, b, pad_id))
    if mask.shape == want_mask.shape:
        observe(f"{what}填充位置的 mask", mask[want_mask == 0], np.zeros(int((want_mask == 0).sum())))
    if mask.shape == want_mask.shape and (mask[want_mask == 0] != 0).any():
        raise Mismatch(f"{what}填充位置的 mask 是 1（合并时补出来的列也算成了真实 token）：mask 为 1 的位置"
                       "注意力会去看——补出来的 key/value 该不该被看到？")
    compare(mask, want_mask, f"{what}合并后的 mask", atol=0, rtol=0)
    for layer, ((k, v), (wk, wv)) in enumerate(zip(cache, want_cache)):
        for name, got, want in (("keys", k, wk), ("values", v, wv)):
            observe(f"{what}第 {layer} 层 {name} 的形状", list(got.shape), list(want.shape))
            if got.shape != want.shape:
                raise Mismatch(f"{what}第 {layer} 层的 {name} 形状是 {tuple(got.shape)}，应为 {tuple(want.shape)}："
                               "cache 要和 ids、mask 一样，包含两个批次的全部行、列数（时间轴，形状里的 T）"
                               "与合并后的 ids 相同；每一层的 keys 和 values 都是如此。")
            real = want_mask[:, None, :, None].astype(bool)
            compare(np.where(real, got, 0), np.where(real, want, 0), f"{what}第 {layer} 层 {name} 的真实位置",
                    atol=1e-6, bug="cache 的每一行、每一列要和合并后 ids、mask 的同一行、同一列对应"
                                   "（对照这一行的 ids 看它的真实 token 落在哪几列）。")


@exercise("code", "写 merge_batches：两个解码批次对齐后合并（ids、mask 和每层 KV cache）",
          solution=lambda: sol.merge_batches,
          wrong=((lambda: sol.wrong_right_pad, "真实 token 靠左、填充在右"),
                 (lambda: sol.wrong_mask_ones, "填充位置的 mask 是 1"),
                 (lambda: sol.wrong_cache_not_padded, "cache 要和 ids、mask 一样")),
          targets=("course_lib.inference.merge_states",),
          taught=("(ids, mask, cache",),        # the batch layout the question itself states
          question="在第 2 节“练习 2（写代码）：把新请求的批次并入正在解码的批次”的脚手架里写 `my_merge_batches(a, b, pad_id=0)`："
                   "每个批次是 `(ids, mask, cache)`：`ids`、`mask` 是 (B, T) 的整数数组，`cache` 是每层一个 "
                   "`(keys, values)`，形状都是 (B, heads, T, head_dim)；返回合并后的 `(ids, mask, cache)`，"
                   "布局相同——a 的行在前、b 的行在后，列数取两者的最大值。较窄的一方补在哪一边、"
                   "ids、mask 和 cache 各补什么？（检查器在几种行数、列数的组合上比较 ids、mask，"
                   "以及 cache 在真实 token 位置上的值；输入输出用 NumPy 数组，也接受 Tensor。）")
def merge_batches(func) -> bool:
    """``func(a, b, pad_id)`` with a = (ids, mask, cache) -> the merged (ids, mask, cache)."""
    def body():
        for case in MERGE_CASES:
            _check_merge(func, case, pad_id=0 if case[0] % 2 else 2)
    return run_code_check("ch12.merge_batches", "对照第 2 节练习的说明核对输入和返回值：每个批次是 "
                          "(ids, mask, cache)，ids、mask 形状 (B, T)，cache 每层一个 (keys, values)，"
                          "形状 (B, heads, T, head_dim)。", body)


ADMIT_CASES = (
    ([(0, 0.0), (1, 0.1), (2, 0.5), (3, 0.2)], 2, 0.3),
    ([(5, 1.0), (3, 0.4), (4, 0.4), (9, 0.05)], 3, 0.5),
    ([(0, 0.0), (1, 0.0), (2, 0.0)], 0, 1.0),
    ([(7, 2.0), (8, 0.1)], 4, 1.5),
    ([(i, 0.1 * (6 - i)) for i in range(6)], 4, 0.35),
    ([(6, 1.0), (2, 0.5), (4, 1.0)], 3, 1.0),            # arriving exactly at now counts
    ([(9, 0.5), (7, 0.5), (8, 0.2), (3, 0.5)], 3, 0.5),  # ties listed against id order, at now
)


def _admit_cases() -> tuple:
    """The fixed cases and one drawn from the hidden inputs (arrivals on a half-second grid,
    so some arrive together and the tie goes by id)."""
    rng = hidden_rng(120)
    ids = rng.permutation(20)[:7]
    waiting = [(int(r), float(t)) for r, t in zip(ids, rng.integers(0, 6, len(ids)) / 2)]
    return ADMIT_CASES + ((waiting, int(rng.integers(1, 5)), 1.5),)


def _admit_bug(got, waiting, free, now) -> str:
    """What differs in the learner's choice (which request, which case), never the rule."""
    arrival = dict(waiting)
    want = sol.admit(waiting, free, now)
    unknown = [r for r in got if r not in arrival]
    if unknown:
        return f"返回了 waiting 里没有的 id {unknown[0]}。"
    if len(set(got)) < len(got):
        return "同一个请求出现了不止一次。"
    early = [r for r in got if arrival[r] > now]
    if early:
        return f"请求 {early[0]} 在 {arrival[early[0]]} s 才到达，now={now} 时还没到。"
    if len(got) > max(free, 0):
        return f"返回了 {len(got)} 个请求，而空位只有 {free} 个。"
    if sorted(got) == sorted(want):
        return "选中的请求对了，顺序不对：列表要按它们加入的先后排列（先到先服务）。"
    missed = [r for r in want if r not in got]
    extra = [r for r in got if r not in want]
    if missed and extra:
        a, b = missed[0], extra[0]
        if arrival[a] == arrival[b]:
            return (f"请求 {a} 和 {b} 同时在 {arrival[a]} s 到达，你选了 {b} 而没有选 {a}："
                    "题目说同时到达时按什么排？")
        return f"请求 {a}（{arrival[a]} s 到达）比你选中的请求 {b}（{arrival[b]} s 到达）先到，却没有被选上。"
    if missed:
        return f"还有空位，已经到达的请求 {missed[0]}（{arrival[missed[0]]} s）却没有被选上。"
    return ""


@exercise("code", "写 admit：在 now 时刻按先到先服务、不超过空位数，挑出可以加入批次的请求",
          solution=lambda: sol.admit,
          wrong=((lambda: sol.wrong_ignores_arrival, "还没到"),
                 (lambda: sol.wrong_ignores_limit, "空位只有"),
                 (lambda: sol.wrong_newest_first, "先到，却没有被选上")),
          targets=("course_lib.inference._admit",),
          question="在第 2 节“练习 1（写代码）：挑出现在加入批次的请求”的脚手架里写 `my_admit(waiting, free_slots, now)`："
                   "`waiting` 是 `[(request_id, arrival_seconds), ...]`（顺序任意），"
                   "`free_slots` 是批次里的空位数（可能是 0），返回现在加入的请求 id 列表，"
                   "按加入的先后排列——只收已经到达的请求（到达时间恰好等于 `now` 的也算），"
                   "先到先服务（同时到达的按 id 从小到大），不超过空位数。")
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
    return run_code_check("ch12.admit", "对照第 2 节题目核对输入和返回值：waiting 是 "
                          "[(request_id, arrival_seconds), ...]，返回请求 id 的列表。", body)


# --------------------------------------------------------------------------- numbers
def _serve_passes() -> int:
    import course_lib as cl
    from ..baichuan import BaichuanForCausalLM, tiny
    from ..inference import make_requests, serve
    cl.seed_everything(0)
    model = BaichuanForCausalLM(tiny(vocab_size=64, hidden_size=16, num_layers=1, num_heads=2,
                                     intermediate_size=32, max_seq_len=32))
    return len(serve(model, make_requests([[3, 4, 5]] * 10, 5), max_batch=4).passes)


_served_passes = functools.cache(_serve_passes)      # one serve run per process, however often ex1 asks


@exercise("number", "10 个请求、每个 5 个 token、max_batch=4：serve 做几次前向", solution=_serve_passes,
          question="10 个请求同时到达（提示都是 3 个 token），每个都恰好生成 5 个 token（不会遇到 EOS），"
                   "`max_batch=4`：`inference.serve` 一共做了多少次前向计算（预填充和解码步都算，每次调用模型算一次）？"
                   "答案是一个整数。按第 2 节讲的 serve 每一轮做的事推算；不要运行 `inference.serve`，"
                   "成绩册把用它得到的答案记为“借用”。",
          targets=("course_lib.inference.serve",))
def ex1(answer) -> bool:
    """10 requests at t=0, each generating exactly 5 tokens (no EOS), max_batch=4: how many
    forward passes (prefills + decode steps) does ``inference.serve`` make?"""
    return check_number(answer, _served_passes(), name="ch12.ex1", integer=True,
                        hint="回到第 2 节 serve 每一轮做的四件事：哪几步调用了模型？一个请求的 5 个 token "
                             "分别来自哪一次前向？max_batch=4 时，哪些请求能一起走完这些前向？")


# ex2: the KV cache the compiled decode engine reserves for one `generate` call (section 3):
# the prompt is left-padded to a power-of-two width before the compiled prefill, and the
# slots are that width plus the new tokens, rounded up to a multiple of 64.
EX2_BATCH, EX2_LONGEST, EX2_NEW = 6, 40, 20


def _engine_cache_mib() -> float:
    from ..generation import cache_bucket, prefill_width
    from ..internlm import internlm_7b
    from ..memory import kv_cache_bytes
    config = internlm_7b()
    limit = config.max_seq_len
    slots = cache_bucket(prefill_width(EX2_LONGEST, EX2_NEW, limit) + EX2_NEW, limit)
    return kv_cache_bytes(config, EX2_BATCH, slots, "fp16") / 2**20


@exercise("number", "generate 给 InternLM-7B 生成 6 条、最长提示 40、新 20 个 token：引擎预留的 KV cache 占多少 MiB",
          solution=_engine_cache_mib,
          question="用课程的 `generate`（带 KV cache 的编译解码引擎）让 InternLM-7B（`internlm_7b()`：32 层、"
                   "32 个注意力头、head_dim 128，没有 GQA；在昇腾上以 float16 计算，引擎用模型自己的层，cache 与模型同一精度）一次为 "
                   f"{EX2_BATCH} 条提示生成，最长的提示 {EX2_LONGEST} 个 token，`max_new_tokens={EX2_NEW}`。"
                   "解码引擎为 KV cache 预留的 `Parameter`（每层 K、V 各一个）一共占多少 MiB（1 MiB = 2**20 字节）？"
                   "按第 3 节讲的做法推算：整段提示送进引擎之前先补到多宽、预留的槽位数怎样取整"
                   "（第 3 节的规则里的 `max_seq_len`，InternLM-7B 是 2048）。答案精确到 1 MiB。"
                   "这两步按第 3 节的规则自己算，不要调用 `generation.prefill_width` 或 `generation.cache_bucket`："
                   "成绩册把用它们得到的答案记为“借用”。",
          targets=("course_lib.generation.prefill_width", "course_lib.generation.cache_bucket"))
def ex2(answer) -> bool:
    """MiB of the KV-cache Parameters the compiled decode engine reserves when ``generate``
    serves 6 prompts (longest 40 tokens) with max_new_tokens=20 on InternLM-7B in float16."""
    return check_number(answer, _engine_cache_mib(), name="ch12.ex2", rel=0, abs_=0.5,
                        hint="回到第 3 节：cache 的形状是什么（每一维对应什么）？整段提示送进引擎之前被补成多宽、"
                             "槽位数按什么取整？每个数几个字节？")


# ex3: a request joins a running batch (section 2), then the batch decodes one more step.
EX3_RUNNING, EX3_STEPS, EX3_JOINING = [[5, 6, 7], [8]], 2, [9, 10]


def _joined_mask() -> list:
    """The new request's attention-mask row: the running batch (left-padded prompts, then
    EX3_STEPS decode steps, each appending a column of 1s) merged with the joining prompt,
    then one more decode step."""
    from ..generation import left_pad
    ids_a, mask_a = left_pad(EX3_RUNNING)
    grow = ((0, 0), (0, EX3_STEPS))
    ids_a, mask_a = np.pad(ids_a, grow, constant_values=1), np.pad(mask_a, grow, constant_values=1)
    ids_b, mask_b = left_pad([EX3_JOINING])
    _, mask, _ = sol.merge_batches((ids_a, mask_a, []), (ids_b, mask_b, []), pad_id=0)
    mask = np.pad(mask, ((0, 0), (0, 1)), constant_values=1)
    return mask[len(EX3_RUNNING)].astype(int).tolist()


@exercise("number", "新请求并入正在解码的批次、再解码一步后，它那一行的 attention mask", solution=_joined_mask,
          question=f"正在解码的批次由提示 `{EX3_RUNNING}` 左填充后一起预填充，之后做了 {EX3_STEPS} 步解码"
                   "（每一步给每一行追加一列新 token，这一列的 mask 是 1）。这时新请求 "
                   f"`{EX3_JOINING}` 预填充完，按练习 2（`my_merge_batches`）的做法并入这个批次（原批次的行在前），"
                   "然后整个批次又解码了 1 步。新请求那一行现在的 attention mask 是什么？写成 0/1 的整数列表。")
def ex3(answer) -> bool:
    """The attention-mask row of a request that joined a running batch, one decode step later."""
    return check_number(answer, _joined_mask(), name="ch12.ex3", integer=True, say_length=False,  # the width is half the question
                        hint="回到第 2 节：合并时两边的列数怎样对齐、补出来的列在哪一边、它们的 mask 是多少？"
                             "每解码一步，mask 又多了什么？")
