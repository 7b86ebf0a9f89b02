"""Checkers for notebook 08 (InternLM + LoRA)."""
from .common import close, verdict


def _lora_params(config, r: int, projections: int) -> int:
    """r·(in + out) per adapted square projection, ``projections`` of them per layer."""
    h = config.hidden_size
    return config.num_layers * projections * r * (h + h)


def ex1(answer) -> bool:
    """How many trainable parameters does LoRA r=4 on q_proj, k_proj, v_proj and o_proj
    add to InternLM-tiny (course_lib.internlm.tiny())?"""
    from ..internlm import tiny
    expected = _lora_params(tiny(), r=4, projections=4)
    return verdict(answer == expected,
                   "每个被适配的 Dense(in, out) 增加 r·(in + out) 个参数；数一数层数 × 投影个数。",
                   "ch08.ex1")


def ex2(answer) -> bool:
    """Trainable fraction, in percent, of LoRA r=8 on q_proj and v_proj at the
    InternLM-7B preset's shapes (adapter parameters / base parameters × 100)."""
    from ..internlm import internlm_7b
    cfg = internlm_7b()
    expected = 100 * _lora_params(cfg, r=8, projections=2) / cfg.num_parameters()
    return verdict(close(answer, expected, rel=1e-3),
                   "分子：32 层 × 2 个投影 × 8 × (4096 + 4096)；分母：internlm_7b().num_parameters()。"
                   "别忘了乘 100。", "ch08.ex2")


def ex3(answer) -> bool:
    """How many label positions are NOT IGNORE_INDEX in the SFT example of a negative
    review (answer 负面) — i.e. how many tokens does the loss learn per example?"""
    from ..tokenizer import load_tokenizer
    expected = len(load_tokenizer().encode("负面")) + 1          # answer tokens + <|end|>
    return verdict(answer == expected,
                   "提示词的标签都是 -100；只剩答案的 token 和结尾的 <|end|>。", "ch08.ex3")


def ex4(answer) -> bool:
    """Training state of LoRA (r=8 on q_proj, v_proj) for the InternLM-7B preset, mixed
    precision, in GiB (weights + gradients + master weights + AdamW states; no activations),
    computed with course_lib.memory.training_state_bytes."""
    from ..internlm import internlm_7b
    from ..memory import GiB, training_state_bytes
    cfg = internlm_7b()
    lora = _lora_params(cfg, r=8, projections=2)
    expected = training_state_bytes(trainable=lora, frozen=cfg.num_parameters()).total / GiB
    return verdict(close(answer, expected, rel=0.01),
                   "training_state_bytes(trainable=适配器参数, frozen=基座参数).total / GiB；"
                   "冻结的权重仍要占显存。", "ch08.ex4")
