"""Checkers for notebook 16 (your own model).

Expected values come from the same library functions the notebook uses."""
import numpy as np

from .common import Mismatch, check_number, exercise, hidden_rng, observe, run_code_check


def _r1_distill_15b():
    """DeepSeek-R1-Distill-Qwen-1.5B's layout (its config.json, as ``realsize.SIZES`` keeps it)."""
    from ..families import config_from_hf
    from ..realsize import SIZES
    return config_from_hf({"model_type": "qwen2", "vocab_size": 151936, "rms_norm_eps": 1e-6,
                           **SIZES["1.5b"]})


def _kv_bytes() -> int:
    from ..memory import kv_cache_bytes
    return kv_cache_bytes(_r1_distill_15b(), batch=1, seq_len=1, dtype="bf16")


@exercise("number", "DeepSeek-R1-Distill-Qwen-1.5B 以 bfloat16 生成时，每个 token 的 KV cache 占多少字节？",
          solution=_kv_bytes,
          question="DeepSeek-R1-Distill-Qwen-1.5B（Qwen2 结构：28 层，12 个 query 头、2 个 kv 头，head_dim 128；"
                   "[它的 config.json](https://huggingface.co/deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B/blob/main/config.json)）"
                   "以 bfloat16 生成时，每多一个 token，KV cache 增加多少字节（一个整数）？用题目里的数手算。"
                   "第 06 章第 7 节的 KV cache 公式写的是多头注意力，GQA 的模型要想想每层的 K、V 各有多宽；"
                   "不要调用 `memory.kv_cache_bytes` 或 `memory.load_plan`（它的计划里有 KV cache 一项）：成绩册把用它们得到的答案记为“借用”。",
          targets=("course_lib.memory.kv_cache_bytes", "course_lib.memory.load_plan"))
def kv_bytes_per_token(answer) -> bool:
    return check_number(answer, _kv_bytes(), name="ch16.kv_bytes_per_token", abs_=0.5,
                        hint="回到 KV cache 缓存的是什么（第 06 章第 7 节）：每一层、每个 token 存哪些向量？"
                             "GQA 的模型按哪一种头存（题目里给了两种头的个数）？bfloat16 每个数几个字节？")


def _reference():
    from ..families import unpack_wqkv
    return unpack_wqkv


def _thirds(w, num_heads, num_kv_heads, head_dim):            # the [Q | K | V] assumption
    q = num_heads * head_dim
    kv = num_kv_heads * head_dim
    return w[:q], w[q:q + kv], w[q + kv:]


def _k_v_swapped(w, num_heads, num_kv_heads, head_dim):
    q, k, v = _reference()(w, num_heads, num_kv_heads, head_dim)
    return q, v, k


def _hidden_layouts() -> list:
    rng = hidden_rng(160)
    layouts = [(4, 2, 3, 5), (8, 1, 2, 3)]                  # GQA, MQA
    kv = int(rng.integers(1, 4))
    layouts.append((kv * int(rng.integers(2, 4)), kv, 2 * int(rng.integers(1, 3)), int(rng.integers(2, 6))))
    return layouts


def _row_sources(part, w) -> list:
    """For each row of ``part``: the index of the equal row of ``w`` (None if none)."""
    index = {w[i].tobytes(): i for i in range(len(w))}
    return [index.get(np.ascontiguousarray(r, dtype=w.dtype).tobytes()) for r in part]


def _wqkv_bug(got, want, w, heads, kv, d, part) -> str:
    """Where the learner's rows come from, against where they should (never the reshape)."""
    third = _thirds(w, heads, kv, d)["qkv".index(part)]
    if third.shape == got.shape and np.array_equal(got, third):
        return (f"你的 {part} 是把 w 按 [Q | K | V] 三段切开得到的；题目说 InternLM2 的 wqkv 按 kv 组打包，"
                "每组是一段。")
    if got.ndim != 2 or got.shape[1:] != want.shape[1:]:
        return ""
    came, should = _row_sources(got, w), _row_sources(want, w)
    for row, (c, s) in enumerate(zip(came, should)):
        if c != s:
            src = "w 里没有这样的行" if c is None else f"取自 w 的第 {c} 行"
            return (f"{part} 的第 {row} 行（第 {row // d} 个头的第 {row % d} 行）{src}，不是它该取的那一行："
                    f"这个头属于哪个 kv 组？那个组在 w 里从哪一行开始，组里先放什么、后放什么？")
    return ""


@exercise("code", "写 unpack_wqkv(w, num_heads, num_kv_heads, head_dim)：InternLM2 按组打包的 wqkv -> q, k, v",
          solution=_reference, wrong=((lambda: _thirds, "[Q | K | V] 三段"), (lambda: _k_v_swapped, "k 和 v 拿反了")),
          targets=("course_lib.families.unpack_wqkv",),
          question="InternLM2 的 `wqkv` 不是 [Q | K | V] 三段，而是每个 kv 组一段：该组的 G 个 query 头、"
                   "1 个 k 头、1 个 v 头（G = num_heads / num_kv_heads），每个头 head_dim 行。在脚手架里写 "
                   "`unpack_wqkv(w, num_heads, num_kv_heads, head_dim)`，把 NumPy 的 `w`（行数 "
                   "(num_heads + 2·num_kv_heads)·head_dim，列数任意）拆成 Llama 布局的三个矩阵，按 q、k、v 的顺序"
                   "返回：q 有 num_heads·head_dim 行、k 和 v 各有 num_kv_heads·head_dim 行，都按头的顺序排列，"
                   "列数与 `w` 相同（检查器在隐藏的 GQA / MQA 形状上逐行比对）。"
                   "不要调用 `families.unpack_wqkv`：课程加载 InternLM2 时用的就是它，成绩册把用到它的答案记为“借用”。",
          cell="answers")
def unpack_wqkv(fn) -> bool:
    hint = "对照题目核对输入和返回值：w 是一个二维 NumPy 数组，返回三个二维数组（q、k、v）。"

    def body():
        rng = hidden_rng(161)
        for heads, kv, d, n in _hidden_layouts():
            w = rng.standard_normal(((heads + 2 * kv) * d, n)).astype(np.float32)
            got, want = fn(w, heads, kv, d), _reference()(w, heads, kv, d)
            if not isinstance(got, (tuple, list)) or len(got) != 3:
                observe("返回值的项数", len(got) if isinstance(got, (tuple, list)) else None, 3)
                raise Mismatch(f"要返回三个矩阵（q、k、v），得到的是 {type(got).__name__}。")
            if np.array_equal(np.asarray(got[1]), want[2]) and np.array_equal(np.asarray(got[2]), want[1]):
                observe("k", np.asarray(got[1], np.float32), want[1])
                raise Mismatch("k 和 v 拿反了：你的 k 是应有的 v，你的 v 是应有的 k（题目里每个 kv 组内头的顺序）。")
            for part, g, e in zip("qkv", got, want):
                g = np.asarray(g, np.float32)
                observe(f"{heads} 个 query 头 / {kv} 个 kv 头的 {part}", g, e)
                if g.shape != e.shape or not np.array_equal(g, e):
                    shape = f"（形状 {g.shape}，应为 {e.shape}）" if g.shape != e.shape else "（形状对，数值不对）"
                    raise Mismatch(f"{heads} 个 query 头、{kv} 个 kv 头、head_dim {d} 时 {part} 不对"
                                   f"{shape}。" + _wqkv_bug(g, e, w, heads, kv, d, part))
    return run_code_check("ch16.unpack_wqkv", hint, body)
