RIGHT = {
    "ch01.residual_ffn": '''from course_lib.check import ch01, show_solution


class MyResidualFFN(nn.Cell):
    def __init__(self, embed_dim, ffn_dim):
        super().__init__()
        self.norm = nn.LayerNorm((embed_dim,), epsilon=1e-5)
        self.fc1 = nn.Dense(embed_dim, ffn_dim)
        self.act = nn.GELU(approximate=False)
        self.fc2 = nn.Dense(ffn_dim, embed_dim)

    def construct(self, x):
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


ch01.residual_ffn(MyResidualFFN)
''',
    "ch01.prenorm_block": '''class MyDecoderBlock(nn.Cell):
    def __init__(self, embed_dim, num_heads, ffn_dim, kv_dim):
        super().__init__()
        self.self_attn = blocks.SelfAttention(embed_dim, num_heads)
        self.cross_attn = blocks.CrossAttention(embed_dim, num_heads, kv_dim)
        self.ffn = blocks.FeedForward(embed_dim, ffn_dim)
        self.self_norm = nn.LayerNorm((embed_dim,), epsilon=1e-5)
        self.cross_norm = nn.LayerNorm((embed_dim,), epsilon=1e-5)
        self.ffn_norm = nn.LayerNorm((embed_dim,), epsilon=1e-5)

    def construct(self, x, context, context_padding_mask=None):
        mask = blocks.causal_mask(x.shape[1])
        x = x + self.self_attn(self.self_norm(x), None, mask)
        x = x + self.cross_attn(self.cross_norm(x), context, context_padding_mask)
        x = x + self.ffn(self.ffn_norm(x))
        return x


ch01.prenorm_block(MyDecoderBlock)
''',
    ("ch01.ex1", "ch01.ex2", "ch01.ex3"): '''E, F = 32, 128
ch01.ex1((4 * E * E + 4 * E) + (2 * E * F + F + E) + 4 * E)
ch01.ex2((10, 4, 6))
frozen = blocks.TransformerBlock(32, 4, 128)
for p in frozen.attn.get_parameters():
    p.requires_grad = False
ch01.ex3(blocks.count_parameters(frozen, trainable_only=True))
''',
}

WRONG = {
    "ch01.residual_ffn": ('''from course_lib.check import ch01, show_solution


class MyResidualFFN(nn.Cell):
    def __init__(self, embed_dim, ffn_dim):
        super().__init__()
        self.norm = nn.LayerNorm((embed_dim,), epsilon=1e-5)
        self.fc1 = nn.Dense(embed_dim, ffn_dim)
        self.act = nn.GELU(approximate=False)
        self.fc2 = nn.Dense(ffn_dim, embed_dim)

    def construct(self, x):
        h = self.norm(x)
        return h + self.fc2(self.act(self.fc1(h)))


ch01.residual_ffn(MyResidualFFN)
''', {"ch01.residual_ffn": "先归一化哪一路"}),
    "ch01.prenorm_block": ('''class MyDecoderBlock(nn.Cell):
    def __init__(self, embed_dim, num_heads, ffn_dim, kv_dim):
        super().__init__()
        self.self_attn = blocks.SelfAttention(embed_dim, num_heads)
        self.cross_attn = blocks.CrossAttention(embed_dim, num_heads, kv_dim)
        self.ffn = blocks.FeedForward(embed_dim, ffn_dim)
        self.self_norm = nn.LayerNorm((embed_dim,), epsilon=1e-5)
        self.cross_norm = nn.LayerNorm((embed_dim,), epsilon=1e-5)
        self.ffn_norm = nn.LayerNorm((embed_dim,), epsilon=1e-5)

    def construct(self, x, context, context_padding_mask=None):
        x = x + self.self_attn(self.self_norm(x))
        x = x + self.cross_attn(self.cross_norm(x), context, context_padding_mask)
        x = x + self.ffn(self.ffn_norm(x))
        return x


ch01.prenorm_block(MyDecoderBlock)
''', {"ch01.prenorm_block": "因果掩码"}),
    ("ch01.ex1", "ch01.ex2", "ch01.ex3"): ('''E, F = 32, 128
ch01.ex1((4 * E * E + 4 * E) + (2 * E * F + F + E) + 4 * E)
ch01.ex2((4, 10, 10))
frozen = blocks.TransformerBlock(32, 4, 128)
for p in frozen.attn.get_parameters():
    p.requires_grad = False
ch01.ex3(blocks.count_parameters(frozen, trainable_only=True))
''', {"ch01.ex2": "默认设置下第 0 维"}),
}
