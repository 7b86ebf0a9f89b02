"""Checkers for notebook 05 (LLMTrainer)."""
import math

from .common import close, verdict


def ex1(answer) -> bool:
    """The evaluation loss is 4.0 nats per token: what perplexity does evaluate() report?"""
    return verdict(close(answer, math.exp(4.0), rel=1e-4),
                   "困惑度 = exp(每个 token 的平均负对数似然)。", "ch05.ex1")


def ex2(answer) -> bool:
    """How many parameters does finetune(trainable=lambda n: n.startswith("lm_head")) train
    on internlm.tiny()?"""
    from ..internlm import tiny
    cfg = tiny()
    expected = cfg.vocab_size * cfg.hidden_size          # untied head, no bias
    return verdict(answer == expected,
                   "lm_head 是 Dense(hidden_size, vocab_size, has_bias=False)：数一数它的权重。",
                   "ch05.ex2")


def ex3(answer) -> bool:
    """warmup_cosine_lr(1e-3, total_steps=100, warmup_steps=10): the lr of 0-based step 55."""
    progress = (55 - 10) / (100 - 10)
    expected = 1e-3 * 0.5 * (1 + math.cos(math.pi * progress))
    return verdict(close(answer, expected, rel=1e-6),
                   "预热结束后走余弦：progress = (i - warmup) / (total - warmup)。", "ch05.ex3")


def ex4(answer) -> bool:
    """Gradients with global norm 5.0 are clipped with clip=1.0: by which factor is every
    gradient multiplied?"""
    return verdict(close(answer, 1.0 / 5.0, rel=1e-6),
                   "全局范数裁剪把所有梯度乘以 clip / max(norm, clip)。", "ch05.ex4")
