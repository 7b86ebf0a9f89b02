"""Checkers for notebook 07 (pre-training the tiny Baichuan (same architecture) and generating text).

Code exercises compare the learner's function with the library's own
(``course_lib.generation``) on hidden random logits; the KV-cache append is compared with a
plain NumPy concatenation (and must reproduce a full recompute when used step by step)."""
from __future__ import annotations

import math

import numpy as np

from .common import (check_number, close, compare, exercise, hidden_rng, Mismatch, observe,
                     recognised, run_code_check, verdict)


def _solutions():
    from ..solutions import ch07
    return ch07


def _logits(rng, batch, vocab):
    return (rng.standard_normal((batch, vocab)) * rng.uniform(0.5, 3.0, (batch, 1))).astype(np.float64)


# ====================================================================== code exercises
@exercise("code", "写 my_top_p(logits, p)：核采样（nucleus）的过滤，保留的词 logit 不变，其余 -inf",
          solution=lambda: _solutions().top_p_filter,
          wrong=((lambda: _solutions().wrong_top_p_stops_early, "不到 p"),
                 (lambda: _solutions().wrong_top_p_ascending, "哪一端"),
                 (lambda: _solutions().wrong_top_p_not_unsorted, "原来词表")),
          targets=("course_lib.generation.apply_top_p", "course_lib.generation.next_token_scores"),
          taught=(") -> np.ndarray:",),          # a return annotation: next_token_scores' listing (section 6) has it
          question="在第 6 节“top-p 过滤与重复惩罚”的脚手架里写 `my_top_p(logits, p)`（NumPy，"
                   "`logits` 形状 (batch, vocab)，每行一个序列）：每行按概率从大到小排序、累加，"
                   "保留到累计概率**第一次 ≥ p** 的那个词为止（至少保留一个），其余设为 `-inf`，"
                   "保留的 logit 不变，返回与 `logits` 同形状、按原来词表顺序排列的数组。"
                   "检查器在隐藏的随机 logits 上（几种 batch、词表大小和 p，包括很小的 p）"
                   "与 `generation.apply_top_p` 比较。", cell="sampling")
def top_p(func) -> bool:
    def body():
        from ..generation import apply_top_p
        rng = hidden_rng(21)
        cases = [(1, 11, 0.8), (3, 37, 0.9), (2, 8, 0.5), (4, 50, 0.95), (2, 9, 1e-3)]
        for batch, vocab, p in cases:
            x = _logits(rng, batch, vocab)
            got = np.asarray(_np(func(x.copy(), p)), np.float64)
            want = apply_top_p(x, p)
            _diagnose_top_p(got, want, x, p, f"batch {batch}、词表 {vocab}、p={p}")
    return run_code_check("ch07.top_p", "对照题目逐条检查：累加从哪一端开始、累计到哪一个词为止、"
                          "结果是不是回到了原来的词表顺序（第 6 节开头 top-p 的定义）。", body)


def _np(value):
    return value.asnumpy() if hasattr(value, "asnumpy") else value


