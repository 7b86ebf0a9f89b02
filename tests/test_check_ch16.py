"""ch16 checkers accept the reference answers and reject wrong ones (with their hint)."""
import numpy as np

from course_lib.check import ch16
from course_lib.families import unpack_wqkv


def test_kv_bytes_per_token_is_the_gqa_count():
    assert ch16._kv_bytes() == 2 * 28 * 2 * 128 * 2 == 28_672      # K and V, 28 layers, 2 kv heads of 128
    assert ch16.kv_bytes_per_token(28672)
    assert not ch16.kv_bytes_per_token(2 * 28 * 12 * 128 * 2)    # MHA: every query head cached
    assert not ch16.kv_bytes_per_token(2 * 24 * 2 * 64 * 2)      # Qwen2.5-0.5B, the chapter's own model
    assert not ch16.kv_bytes_per_token("lots")


def test_unpack_wqkv_reference_and_wrong_variants():
    w = np.arange(40 * 2, dtype=np.float32).reshape(40, 2)     # 2 groups of (2 q, k, v) x head_dim 5
    q, k, v = unpack_wqkv(w, num_heads=4, num_kv_heads=2, head_dim=5)
    assert (q.shape, k.shape, v.shape) == ((20, 2), (10, 2), (10, 2))
    assert np.array_equal(k[:5], w[10:15]) and np.array_equal(v[5:], w[35:40])   # group 1's k, v
    assert ch16.unpack_wqkv(unpack_wqkv)
    assert not ch16.unpack_wqkv(ch16._thirds)
    assert not ch16.unpack_wqkv(ch16._k_v_swapped)


def test_unpack_hints_point_to_rows_not_to_the_reshape(capsys):
    assert not ch16.unpack_wqkv(ch16._thirds)
    out = capsys.readouterr().out
    assert "[Q | K | V] 三段" in out and "reshape" not in out and "G + 2" not in out
    assert not ch16.kv_bytes_per_token(0)
    out = capsys.readouterr().out
    assert "12288" not in out and "12,288" not in out and "x head_dim" not in out


def test_unpack_hints_name_the_wrong_row_not_the_right_one(capsys):
    def q_rows_reversed(w, num_heads, num_kv_heads, head_dim):
        q, k, v = unpack_wqkv(w, num_heads, num_kv_heads, head_dim)
        return q[::-1], k, v

    assert not ch16.unpack_wqkv(q_rows_reversed)
    out = capsys.readouterr().out
    assert "q 的第 0 行" in out and "不是它该取的那一行" in out and "应取自" not in out
