RIGHT = {
    "ch06.rms_norm": '''from mindspore import Parameter, nn, ops
from course_lib.check import ch06, show_solution


class MyRMSNorm(nn.Cell):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = Parameter(Tensor(np.ones(hidden_size, np.float32)), name="weight")

    def construct(self, x):
        dtype = x.dtype
        x32 = x.astype(ms.float32)
        variance = (x32 * x32).mean(-1, keep_dims=True)
        y = x32 / ops.sqrt(variance + self.eps) * self.weight
        return y.astype(dtype)


ch06.rms_norm(MyRMSNorm)
# show_solution("ch06.rms_norm")   # 自己试过之后再看
''',
    "ch06.decoder_layer": '''from course_lib import layers


class MyDecoderLayer(nn.Cell):
    def __init__(self, config):
        super().__init__()
        c = config
        self.self_attn = layers.Attention(c.hidden_size, c.num_heads, fused_qkv=c.fused_qkv,
                                          qkv_bias=c.qkv_bias, o_bias=c.o_bias, std=c.init_std)
        self.mlp = layers.SwiGLU(c.hidden_size, c.intermediate_size, std=c.init_std)
        self.input_layernorm = layers.RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = layers.RMSNorm(c.hidden_size, c.rms_norm_eps)

    def construct(self, x, bias, cos=None, sin=None, cache=None, layer_idx=0):
        x = x + self.self_attn(self.input_layernorm(x), bias, cos, sin, cache, layer_idx)
        return x + self.mlp(self.post_attention_layernorm(x))


ch06.decoder_layer(MyDecoderLayer)
# show_solution("ch06.decoder_layer")
''',
    "ch06.alibi_slopes": '''def my_alibi_slopes(num_heads):
    def power_of_two_slopes(n):
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    c = 2 ** math.floor(math.log2(num_heads))
    if c == num_heads:
        return power_of_two_slopes(num_heads)
    return power_of_two_slopes(c) + power_of_two_slopes(2 * c)[0::2][:num_heads - c]


ch06.alibi_slopes(my_alibi_slopes)
# show_solution("ch06.alibi_slopes")
''',
    "ch06.attention_bias": '''import numpy as np


def my_attention_bias(query_len, key_len, attention_mask=None, slopes=None):
    # attention_mask: None 或 (batch, key_len) 的 0/1 数组；slopes: None 或长度为 heads 的列表
    past = key_len - query_len                       # the T queries are the last T of S tokens
    query_index = past + np.arange(query_len)[:, None]
    key_index = np.arange(key_len)[None, :]
    allowed = (key_index <= query_index)[None, None]  # (1, 1, T, S)
    if attention_mask is None:
        positions = np.arange(key_len)[None]          # (1, S)
    else:
        mask = np.asarray(attention_mask).astype(bool)
        allowed = allowed & mask[:, None, None, :]
        positions = np.cumsum(mask, axis=-1) - 1      # real tokens only: the first is 0
    bias = np.where(allowed, 0.0, -1e4)
    if slopes is not None:
        distance = positions[:, None, None, :] - positions[:, past:][:, None, :, None]
        bias = bias + np.asarray(slopes, np.float32)[None, :, None, None] * distance
    return bias.astype(np.float32)


ch06.attention_bias(my_attention_bias)
# show_solution("ch06.attention_bias")
''',
    ("ch06.ex1", "ch06.ex2", "ch06.ex3", "ch06.ex4"): '''from course_lib.check import ch06

# 1: 112 heads -> c = 64: m_h = 2^(-8(h+1)/64) for h < 64; then every other slope of 128 heads,
#    2^(-8(2j+1)/128) for the j-th extra head
ch06.ex1([2 ** -0.125, 2 ** -8, 2 ** -0.0625, 2 ** -(8 * 95 / 128)])
# 2: larger vocabulary (two tables) and 4 biases of width h per layer
cfg_i7 = internlm.internlm_7b()
ch06.ex2([2 * (cfg_i7.vocab_size - cfg7.vocab_size) * cfg7.hidden_size,
          cfg_i7.num_layers * 4 * cfg_i7.hidden_size])
# 3: int8 weights, 1 byte each; the rest holds fp16 K and V of every layer
free = 24 * GiB - cfg13.num_parameters() * 1
ch06.ex3(free // (cfg13.num_layers * 2 * cfg13.hidden_size * 2))
# 4: the smallest dp that fits 90 % of a 16 GiB device
dp = 1
while not memory.plan(cfg13, 0.9 * 16, memory.Layout(dp=dp, tp=8, zero=1, recompute=True, seq_len=4096)).fits:
    dp += 1
ch06.ex4(dp * 8)
''',
}

