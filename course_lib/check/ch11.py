"""Checkers for notebook 11 (mindnlp / Hugging Face interop).

They run inside the notebook's mindnlp kernel, so they use plain Python only: no course
model is executed here (mindnlp's patches would break it) and mindnlp is never imported.
"""
from .common import close, verdict


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def lora_trainable(hidden: int, layers: int, r: int, targets: int) -> int:
    """LoRA on square h x h projections: A (r x h) + B (h x r) per target per layer."""
    return layers * targets * r * (hidden + hidden)


def ex1(answer) -> bool:
    """LoRA r=8 on q_proj and v_proj of the notebook's tiny Llama (hidden 128, 2 layers):
    how many trainable parameters?"""
    expected = lora_trainable(128, 2, 8, 2)
    return verdict(_is_int(answer) and answer == expected,
                   "每个目标层加 A(r×h) 和 B(h×r) 两个矩阵：层数 × 目标数 × r × 2h。", "ch11.ex1")


def ex2(answer) -> bool:
    """Which ``LlamaConfig`` argument turns Llama into the InternLM-1 architecture?"""
    ok = isinstance(answer, str) and answer.replace(" ", "") in ("attention_bias", "attention_bias=True")
    return verdict(ok, "InternLM-1 与 Llama 唯一的结构差别：q/k/v/o 投影带偏置。", "ch11.ex2")


def ex3(answer) -> bool:
    """``LoraConfig(r=4, lora_alpha=8)``: by what factor is B·A·x scaled before it is added?"""
    return verdict(close(answer, 8 / 4) and not isinstance(answer, bool),
                   "LoRA 的输出乘以 lora_alpha / r。", "ch11.ex3")
