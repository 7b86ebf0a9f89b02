"""Chapter 01 reference solutions: a residual feed-forward Cell and a pre-norm block."""
from mindspore import nn

from ..blocks import FeedForward, SelfAttention


class ResidualFFN(nn.Cell):
    """x + fc2(GELU(fc1(LayerNorm(x)))): the feed-forward half of a pre-norm block."""

    def __init__(self, embed_dim, ffn_dim):
        super().__init__()
        self.norm = nn.LayerNorm((embed_dim,), epsilon=1e-5)
        self.fc1 = nn.Dense(embed_dim, ffn_dim)
        self.act = nn.GELU(approximate=False)
        self.fc2 = nn.Dense(ffn_dim, embed_dim)

    def construct(self, x):
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


class PreNormBlock(nn.Cell):
    """Pre-norm Transformer block from the course's blocks: x + attn(norm1(x)), then + ffn(norm2(x))."""

    def __init__(self, embed_dim, num_heads, ffn_dim):
        super().__init__()
        self.attn = SelfAttention(embed_dim, num_heads)
        self.ffn = FeedForward(embed_dim, ffn_dim)
        self.norm1 = nn.LayerNorm((embed_dim,), epsilon=1e-5)
        self.norm2 = nn.LayerNorm((embed_dim,), epsilon=1e-5)

    def construct(self, x, key_padding_mask=None, attn_mask=None):
        x = x + self.attn(self.norm1(x), key_padding_mask, attn_mask)
        return x + self.ffn(self.norm2(x))


# ---------------------------------------------------------------- realistic wrong solutions
class wrong_ffn_no_residual(ResidualFFN):
    def construct(self, x):
        return self.fc2(self.act(self.fc1(self.norm(x))))


class wrong_ffn_post_norm(ResidualFFN):
    def construct(self, x):
        return self.norm(x + self.fc2(self.act(self.fc1(x))))


class wrong_ffn_relu(ResidualFFN):
    def construct(self, x):
        return x + self.fc2(nn.ReLU()(self.fc1(self.norm(x))))


class wrong_block_post_norm(PreNormBlock):
    def construct(self, x, key_padding_mask=None, attn_mask=None):
        x = self.norm1(x + self.attn(x, key_padding_mask, attn_mask))
        return self.norm2(x + self.ffn(x))


class wrong_block_mask_dropped(PreNormBlock):
    def construct(self, x, key_padding_mask=None, attn_mask=None):
        x = x + self.attn(self.norm1(x))
        return x + self.ffn(self.norm2(x))


class wrong_block_one_norm(PreNormBlock):
    def construct(self, x, key_padding_mask=None, attn_mask=None):
        x = x + self.attn(self.norm1(x), key_padding_mask, attn_mask)
        return x + self.ffn(self.norm1(x))
