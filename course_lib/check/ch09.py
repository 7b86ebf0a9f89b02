"""Checkers for notebook 09 (merge, MINDIR export, deployment)."""
import numpy as np

from .common import close, verdict


def ex1(merge_fn) -> bool:
    """Write ``merge(W, A, B, alpha, r) -> W'``: the weight of the plain Dense that computes
    exactly what LoRADense computes (W: (out, in), A: (r, in), B: (out, r))."""
    rng = np.random.default_rng(7)
    W = rng.standard_normal((6, 5))
    A = rng.standard_normal((2, 5))
    B = rng.standard_normal((6, 2))
    x = rng.standard_normal((3, 5))
    expected = x @ W.T + (x @ A.T @ B.T) * (4 / 2)       # what the LoRA layer computes
    try:
        merged = np.asarray(merge_fn(W, A, B, 4, 2), dtype=np.float64)
        ok = merged.shape == W.shape and np.allclose(x @ merged.T, expected, atol=1e-9)
    except Exception as err:  # a learner's function may fail in any way: say so
        print(f"调用出错：{type(err).__name__}: {err}")
        ok = False
    return verdict(ok, "W' = W + (B @ A) * alpha / r；注意矩阵乘法的顺序和形状 (out, in)。",
                   "ch09.ex1")


def ex2(answer) -> bool:
    """A MINDIR graph was exported for input shape (4, 48). How many dummy rows does the
    pipeline add when it scores 5 reviews (each review = 2 candidate rows)?"""
    rows = 5 * 2
    expected = (-rows) % 4
    return verdict(answer == expected,
                   "5 条评论 × 2 个候选答案 = 10 行，按 4 行一批切分，最后一批要补齐到 4 行。",
                   "ch09.ex2")


def ex3(answer) -> bool:
    """How many bytes do the adapter tensors (float32) of the zoo's sentiment LoRA take
    (r=8 on q_proj and v_proj of InternLM-tiny), without the file header?"""
    from ..internlm import tiny
    cfg = tiny()
    expected = 4 * cfg.num_layers * 2 * 8 * (cfg.hidden_size + cfg.hidden_size)
    return verdict(close(answer, expected, rel=0, abs_=0.5),
                   "每层 q_proj、v_proj 各有 A (8, 128) 和 B (128, 8)，每个 float32 占 4 字节。",
                   "ch09.ex3")
