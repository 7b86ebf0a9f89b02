RIGHT = {
    ("ch16.kv_bytes_per_token", "ch16.unpack_wqkv"): '''from course_lib.check import ch16


def unpack_wqkv(w, num_heads, num_kv_heads, head_dim):
    # w：二维 NumPy 数组，(num_heads + 2 * num_kv_heads) * head_dim 行；按 q、k、v 的顺序返回 Llama 布局的三个数组
    group = num_heads // num_kv_heads
    blocks = w.reshape(num_kv_heads, group + 2, head_dim, w.shape[1])
    q = blocks[:, :group].reshape(num_heads * head_dim, w.shape[1])
    k = blocks[:, group].reshape(num_kv_heads * head_dim, w.shape[1])
    v = blocks[:, group + 1].reshape(num_kv_heads * head_dim, w.shape[1])
    return q, k, v


layers, kv_heads, head_dim, bf16_bytes = 28, 2, 128, 2
ch16.kv_bytes_per_token(layers * 2 * kv_heads * head_dim * bf16_bytes)   # K and V in every layer
ch16.unpack_wqkv(unpack_wqkv)
''',
}

WRONG = {
    ("ch16.kv_bytes_per_token", "ch16.unpack_wqkv"): ('''from course_lib.check import ch16


def unpack_wqkv(w, num_heads, num_kv_heads, head_dim):
    # w：二维 NumPy 数组，(num_heads + 2 * num_kv_heads) * head_dim 行；按 q、k、v 的顺序返回 Llama 布局的三个数组
    q_rows, kv_rows = num_heads * head_dim, num_kv_heads * head_dim
    return w[:q_rows], w[q_rows:q_rows + kv_rows], w[q_rows + kv_rows:]


layers, kv_heads, head_dim, bf16_bytes = 28, 2, 128, 2
ch16.kv_bytes_per_token(layers * 2 * kv_heads * head_dim * bf16_bytes)   # K and V in every layer
ch16.unpack_wqkv(unpack_wqkv)
''', {"ch16.unpack_wqkv": "按 kv 组打包"}),
}