def _diagnose_top_p(got, want, x, p, what) -> None:
    observe(what, got, want, atol=1e-8, rtol=1e-5)   # kept logits unchanged, -inf where dropped
    if got.shape != want.shape:
        raise Mismatch(f"{what}：输出形状 {got.shape}，应为 {want.shape}（每行一个序列，形状不变）。")
    kept_g, kept_w = np.isfinite(got), np.isfinite(want)
    if np.any(kept_g & kept_w) and not np.allclose(got[kept_g & kept_w], x[kept_g & kept_w]):
        raise Mismatch(f"{what}：保留下来的 logit 被改了：过滤只把丢掉的词设为 -inf，"
                       "保留的词返回原来的 logit（不要返回概率或重新归一化）。")
    for row in range(len(x)):
        if not kept_g[row].any():
            raise Mismatch(f"{what}：第 {row} 行一个词都没留下：至少要保留概率最大的那个词。"
                           "一个词都不留，留下的概率加起来是 0，不到 p（题目：保留到累计概率第一次 ≥ p 的那个词为止）。")
        if np.array_equal(kept_g[row], kept_w[row]):
            continue
        order = np.argsort(-x[row], kind="stable")
        rank_g = sorted(np.flatnonzero(kept_g[row][order]).tolist())
        n_want = int(kept_w[row].sum())
        if np.array_equal(kept_g[row], np.arange(len(order)) < n_want):
            bug = ("留下的个数对，但留下的是词表里排在最前面的那几个位置：掩码是在排序后的顺序里算的，"
                   "它对应的是原来词表里的哪些位置？")
        elif kept_g[row][order[-1]] and not kept_w[row][order[-1]]:
            bug = "留下了概率最小的词：累加是从哪一端开始的？（第 6 节开头：top-p 留下的是最可能的那一小批词）"
        elif rank_g == list(range(len(rank_g))):             # a prefix of the best tokens
            if len(rank_g) == n_want - 1:
                bug = "少留了一个：留下的词的概率加起来还不到 p（题目：保留到累计概率第一次 ≥ p 的那个词为止）。"
            else:
                bug = "留下的个数不对：对照题目，保留到哪一个词为止。"
        else:
            bug = ("留下的个数对，但不是概率最大的那几个词：掩码是在排序后的顺序里算的，"
                   "它对应的是原来词表里的哪些位置？")
        raise Mismatch(f"{what}：第 {row} 行留下了 {int(kept_g[row].sum())} 个词 "
                       f"{np.flatnonzero(kept_g[row]).tolist()[:8]}，应为 {n_want} 个 "
                       f"{np.flatnonzero(kept_w[row]).tolist()[:8]}。{bug}")
    compare(got, want, what)


@exercise("code", "写 my_repetition_penalty(logits, seen, penalty)：重复惩罚（正 logit 除以系数、负 logit 乘以系数）",
          solution=lambda: _solutions().repetition_penalty,
          wrong=((lambda: _solutions().wrong_penalty_divide_all, "负的 logit"),
                 (lambda: _solutions().wrong_penalty_every_token, "出现过"),
                 (lambda: _solutions().wrong_penalty_subtract, "presence")),
          targets=("course_lib.generation.apply_repetition_penalty",
                   "course_lib.generation.next_token_scores"),
          taught=(") -> np.ndarray:",),          # a return annotation: next_token_scores' listing (section 6) has it
          question="在同一个脚手架里（第 6 节）写 `my_repetition_penalty(logits, seen, penalty)`："
                   "`seen` 是与 `logits` 同形状的布尔数组（这个词已经出现过）；出现过的词，"
                   "正 logit 除以 `penalty`、负 logit 乘以 `penalty`，没出现过的词不变；返回与 `logits` 同形状的数组。"
                   "检查器在隐藏的随机 logits 上与 `generation.apply_repetition_penalty` 比较。", cell="sampling")
def repetition_penalty(func) -> bool:
    def body():
        from ..generation import apply_repetition_penalty
        rng = hidden_rng(22)
        for batch, vocab, penalty in ((1, 10, 1.3), (3, 31, 1.1), (2, 17, 2.0)):
            x = _logits(rng, batch, vocab)
            seen = rng.random((batch, vocab)) < 0.3
            seen[:, 0] = True                      # at least one seen token per row
            got = np.asarray(_np(func(x.copy(), seen.copy(), penalty)), np.float64)
            want = apply_repetition_penalty(x, seen, penalty)
            what = f"batch {batch}、词表 {vocab}、penalty={penalty}"
            observe(what, got, want, atol=1e-9, rtol=1e-6)
            if got.shape != want.shape:
                raise Mismatch(f"{what}：输出形状 {got.shape}，应为 {want.shape}。")
            bad = ~np.isclose(got, want, rtol=1e-6, atol=1e-9)
            if not bad.any():
                continue
            b, t = np.argwhere(bad)[0]
            if not seen[b, t]:
                bug = "这个词还没出现过（seen 为 False），它的 logit 却变了。"
            elif x[b, t] < 0 and math.isclose(got[b, t], x[b, t] / penalty, rel_tol=1e-6):
                bug = ("这个负的 logit 除以了 penalty，离 0 更近——这个词反而更可能了；"
                       "重复惩罚要让出现过的词更不可能（第 6 节开头）。")
            elif math.isclose(got[b, t], x[b, t] - penalty, rel_tol=1e-6):
                bug = ("减去 penalty 是另一种惩罚（presence penalty），不是题目要的重复惩罚"
                       "（第 6 节开头：正 logit 除以系数、负 logit 乘以系数）。")
            else:
                bug = "对照题目：正的和负的 logit 各自怎样变。"
            raise Mismatch(f"{what}：第 {b} 行词 {t}（logit {x[b, t]:.4g}，出现过：{bool(seen[b, t])}）"
                           f"得到 {got[b, t]:.4g}，应为 {want[b, t]:.4g}。{bug}")
    return run_code_check("ch07.repetition_penalty", "对照题目：哪些词要改，正的和负的 logit 各自怎样变。",
                          body)


