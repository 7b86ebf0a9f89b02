RIGHT = {
    "ch05.warmup_cosine": '''from course_lib.check import ch05, show_solution


def warmup_cosine(base_lr, total_steps, warmup_steps, min_lr=0.0):
    lrs = []
    for i in range(total_steps):
        if i < warmup_steps:
            lrs.append(base_lr * (i + 1) / warmup_steps)
        else:
            progress = (i - warmup_steps) / (total_steps - warmup_steps)
            lrs.append(min_lr + (base_lr - min_lr) * 0.5 * (1 + math.cos(math.pi * progress)))
    return lrs


ch05.warmup_cosine(warmup_cosine)
''',
    "ch05.clipped_train_step": '''from mindspore import ops


def train_step(net, loss_fn, optimizer, inputs, labels, clip):
    def forward(x, y):
        return loss_fn(net(x), y)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
    loss, grads = grad_fn(inputs, labels)
    norm = ops.sqrt(sum((g * g).sum() for g in grads))
    grads = ops.clip_by_global_norm(grads, clip)
    optimizer(grads)
    return loss, norm


ch05.clipped_train_step(train_step)
''',
    ("ch05.ex1", "ch05.ex2", "ch05.ex3", "ch05.ex4"): '''# 1: evaluate() sums the NLL over all predicted tokens, divides by their count, then exp
ch05.ex1(round(math.exp((96 * 3.0 + 32 * 5.0) / (96 + 32)), 2))
# 2: weight decay on the matrices (Dense weights, embeddings), not on biases or RMSNorm scales
tiny_model = internlm.InternLMForCausalLM(internlm.tiny(num_layers=4))
ch05.ex2(sum(p.size for p in tiny_model.get_parameters() if len(p.shape) >= 2))
# 3: progress = (55 - 10) / 90 = 0.5 -> half of the cosine; LLMTrainer's min_lr is lr / 10
ch05.ex3(warmup_cosine(1e-3, 100, 10, min_lr=1e-3 / 10)[55])
# 4: the recorded norm is the global norm before clipping; every gradient is scaled by clip / norm
global_norm = math.sqrt(3.0 ** 2 + 4.0 ** 2 + 12.0 ** 2)
ch05.ex4([round(global_norm, 4), round(3.0 * 1.0 / max(global_norm, 1.0), 4)])
''',
}

WRONG = {
    "ch05.warmup_cosine": ('''from course_lib.check import ch05, show_solution


def warmup_cosine(base_lr, total_steps, warmup_steps, min_lr=0.0):
    lrs = []
    for i in range(total_steps):
        if i < warmup_steps:
            lrs.append(base_lr * i / warmup_steps)
        else:
            progress = (i - warmup_steps) / (total_steps - warmup_steps)
            lrs.append(min_lr + (base_lr - min_lr) * 0.5 * (1 + math.cos(math.pi * progress)))
    return lrs


ch05.warmup_cosine(warmup_cosine)
''', {"ch05.warmup_cosine": "晚了一步"}),
    "ch05.clipped_train_step": ('''from mindspore import ops


def train_step(net, loss_fn, optimizer, inputs, labels, clip):
    def forward(x, y):
        return loss_fn(net(x), y)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
    loss, grads = grad_fn(inputs, labels)
    grads = ops.clip_by_global_norm(grads, clip)
    norm = ops.sqrt(sum((g * g).sum() for g in grads))
    optimizer(grads)
    return loss, norm


ch05.clipped_train_step(train_step)
''', {"ch05.clipped_train_step": "裁剪后的范数"}),
    ("ch05.ex1", "ch05.ex2", "ch05.ex3", "ch05.ex4"): ('''# 1: evaluate() sums the NLL over all predicted tokens, divides by their count, then exp
ch05.ex1(round(math.exp((96 * 3.0 + 32 * 5.0) / (96 + 32)), 2))
# 2: weight decay on the matrices (Dense weights, embeddings), not on biases or RMSNorm scales
tiny_model = internlm.InternLMForCausalLM(internlm.tiny(num_layers=4))
ch05.ex2(sum(p.size for p in tiny_model.get_parameters() if len(p.shape) >= 2))
# 3: forgot that LLMTrainer's min_lr is not the function's default
ch05.ex3(warmup_cosine(1e-3, 100, 10)[55])
# 4: the recorded norm is the global norm before clipping; every gradient is scaled by clip / norm
global_norm = math.sqrt(3.0 ** 2 + 4.0 ** 2 + 12.0 ** 2)
ch05.ex4([round(global_norm, 4), round(3.0 * 1.0 / max(global_norm, 1.0), 4)])
''', {"ch05.ex3": "warmup_cosine_lr` 的默认值"}),
}
