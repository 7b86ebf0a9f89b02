RIGHT = {
    "ch08.lora_forward": '''from mindspore import ops
from course_lib.check import ch08, show_solution


class MyLoRADense(lora.LoRADense):
    def construct(self, x):
        base = nn.Dense.construct(self, x)                 # W x + b of the frozen layer
        low_rank = ops.dense(ops.dense(x, self.lora_A), self.lora_B)   # B A x, (..., out)
        return base + low_rank * self.scaling


ch08.lora_forward(MyLoRADense)
# show_solution("ch08.lora_forward")
''',
    "ch08.replace_layer": '''from mindspore import nn


def my_replace_layer(model, name, new):
    *path, last = name.split(".")
    parent = model
    for part in path:                                      # walk down to the parent Cell
        parent = parent[int(part)] if isinstance(parent, nn.CellList) else getattr(parent, part)
    if isinstance(parent, nn.CellList):
        parent[int(last)] = new
    else:
        setattr(parent, last, new)
    for local, param in new.parameters_and_names():       # attaching renamed them: full names again
        param.name = f"{name}.{local}"


ch08.replace_layer(my_replace_layer)
# show_solution("ch08.replace_layer")
''',
    ("ch08.ex1", "ch08.ex2", "ch08.ex3", "ch08.ex4"): '''from course_lib.check import ch08

# 1: r (in + out) per adapted Dense; q/k/v/o are h -> h, gate/up h -> FFN, down FFN -> h
h7, f7 = cfg7.hidden_size, cfg7.intermediate_size
ch08.ex1(8 * cfg7.num_layers * (4 * (h7 + h7) + 3 * (h7 + f7)))
# 2: the adapters do not depend on the vocabulary; embed_tokens and lm_head grow
h, f = cfg.hidden_size, cfg.intermediate_size
added = 8 * cfg.num_layers * (4 * (h + h) + 3 * (h + f))
big_vocab_total = cfg.replace(vocab_size=cfg7.vocab_size).num_parameters() + added
ch08.ex2(round(100 * added / big_vocab_total, 3))
# 3: only the answer's tokens and the end marker are learned
ch08.ex3(len(tok.encode("这是一条正面评论")) + 1)
# 4: adapters r=64 on q/k/v/o train; the base stays as frozen weights
added64 = 64 * cfg7.num_layers * 4 * (cfg7.hidden_size + cfg7.hidden_size)
ch08.ex4(memory.training_state_bytes(trainable=added64, frozen=n7).total / 2**30)
''',
}

WRONG = {
    "ch08.lora_forward": ('''from mindspore import ops
from course_lib.check import ch08, show_solution


class MyLoRADense(lora.LoRADense):
    def construct(self, x):
        base = nn.Dense.construct(self, x)                 # W x + b of the frozen layer
        low_rank = ops.dense(ops.dense(x, self.lora_A), self.lora_B)   # B A x, (..., out)
        return base + low_rank


ch08.lora_forward(MyLoRADense)
# show_solution("ch08.lora_forward")
''', {"ch08.lora_forward": "没有缩放"}),
    "ch08.replace_layer": ('''from mindspore import nn


def my_replace_layer(model, name, new):
    *path, last = name.split(".")
    parent = model
    for part in path:                                      # walk down to the parent Cell
        parent = parent[int(part)] if isinstance(parent, nn.CellList) else getattr(parent, part)
    if isinstance(parent, nn.CellList):
        parent[int(last)] = new
    else:
        setattr(parent, last, new)


ch08.replace_layer(my_replace_layer)
# show_solution("ch08.replace_layer")
''', {"ch08.replace_layer": "参数名"}),
    ("ch08.ex1", "ch08.ex2", "ch08.ex3", "ch08.ex4"): ('''from course_lib.check import ch08

# 1: r (in + out) per adapted Dense; q/k/v/o are h -> h, gate/up h -> FFN, down FFN -> h
h7, f7 = cfg7.hidden_size, cfg7.intermediate_size
ch08.ex1(8 * cfg7.num_layers * (4 * (h7 + h7) + 3 * (h7 + f7)))
# 2: the adapters do not depend on the vocabulary; embed_tokens and lm_head grow
h, f = cfg.hidden_size, cfg.intermediate_size
added = 8 * cfg.num_layers * (4 * (h + h) + 3 * (h + f))
big_vocab_total = cfg.replace(vocab_size=cfg7.vocab_size).num_parameters() + added
ch08.ex2(round(100 * added / big_vocab_total, 3))
# 3: only the answer's tokens and the end marker are learned
ch08.ex3(len(tok.encode("这是一条正面评论")) + 1)
# 4: only the adapters need training state
added64 = 64 * cfg7.num_layers * 4 * (cfg7.hidden_size + cfg7.hidden_size)
ch08.ex4(memory.training_state_bytes(trainable=added64).total / 2**30)
''', {"ch08.ex4": "冻结"}),
}