@exercise("code", "写 my_append_kv(past_k, past_v, k, v)：把这一步的 K、V 接到 KV cache 后面",
          solution=lambda: _solutions().append_kv,
          wrong=((lambda: _solutions().wrong_append_heads_axis, "哪一维"),
                 (lambda: _solutions().wrong_append_new_first, "顺序"),
                 (lambda: _solutions().wrong_append_forgets_past, "丢掉")),
          targets=("course_lib.layers.KVCache",),
          question="在第 7 节“往 KV cache 里追加”的脚手架里写 `my_append_kv(past_k, past_v, k, v)`："
                   "把这一步的 `k`、`v`（MindSpore Tensor，形状 (batch, heads, 新 token 数, head_dim)）接在缓存**后面**，"
                   "返回新的 (keys, values)；第一步没有缓存（`None`）。检查器模拟一次生成（先 3 个 token，"
                   "再 1、1、2 个），每一步与完整的拼接结果比较。")
def append_kv(func) -> bool:
    """Step by step (prefill 3 tokens, then 1, 1, 2) the learner's cache must equal the
    concatenation of everything seen, in order, along the sequence axis."""
    def body():
        rng = hidden_rng(23)
        for batch, heads, dim in ((1, 2, 4), (3, 4, 8)):
            past_k = past_v = None
            all_k, all_v = [], []
            for step, length in enumerate((3, 1, 1, 2)):
                k = rng.standard_normal((batch, heads, length, dim)).astype(np.float32)
                v = rng.standard_normal((batch, heads, length, dim)).astype(np.float32)
                all_k.append(k), all_v.append(v)
                what = f"batch {batch}、{heads} 头，第 {step + 1} 步（新 {length} 个 token）后的"
                past_k, past_v = _append_step(func, past_k, past_v, k, v, step, what,
                                              np.concatenate(all_k, 2))
                _diagnose_append(past_k, np.concatenate(all_k, 2), all_k, what + " keys")
                _diagnose_append(past_v, np.concatenate(all_v, 2), all_v, what + " values")
    return run_code_check("ch07.append_kv", "对照“写代码：往 KV cache 里追加”上面的说明：缓存的哪一维是 token 数、"
                          "新 token 放在哪一边、第一步没有缓存时返回什么。", body)


def _append_step(func, past_k, past_v, k, v, step, what, want_k):
    """One call of the learner's append_kv, its (keys, values) as arrays; a failing call is
    observed as no keys at all."""
    from mindspore import Tensor
    cached = None if past_k is None else tuple(past_k.shape)
    past = (None, None) if past_k is None else (Tensor(past_k), Tensor(past_v))
    try:                      # PyNative may report a bad concat only on asnumpy()
        result = func(*past, Tensor(k), Tensor(v))
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            observe(what + " keys", None, want_k, atol=1e-6, rtol=1e-4)
            raise Mismatch("append_kv 要返回两个值 (keys, values)。")
        return tuple(np.asarray(_np(t)) for t in result)
    except (ValueError, RuntimeError, TypeError) as err:
        observe(what + " keys", None, want_k, atol=1e-6, rtol=1e-4)
        if cached is not None and "concat" in str(err).lower():
            raise Mismatch(f"第 {step + 1} 步拼接时形状对不上（缓存 {cached}，"
                           f"新的 {k.shape}）：两者只有 token 数那一维不同，沿哪一维拼接？") from None
        raise


