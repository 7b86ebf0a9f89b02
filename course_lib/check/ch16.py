"""Checkers for notebook 16 (your own model).

Expected values come from the same library functions the notebook uses."""
import numpy as np

from .common import Mismatch, check_number, exercise, hidden_rng, observe, run_code_check


def _qwen25_05b():
    from ..families import config_from_hf
    return config_from_hf({"model_type": "qwen2", "hidden_size": 896, "num_hidden_layers": 24,
                           "num_attention_heads": 14, "num_key_value_heads": 2,
                           "intermediate_size": 4864, "vocab_size": 151936,
                           "tie_word_embeddings": True, "max_position_embeddings": 32768,
                           "rope_theta": 1000000.0, "rms_norm_eps": 1e-6})


def _kv_bytes() -> int:
    from ..memory import kv_cache_bytes
    return kv_cache_bytes(_qwen25_05b(), batch=1, seq_len=1, dtype="bf16")


@exercise("number", "Qwen2.5-0.5B 以 bfloat16 生成时，每个 token 的 KV cache 占多少字节？",
          solution=_kv_bytes,
          question="Qwen2.5-0.5B（24 层，14 个 query 头、2 个 kv 头，head_dim 64）以 bfloat16 生成时，"
                   "每多一个 token，KV cache 增加多少字节？先手算，再想一想：如果它用普通的多头注意力"
                   "（14 个 kv 头），这个数会变成几倍？")
def kv_bytes_per_token(answer) -> bool:
    return check_number(answer, _kv_bytes(), name="ch16.kv_bytes_per_token", abs_=0.5,
                        hint="每层存 K 和 V 两份，每份是 kv 头数 x head_dim 个数，每个数 2 字节；"
                             "GQA 只为 2 个 kv 头存缓存，不是 14 个。")


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


@exercise("code", "写 unpack_wqkv(w, num_heads, num_kv_heads, head_dim)：InternLM2 按组打包的 wqkv -> q, k, v",
          solution=_reference, wrong=((lambda: _thirds, "按 kv 组"), (lambda: _k_v_swapped, "先 k 后 v")),
          targets=("course_lib.families.unpack_wqkv",),
          question="InternLM2 的 `wqkv` 不是 [Q | K | V] 三段，而是每个 kv 组一段：该组的 G 个 query 头、"
                   "1 个 k 头、1 个 v 头（G = num_heads / num_kv_heads）。在脚手架里写 "
                   "`unpack_wqkv(w, num_heads, num_kv_heads, head_dim)`，把 NumPy 的 `w`（行数 "
                   "(num_heads + 2·num_kv_heads)·head_dim）拆成 Llama 布局的 `q, k, v` 三个矩阵"
                   "（检查器在隐藏的 GQA / MQA 形状上逐个比对）。", cell="answers")
def unpack_wqkv(fn) -> bool:
    hint = ("w.reshape(num_kv_heads, G + 2, head_dim, -1)：每组前 G 个是 query 头，"
            "接着 1 个 k 头、1 个 v 头；按组把它们分别拼起来（按 kv 组的顺序）。")

    def body():
        rng = hidden_rng(161)
        for heads, kv, d, n in _hidden_layouts():
            w = rng.standard_normal(((heads + 2 * kv) * d, n)).astype(np.float32)
            got, want = fn(w, heads, kv, d), _reference()(w, heads, kv, d)
            if not isinstance(got, (tuple, list)) or len(got) != 3:
                raise Mismatch(f"要返回 (q, k, v) 三个矩阵，得到的是 {type(got).__name__}。{hint}")
            if np.array_equal(np.asarray(got[1]), want[2]) and np.array_equal(np.asarray(got[2]), want[1]):
                observe("k", np.asarray(got[1], np.float32), want[1])
                raise Mismatch(f"k 和 v 拿反了：每个 kv 组里先 k 后 v。{hint}")
            for part, g, e in zip("qkv", got, want):
                g = np.asarray(g, np.float32)
                observe(f"{heads} 个 query 头 / {kv} 个 kv 头的 {part}", g, e)
                if g.shape != e.shape or not np.array_equal(g, e):
                    raise Mismatch(f"{heads} 个 query 头、{kv} 个 kv 头、head_dim {d} 时 {part} 不对"
                                   f"（形状 {g.shape}，应为 {e.shape}）。{hint}")
    return run_code_check("ch16.unpack_wqkv", hint, body)