WRONG = {
    "ch06.rms_norm": ('''from mindspore import Parameter, nn, ops
from course_lib.check import ch06, show_solution


class MyRMSNorm(nn.Cell):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = Parameter(Tensor(np.ones(hidden_size, np.float32)), name="weight")

    def construct(self, x):
        dtype = x.dtype
        x32 = x.astype(ms.float32)
        x32 = x32 - x32.mean(-1, keep_dims=True)
        variance = (x32 * x32).mean(-1, keep_dims=True)
        y = x32 / ops.sqrt(variance + self.eps) * self.weight
        return y.astype(dtype)


ch06.rms_norm(MyRMSNorm)
# show_solution("ch06.rms_norm")   # 自己试过之后再看
''', {"ch06.rms_norm": "均值"}),
    "ch06.decoder_layer": ('''from course_lib import layers


class MyDecoderLayer(nn.Cell):
    def __init__(self, config):
        super().__init__()
        c = config
        self.self_attn = layers.Attention(c.hidden_size, c.num_heads, fused_qkv=c.fused_qkv,
                                          std=c.init_std)
        self.mlp = layers.SwiGLU(c.hidden_size, c.intermediate_size, std=c.init_std)
        self.input_layernorm = layers.RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = layers.RMSNorm(c.hidden_size, c.rms_norm_eps)

    def construct(self, x, bias, cos=None, sin=None, cache=None, layer_idx=0):
        x = x + self.self_attn(self.input_layernorm(x), bias, cos, sin, cache, layer_idx)
        return x + self.mlp(self.post_attention_layernorm(x))


ch06.decoder_layer(MyDecoderLayer)
# show_solution("ch06.decoder_layer")
''', {"ch06.decoder_layer": "偏置"}),
    "ch06.alibi_slopes": ('''def my_alibi_slopes(num_heads):
    def power_of_two_slopes(n):
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    c = 2 ** math.floor(math.log2(num_heads))
    if c == num_heads:
        return power_of_two_slopes(num_heads)
    return power_of_two_slopes(c) + power_of_two_slopes(2 * c)[1::2][:num_heads - c]


ch06.alibi_slopes(my_alibi_slopes)
# show_solution("ch06.alibi_slopes")
''', {"ch06.alibi_slopes": "隔一个"}),
    "ch06.attention_bias": ('''import numpy as np


def my_attention_bias(query_len, key_len, attention_mask=None, slopes=None):
    # attention_mask: None 或 (batch, key_len) 的 0/1 数组；slopes: None 或长度为 heads 的列表
    past = key_len - query_len
    query_index = np.arange(query_len)[:, None]
    key_index = np.arange(key_len)[None, :]
    allowed = (key_index <= query_index)[None, None]  # (1, 1, T, S)
    if attention_mask is None:
        positions = np.arange(key_len)[None]          # (1, S)
    else:
        mask = np.asarray(attention_mask).astype(bool)
        allowed = allowed & mask[:, None, None, :]
        positions = np.cumsum(mask, axis=-1) - 1      # real tokens only: the first is 0
    bias = np.where(allowed, 0.0, -1e4)
    if slopes is not None:
        distance = positions[:, None, None, :] - positions[:, past:][:, None, :, None]
        bias = bias + np.asarray(slopes, np.float32)[None, :, None, None] * distance
    return bias.astype(np.float32)


ch06.attention_bias(my_attention_bias)
# show_solution("ch06.attention_bias")
''', {"ch06.attention_bias": "KV cache"}),
    ("ch06.ex1", "ch06.ex2", "ch06.ex3", "ch06.ex4"): ('''from course_lib.check import ch06

# 1: 112 heads -> c = 64: m_h = 2^(-8(h+1)/64) for h < 64; then every other slope of 128 heads,
#    2^(-8(2j+1)/128) for the j-th extra head
ch06.ex1([2 ** -0.125, 2 ** -8, 2 ** -0.0625, 2 ** -(8 * 95 / 128)])
# 2: larger vocabulary (two tables) and the q/k/v biases of width h per layer
cfg_i7 = internlm.internlm_7b()
ch06.ex2([2 * (cfg_i7.vocab_size - cfg7.vocab_size) * cfg7.hidden_size,
          cfg_i7.num_layers * 3 * cfg_i7.hidden_size])
# 3: int8 weights, 1 byte each; the rest holds fp16 K and V of every layer
free = 24 * GiB - cfg13.num_parameters() * 1
ch06.ex3(free // (cfg13.num_layers * 2 * cfg13.hidden_size * 2))
# 4: the smallest dp that fits 90 % of a 16 GiB device
dp = 1
while not memory.plan(cfg13, 0.9 * 16, memory.Layout(dp=dp, tp=8, zero=1, recompute=True, seq_len=4096)).fits:
    dp += 1
ch06.ex4(dp * 8)
''', {"ch06.ex2": "o_proj"}),
}