def _diagnose_append(got, want, parts, what) -> None:
    got = np.asarray(got)
    observe(what, got, want, atol=1e-6, rtol=1e-4)
    if got.shape != want.shape:
        if got.shape == parts[-1].shape and len(parts) > 1:
            raise Mismatch(f"{what}形状是 {got.shape}，应为 {want.shape}：只留下了这一步的 K/V，"
                           "把过去的丢掉了——缓存要保存所有已经处理过的 token。")
        if got.ndim == 4 and got.shape[1] != want.shape[1]:
            raise Mismatch(f"{what}形状是 {got.shape}，应为 {want.shape}：变长的是头数那一维，"
                           "不是 token 数那一维。")
        raise Mismatch(f"{what}形状是 {got.shape}，应为 {want.shape}：每一步之后只有 token 数那一维变长。")
    if len(parts) > 1 and np.allclose(got, np.concatenate(parts[-1:] + parts[:-1], 2)):
        raise Mismatch(f"{what}顺序不对：新 token 放到了过去的 token 前面（缓存里的下标就是 token 的位置）。")
    compare(got, want, what, atol=1e-6)


# ====================================================================== number exercises
# On 3/4 of the validation positions the model gives the right token probability 1/2, on the
# other 1/4 probability 1/64.
TARGET_PROBS = ((0.75, 1 / 2), (0.25, 1 / 64))


def _perplexity() -> float:
    return math.exp(-sum(share * math.log(p) for share, p in TARGET_PROBS))


@exercise("number", "3/4 的位置给正确 token 1/2、1/4 的位置给 1/64：困惑度", solution=_perplexity,
          question="某模型在验证集 3/4 的位置上给正确的下一个 token 的概率是 1/2，在其余 1/4 的位置上是 1/64。"
                   "它的验证困惑度是多少？（保留 2 位小数）")
def ex1(answer) -> bool:
    """Perplexity of a model that gives the right token probability 1/2 on 3/4 of the
    positions and 1/64 on the rest (the geometric mean of 1/p)."""
    nats = -sum(share * math.log(p) for share, p in TARGET_PROBS)
    hint = recognised(answer, (
        ("这是 1/p 的算术平均：困惑度不是这样平均的，它从每个位置的交叉熵平均而来（第 04 章第 3 节）。",
         sum(share / p for share, p in TARGET_PROBS)),
        ("这是“平均概率”的倒数：困惑度是从每个位置的交叉熵平均出来的（第 04 章第 3 节）。",
         1 / sum(share * p for share, p in TARGET_PROBS)),
        ("这是平均交叉熵（nats），还没有换成困惑度。", nats),
        ("这是以 2 为底的平均交叉熵（bits）：困惑度与对数的底无关，换回来是多少？", nats / math.log(2)),
        ("把以 2 为底的交叉熵当成了 nats 去取 exp：底要一致。", math.exp(nats / math.log(2))),
    ), "回到第 04 章第 3 节：困惑度是怎样从每个位置的交叉熵得到的（本章第 5 节讲了它直观上的意思）。", rel=1e-3)
    return check_number(answer, _perplexity(), name="ch07.ex1", rel=0.0, abs_=5e-3, hint=hint)


PROBS = (0.42, 0.25, 0.15, 0.08, 0.06, 0.04)


def _kept_top_p() -> list:
    from ..generation import apply_top_p
    return np.flatnonzero(np.isfinite(apply_top_p(np.log(np.asarray([PROBS])), 0.8)[0])).tolist()


def _indices(answer) -> list | None:
    """The answer as sorted distinct int indices (a list, tuple, set, array, one number, or
    the 1-tuple ``np.nonzero`` returns), or None when it is not a collection of whole numbers."""
    if answer is None or isinstance(answer, (str, bytes, dict, bool)):
        return None
    if isinstance(answer, tuple) and len(answer) == 1 and np.ndim(answer[0]) == 1:
        answer = answer[0]                       # what np.nonzero / np.where return for a 1-D array
    try:
        items = (list(answer) if isinstance(answer, (list, tuple, set, frozenset, range))
                 else list(np.ravel(_np(answer))))
    except (TypeError, ValueError):
        return None
    whole = [v for v in items if not isinstance(v, (bool, np.bool_)) and isinstance(v, (int, float, np.number))
             and math.isfinite(float(v)) and float(v).is_integer()]
    return sorted({int(v) for v in whole}) if len(whole) == len(items) else None


