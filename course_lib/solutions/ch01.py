"""Chapter 01 reference solutions: a residual feed-forward Cell and a pre-norm decoder block."""
from mindspore import nn

from ..blocks import CrossAttention, FeedForward, SelfAttention, causal_mask


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


class DecoderBlock(nn.Cell):
    """Pre-norm decoder block: causal self-attention, cross-attention to ``context`` (its
    padding masked), feed-forward; each sub-layer is ``x + sublayer(norm(x))``."""

    def __init__(self, embed_dim, num_heads, ffn_dim, kv_dim):
        super().__init__()
        self.self_attn = SelfAttention(embed_dim, num_heads)
        self.cross_attn = CrossAttention(embed_dim, num_heads, kv_dim)
        self.ffn = FeedForward(embed_dim, ffn_dim)
        self.self_norm = nn.LayerNorm((embed_dim,), epsilon=1e-5)
        self.cross_norm = nn.LayerNorm((embed_dim,), epsilon=1e-5)
        self.ffn_norm = nn.LayerNorm((embed_dim,), epsilon=1e-5)

    def construct(self, x, context, context_padding_mask=None):
        causal = causal_mask(x.shape[1])                # position i sees 0..i only
        x = x + self.self_attn(self.self_norm(x), None, causal)
        x = x + self.cross_attn(self.cross_norm(x), context, context_padding_mask)
        return x + self.ffn(self.ffn_norm(x))


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


class wrong_decoder_not_causal(DecoderBlock):
    def construct(self, x, context, context_padding_mask=None):
        x = x + self.self_attn(self.self_norm(x))
        x = x + self.cross_attn(self.cross_norm(x), context, context_padding_mask)
        return x + self.ffn(self.ffn_norm(x))


class wrong_decoder_mask_dropped(DecoderBlock):
    def construct(self, x, context, context_padding_mask=None):
        x = x + self.self_attn(self.self_norm(x), None, causal_mask(x.shape[1]))
        x = x + self.cross_attn(self.cross_norm(x), context)
        return x + self.ffn(self.ffn_norm(x))


class wrong_decoder_post_norm(DecoderBlock):
    def construct(self, x, context, context_padding_mask=None):
        x = self.self_norm(x + self.self_attn(x, None, causal_mask(x.shape[1])))
        x = self.cross_norm(x + self.cross_attn(x, context, context_padding_mask))
        return self.ffn_norm(x + self.ffn(x))


class wrong_decoder_one_norm(DecoderBlock):
    def construct(self, x, context, context_padding_mask=None):
        x = x + self.self_attn(self.self_norm(x), None, causal_mask(x.shape[1]))
        x = x + self.cross_attn(self.self_norm(x), context, context_padding_mask)
        return x + self.ffn(self.self_norm(x))
