"""Checkers for notebook 12 (dynamic batching, static decode step, MINDIR deployment)."""
from .common import close, verdict


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def ex1(answer) -> bool:
    """10 requests at t=0, each generating exactly 5 tokens (no EOS), max_batch=4: how many
    forward passes (prefills + decode steps) does ``inference.serve`` make?"""
    import course_lib as cl
    from ..baichuan import BaichuanForCausalLM, tiny
    from ..inference import make_requests, serve
    cl.seed_everything(0)
    model = BaichuanForCausalLM(tiny(vocab_size=64, hidden_size=16, num_layers=1, num_heads=2,
                                     intermediate_size=32, max_seq_len=32))
    report = serve(model, make_requests([[3, 4, 5]] * 10, 5), max_batch=4)
    expected = len(report.passes)
    return verdict(_is_int(answer) and answer == expected,
                   "每组请求：1 次 prefill 给出第 1 个 token，再做 4 步解码；10 个请求分成 4+4+2 三组。",
                   "ch12.ex1")


def ex2(answer) -> bool:
    """KV cache of InternLM-7B (32 layers, hidden 4096), fp16, 8 sequences of 2048 tokens, in GiB."""
    from ..internlm import internlm_7b
    from ..memory import GiB, kv_cache_bytes
    expected = kv_cache_bytes(internlm_7b(), 8, 2048, "fp16") / GiB
    ok = not isinstance(answer, bool) and close(answer, expected, rel=0, abs_=0.01)
    return verdict(ok, "K 和 V 两份 × 层数 × batch × 序列长 × hidden × 2 字节，再除以 2**30。", "ch12.ex2")


def ex3(answer) -> bool:
    """The attention-mask row of the second prompt after left-padding [[5, 6, 7], [8]]."""
    from ..generation import left_pad
    expected = left_pad([[5, 6, 7], [8]])[1][1].tolist()
    ok = isinstance(answer, (list, tuple)) and [int(a) for a in answer] == expected \
        and all(not isinstance(a, bool) for a in answer)
    return verdict(ok, "左填充：填充在左边、真实 token 靠右；mask 中真实 token 为 1。", "ch12.ex3")