@exercise("number", "概率 PROBS 做 p=0.8 的 top-p 过滤后保留哪些下标", solution=_kept_top_p,
          question="下一个 token 的概率是 `ch07.PROBS`（已按从大到小排好），top-p 取 0.8 时保留哪些下标？"
                   "给出下标的列表（从 0 数）。可以手算，也可以用你自己写的 `my_top_p`（它接收的是形状 (batch, vocab) 的 logits：把概率放进一行 `np.log([ch07.PROBS])`，再看第 0 行）；"
                   "不要调用 `generation.apply_top_p`，成绩册把用它得到的答案记为“借用”。",
          targets=("course_lib.generation.apply_top_p", "course_lib.generation.next_token_scores"))
def ex2(answer) -> bool:
    """Indices of PROBS that top-p (nucleus) sampling with p=0.8 keeps. Graded as the keep/drop
    mask over PROBS (the same information as the indices), so a wrong answer is not told how
    many indices are due."""
    want = _kept_top_p()
    kept = _indices(answer)
    if kept is None:                  # not indices at all: check_number says what kind of answer is due
        return check_number(answer, want, name="ch07.ex2", integer=True, rel=0,
                            hint="答案是下标的列表（从 0 数），例如 `[0, 3]`。")
    hint = "回到第 6 节开头 top-p 的定义（也是 top-p 那道写代码练习的题目）：留下的是哪一个最小的词集？"
    if any(not 0 <= i < len(PROBS) for i in kept):
        observe("答案", kept, [int(i in want) for i in range(len(PROBS))])
        return verdict(False, f"下标从 0 数，PROBS 只有 {len(PROBS)} 个词：下标在 0 到 {len(PROBS) - 1} 之间。",
                       "ch07.ex2")
    if kept and kept != want:
        mass = sum(PROBS[i] for i in kept)
        if kept != list(range(len(kept))):
            hint = "留下的词里有比没留下的词概率更小的：top-p 从最可能的词开始留。"
        elif mass < 0.8:
            hint = f"你留下的词的概率加起来是 {mass:.2f}，还不到 p：题目要的是累计概率第一次 ≥ p 的那个词为止。"
        else:
            hint = "去掉你留下的最后一个词，剩下的累计概率仍然 ≥ p 吗？top-p 留下的是最小的那个词集。"
    mask = lambda indices: [int(i in indices) for i in range(len(PROBS))]   # noqa: E731
    return check_number(mask(kept), mask(want), name="ch07.ex2", integer=True, rel=0, hint=hint)


PENALTY_LOGITS = (2.0, 1.0, -1.0)      # a 3-word vocabulary
PENALTY_SEEN = (True, False, True)     # words 0 and 2 are already in the text
PENALTY = 1.25


def _probability_after_penalty(penalty_fn=None) -> float:
    """Probability of word 1 after the library's repetition penalty (generation.next_token_scores),
    or after ``penalty_fn(logits, seen, penalty)``, then softmax."""
    from ..generation import next_token_scores, softmax
    logits, seen = np.asarray([PENALTY_LOGITS], np.float64), np.asarray([PENALTY_SEEN])
    scores = (next_token_scores(logits, seen, repetition_penalty=PENALTY) if penalty_fn is None
              else penalty_fn(logits, seen, PENALTY))
    return float(softmax(scores)[0, 1])


@exercise("number", "重复惩罚 1.25 之后，没出现过的那个词的采样概率", solution=_probability_after_penalty,
          question="词表只有 3 个词，logits 是 `[2.0, 1.0, -1.0]`，其中第 0 和第 2 个词已经出现过。"
                   "重复惩罚取 1.25（温度 1，不做 top-k/top-p 过滤），惩罚之后第 1 个词（没出现过的那个）"
                   "被采样到的概率是多少？（保留 3 位小数）可以手算，也可以用你自己写的 `my_repetition_penalty`；"
                   "不要调用 `generation.apply_repetition_penalty` 或 `generation.next_token_scores`，"
                   "成绩册把用它们得到的答案记为“借用”。",
          targets=("course_lib.generation.apply_repetition_penalty", "course_lib.generation.next_token_scores"))
