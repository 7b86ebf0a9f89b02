"""Checkers for notebook 07 (pre-training the tiny Baichuan twin and generating text)."""
import math

from .common import close, verdict


def ex1(answer) -> bool:
    """Validation perplexity of a model whose mean token cross-entropy is 3.2 nats."""
    ok = close(answer, math.exp(3.2), rel=1e-4)
    return verdict(ok, "困惑度 = exp(平均交叉熵)，交叉熵以自然对数（nats）计。", "ch07.ex1")


PROBS = (0.42, 0.25, 0.15, 0.08, 0.06, 0.04)


def ex2(answer) -> bool:
    """Indices of PROBS that top-p (nucleus) sampling with p=0.8 keeps."""
    import numpy as np
    from ..generation import apply_top_p
    kept = np.flatnonzero(np.isfinite(apply_top_p(np.log(np.asarray([PROBS])), 0.8)[0]))
    ok = isinstance(answer, (list, tuple, set)) and sorted(int(i) for i in answer) == kept.tolist()
    return verdict(ok, "从概率最大的词开始累加，直到累计概率第一次达到 p；这些词都保留（至少保留一个）。",
                   "ch07.ex2")


def ex3(answer) -> bool:
    """Logits [2.0, -1.0] of two tokens already in the text after repetition penalty 1.25."""
    ok = isinstance(answer, (list, tuple)) and close(list(answer), [2.0 / 1.25, -1.0 * 1.25], rel=1e-6)
    return verdict(ok, "正的 logit 除以惩罚系数，负的 logit 乘以惩罚系数——两者都让这个词更不可能。", "ch07.ex3")


def ex4(answer) -> bool:
    """Bytes of the float32 KV cache of baichuan.tiny() after 256 tokens, batch 1."""
    from ..baichuan import tiny
    from ..memory import kv_cache_bytes
    ok = isinstance(answer, int) and answer == kv_cache_bytes(tiny(), 1, 256, "fp32")
    return verdict(ok, "每层存 K 和 V，各为 (batch, heads, seq, head_dim) 个 float32（4 字节）。",
                   "ch07.ex4")
