import numpy as np
from mindspore import nn, ops

from course_lib.check import ch01
from judging import verdicts as _verdicts


def test_ch01_number_checkers(capsys):
    E, F = 32, 128
    attention = 4 * E * E + 4 * E
    total = attention + (2 * E * F + F + E) + 2 * 2 * E           # closed form, by hand
    assert ch01.ex1(total) and ch01.ex1(np.int64(total)) and ch01.ex1(float(total))
    assert not ch01.ex1(total - 4 * E)                           # forgot the LayerNorms
    assert not ch01.ex1(total + 0.5) and not ch01.ex1(None)
    assert ch01.ex2((10, 4, 6)) and ch01.ex2(np.array([10, 4, 6]))  # (N, L, S) with L=4, S=6, N=10
    assert not ch01.ex2((10, 6, 4)) and not ch01.ex2((10, 4, 4))  # L and S swapped, or one length
    assert not ch01.ex2((4, 10, 10))                             # the batch-first reading
    assert not ch01.ex2("(10, 4, 6)")
    assert ch01.ex3(total - attention)
    assert not ch01.ex3(total)
    out = capsys.readouterr().out
    assert "✅" in out and "❌" in out and "提示" in out


class _Scaffold(nn.Cell):
    def __init__(self, *args):
        super().__init__()
        raise NotImplementedError


class _MyFFN(nn.Cell):
    """A learner's version written independently of course_lib.solutions."""

    def __init__(self, embed_dim, ffn_dim):
        super().__init__()
        self.norm = nn.LayerNorm((embed_dim,), epsilon=1e-5)
        self.fc1, self.fc2 = nn.Dense(embed_dim, ffn_dim), nn.Dense(ffn_dim, embed_dim)

    def construct(self, x):
        h = self.fc1(self.norm(x))
        return self.fc2(0.5 * h * (1 + ops.erf(h / 2 ** 0.5))) + x      # exact GELU by its formula


def test_code_checkers_accept_independent_code_and_report_scaffolds(capsys):
    assert ch01.residual_ffn(_MyFFN)
    assert not ch01.residual_ffn(_Scaffold) and not ch01.prenorm_block(_Scaffold)
    out = capsys.readouterr().out
    assert out.count("还没有实现") == 2


class _MyFFNOtherOrder(nn.Cell):
    """Correct, but registers its parameters in another order than the reference."""

    def __init__(self, embed_dim, ffn_dim):
        super().__init__()
        self.fc2 = nn.Dense(ffn_dim, embed_dim)
        self.fc1 = nn.Dense(embed_dim, ffn_dim)
        self.norm = nn.LayerNorm((embed_dim,), epsilon=1e-5)
        self.act = nn.GELU(approximate=False)

    def construct(self, x):
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


class _MyDecoderOtherOrder(nn.Cell):
    """A learner's decoder block: parameters registered in another order, the causal mask
    built by hand, the sub-layers written out one by one."""

    def __init__(self, embed_dim, num_heads, ffn_dim, kv_dim):
        super().__init__()
        from course_lib.blocks import CrossAttention, FeedForward, SelfAttention
        self.ffn_norm = nn.LayerNorm((embed_dim,), epsilon=1e-5)
        self.ffn = FeedForward(embed_dim, ffn_dim)
        self.cross_norm = nn.LayerNorm((embed_dim,), epsilon=1e-5)
        self.cross_attn = CrossAttention(embed_dim, num_heads, kv_dim)
        self.self_norm = nn.LayerNorm((embed_dim,), epsilon=1e-5)
        self.self_attn = SelfAttention(embed_dim, num_heads)

    def construct(self, x, context, context_padding_mask=None):
        import mindspore as ms
        t = x.shape[1]
        future = ms.Tensor(np.arange(t)[None, :] > np.arange(t)[:, None])
        h = self.self_norm(x)
        x = x + self.self_attn(h, attn_mask=future)
        x = x + self.cross_attn(self.cross_norm(x), context, key_padding_mask=context_padding_mask)
        return x + self.ffn(self.ffn_norm(x))


def test_the_judge_passes_correct_cells_whatever_their_parameter_order():
    from course_lib.solutions import ch01 as sol
    assert _verdicts(ch01.residual_ffn, sol.ResidualFFN, _MyFFN, _MyFFNOtherOrder,
                     sol.wrong_ffn_relu) == ["pass", "pass", "fail"]
    assert _verdicts(ch01.prenorm_block, sol.DecoderBlock, _MyDecoderOtherOrder,
                     sol.wrong_decoder_not_causal, sol.wrong_decoder_mask_dropped) == ["pass", "fail", "fail"]


def test_the_decoder_block_checker_accepts_independent_code_and_names_the_bug(capsys):
    from course_lib.solutions import ch01 as sol
    assert ch01.prenorm_block(_MyDecoderOtherOrder)
    assert not ch01.prenorm_block(sol.wrong_decoder_not_causal)
    assert not ch01.prenorm_block(sol.wrong_decoder_mask_dropped)
    out = capsys.readouterr().out
    assert "因果掩码" in out and "填充掩码没有交到交叉注意力" in out


def test_number_hints_name_the_wrong_path_not_the_formula(capsys):
    E, F = 32, 128
    total = 4 * E * E + 4 * E + (2 * E * F + F + E) + 4 * E
    assert not ch01.ex1(4 * E * E + 2 * E * F)                  # weights only
    assert not ch01.ex2((4, 10, 10))                             # read as batch-first
    assert not ch01.ex3(total)                                   # nothing frozen
    out = capsys.readouterr().out
    assert "只数了权重矩阵" in out and "batch_first=True" in out and "trainable_params()" in out
    for formula in ("4E²", "2EF", "(N, L, S)", "L=4"):
        assert formula not in out