def ex3(answer) -> bool:
    """Probability of the one unseen word after repetition penalty 1.25 on logits [2, 1, -1]
    (words 0 and 2 seen), then softmax."""
    from ..solutions.ch07 import wrong_penalty_divide_all, wrong_penalty_every_token, wrong_penalty_subtract
    hint = recognised(answer, (
        ("这是惩罚之前的概率：先按第 6 节的重复惩罚改出现过的词的 logit，再算概率。",
         _probability_after_penalty(lambda logits, seen, penalty: logits)),
        ("第 2 个词的负 logit 除以了惩罚系数：它离 0 更近，这个词反而更可能了（第 6 节开头的规则）。",
         _probability_after_penalty(wrong_penalty_divide_all)),
        ("没出现过的第 1 个词也被惩罚了：只改出现过的词。",
         _probability_after_penalty(wrong_penalty_every_token)),
        ("减去惩罚系数是另一种惩罚（presence penalty），不是第 6 节的重复惩罚。",
         _probability_after_penalty(wrong_penalty_subtract)),
    ), "分两步：先按第 6 节开头的规则改出现过的词的 logit，再用 softmax 换成概率。", rel=2e-3)
    if close(answer, 1.0, 1e-6):
        hint = "概率是 1：这是某个 logit，还是没有归一化？三个词的概率加起来要等于 1。"
    return check_number(answer, _probability_after_penalty(), name="ch07.ex3", rel=0.0, abs_=5e-4,
                        hint=hint)


EX4_LAYERS = 3      # neither tiny()'s 2 layers nor either scale's trained model: read the config


def _kv_bytes() -> int:
    from ..baichuan import tiny
    from ..memory import kv_cache_bytes
    return kv_cache_bytes(tiny(num_layers=EX4_LAYERS), 1, 256, "fp32")


@exercise("number", f"baichuan.tiny(num_layers={EX4_LAYERS}) 的 KVCache 存着 256 个 token 时 float32 K、V 的字节数",
          solution=_kv_bytes,
          question=f"`baichuan.tiny(num_layers={EX4_LAYERS})`（{EX4_LAYERS} 层，其余是默认尺寸，"
                   "[第 06 章](06_baichuan_build.ipynb)第 8 节打印过；不是本章训练的那个模型）在 PyNative 下逐步生成，用第 7 节“写代码：往 KV cache 里追加”那种每步追加的缓存"
                   "（`layers.KVCache`：只存已经处理过的 token，不是解码引擎按固定长度预留的缓冲区）。"
                   "缓存里存着 256 个 token（提示词加已生成的）时，batch 1、float32，所有层的 K 和 V 一共多少字节？"
                   "自己从配置算，不要调用 `memory.kv_cache_bytes`：成绩册把用它得到的答案记为“借用”。",
          targets=("course_lib.memory.kv_cache_bytes",))
def ex4(answer) -> bool:
    """Bytes of the float32 KV cache (a growing KVCache) of baichuan.tiny(num_layers=3) holding
    256 tokens, batch 1."""
    from ..baichuan import tiny
    want = _kv_bytes()
    hint = recognised(answer, (
        ("字节数不对：每层存几样东西？cache 是哪种 dtype，每个数几字节？（第 06 章第 7 节）", want / 2),
        ("字节数不对：检查每个数的字节数、每层存的份数和 batch。", want * 2),
        ("这是一层的：所有层都要存自己的 K 和 V。", want / EX4_LAYERS),
        (f"层数不对：题目的模型有 {EX4_LAYERS} 层。", want / EX4_LAYERS * tiny().num_layers),
        ("这是个数，不是字节：每个 float32 占 4 字节。", want / 4),
    ), "回到第 06 章第 7 节 KV cache 的计数（每层存什么、每个数几字节），"
       f"尺寸用 `baichuan.tiny(num_layers={EX4_LAYERS})`：{EX4_LAYERS} 层，其余是默认值。", rel=0.0)
    return check_number(answer, want, name="ch07.ex4", integer=True, rel=0, hint=hint)
