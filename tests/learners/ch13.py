RIGHT = {
    "ch13.translate_block": '''from mindspore import nn, ops


class MyFeedForwardBlock(nn.Cell):
    def __init__(self, hidden, inner):
        super().__init__()
        self.norm = nn.LayerNorm((hidden,), epsilon=1e-6)
        self.fc1 = nn.Dense(hidden, inner)
        self.act = nn.GELU(approximate=True)
        self.fc2 = nn.Dense(inner, hidden, has_bias=False)

    def construct(self, x):
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


ch13.translate_block(MyFeedForwardBlock)
# show_solution("ch13.translate_block")   # 自己试过之后再看
''',
    "ch13.convert_state_dict": '''def my_convert_state_dict(state, module_types):
    renames = {"LayerNorm": {"weight": "gamma", "bias": "beta"},
               "Embedding": {"weight": "embedding_table"}}
    out = {}
    for key, value in state.items():
        module, _, leaf = key.rpartition(".")
        leaf = renames.get(module_types.get(module), {}).get(leaf, leaf)
        out[f"{module}.{leaf}" if module else leaf] = np.asarray(value, dtype=np.float32)
    return out


ch13.convert_state_dict(my_convert_state_dict)
# show_solution("ch13.convert_state_dict")
''',
    ("ch13.ex1", "ch13.ex2", "ch13.ex3"): '''from course_lib.check import ch13
torch_eps = 1e-5   # torch.nn.LayerNorm(normalized_shape, eps=1e-05, ...)
ms_eps = 1e-7      # mindspore.nn.LayerNorm(normalized_shape, ..., epsilon=1e-07)
var = 1e-5
ch13.ex1(float(np.sqrt((var + torch_eps) / (var + ms_eps))))
ch13.ex2(5)   # tok (Embedding) 1 + ln1 2 + ln_f 2; Linear keeps its names
p0, g, lr, wd, eps = 1.0, 0.5, 1e-3, 0.01, 1e-8
m_hat, v_hat = g, g * g            # bias-corrected moments after one step
ch13.ex3(p0 * (1 - lr * wd) - lr * m_hat / (np.sqrt(v_hat) + eps))
''',
}

WRONG = {
    "ch13.translate_block": ('''from mindspore import nn, ops


class MyFeedForwardBlock(nn.Cell):
    def __init__(self, hidden, inner):
        super().__init__()
        self.norm = nn.LayerNorm((hidden,))
        self.fc1 = nn.Dense(hidden, inner)
        self.act = nn.GELU(approximate=True)
        self.fc2 = nn.Dense(inner, hidden, has_bias=False)

    def construct(self, x):
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


ch13.translate_block(MyFeedForwardBlock)
# show_solution("ch13.translate_block")   # 自己试过之后再看
''', {"ch13.translate_block": "LayerNorm 的 eps"}),
    "ch13.convert_state_dict": ('''def my_convert_state_dict(state, module_types):
    renames = {"LayerNorm": {"weight": "gamma", "bias": "beta"},
               "Embedding": {"weight": "embedding_table"}}
    out = {}
    for key, value in state.items():
        module, _, leaf = key.rpartition(".")
        leaf = renames.get(module_types.get(module), {}).get(leaf, leaf)
        if module_types.get(module) == "Linear" and leaf == "weight":
            value = value.T
        out[f"{module}.{leaf}" if module else leaf] = np.asarray(value, dtype=np.float32)
    return out


ch13.convert_state_dict(my_convert_state_dict)
# show_solution("ch13.convert_state_dict")
''', {"ch13.convert_state_dict": "转置"}),
    ("ch13.ex1", "ch13.ex2", "ch13.ex3"): ('''from course_lib.check import ch13
torch_eps = 1e-5   # torch.nn.LayerNorm(normalized_shape, eps=1e-05, ...)
ms_eps = 1e-7      # mindspore.nn.LayerNorm(normalized_shape, ..., epsilon=1e-07)
var = 1e-5
ch13.ex1(float(np.sqrt((var + torch_eps) / (var + ms_eps))))
ch13.ex2(5)   # tok (Embedding) 1 + ln1 2 + ln_f 2; Linear keeps its names
p0, g, lr, eps = 1.0, 0.5, 1e-3, 1e-8
ch13.ex3(p0 - lr * g / (np.sqrt(g * g) + eps))
''', {"ch13.ex3": "权重衰减"}),
}
