RIGHT = {
    "ch11.llama_kwargs": '''from course_lib.check import ch11, show_solution


def my_llama_kwargs(config):
    return dict(vocab_size=config.vocab_size, hidden_size=config.hidden_size,
                intermediate_size=config.intermediate_size,
                num_hidden_layers=config.num_layers,
                num_attention_heads=config.num_heads, num_key_value_heads=config.num_heads,
                max_position_embeddings=config.max_seq_len, rms_norm_eps=config.rms_norm_eps,
                rope_theta=config.rope_base, attention_bias=True, mlp_bias=False,
                tie_word_embeddings=False, hidden_act="silu")


ch11.llama_kwargs(my_llama_kwargs)
# show_solution("ch11.llama_kwargs")   # 自己试过之后再看
''',
    "ch11.lora_sgd_step": '''import mindtorch


def my_lora_sgd_step(loss_fn, params, batch, lr):
    for p in params:
        p.grad = None
    loss = mindtorch.autograd.value_and_grad(loss_fn, params)(batch)
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad
    return float(loss)


ch11.lora_sgd_step(my_lora_sgd_step)
# show_solution("ch11.lora_sgd_step")
''',
    ("ch11.ex1", "ch11.ex2", "ch11.ex3"): '''from course_lib.check import ch11
lora_params = 2 * 4 * 16 * (128 + 128)
ch11.ex1(round(100 * lora_params / (ref["parameters"] + lora_params), 4))
ch11.ex2(2 * (128 + 64 + 64 + 128))
ch11.ex3(8 / 16 * 16 * 0.01 * 0.02)
''',
}

WRONG = {
    "ch11.llama_kwargs": ('''from course_lib.check import ch11, show_solution


def my_llama_kwargs(config):
    return dict(vocab_size=config.vocab_size, hidden_size=config.hidden_size,
                intermediate_size=config.intermediate_size,
                num_hidden_layers=config.num_layers,
                num_attention_heads=config.num_heads, num_key_value_heads=config.num_heads,
                max_position_embeddings=config.max_seq_len, rms_norm_eps=config.rms_norm_eps,
                rope_theta=config.rope_base)


ch11.llama_kwargs(my_llama_kwargs)
# show_solution("ch11.llama_kwargs")   # 自己试过之后再看
''', {"ch11.llama_kwargs": "q/k/v/o 投影带偏置"}),
    "ch11.lora_sgd_step": ('''import mindtorch


def my_lora_sgd_step(loss_fn, params, batch, lr):
    loss = mindtorch.autograd.value_and_grad(loss_fn, params)(batch)
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad
    return float(loss)


ch11.lora_sgd_step(my_lora_sgd_step)
# show_solution("ch11.lora_sgd_step")
''', {"ch11.lora_sgd_step": "累加到 .grad 上"}),
    ("ch11.ex1", "ch11.ex2", "ch11.ex3"): ('''from course_lib.check import ch11
lora_params = 2 * 4 * 16 * (128 + 128)
ch11.ex1(round(100 * lora_params / (ref["parameters"] + lora_params), 4))
ch11.ex2(2 * (128 + 64 + 64 + 128))
ch11.ex3(16 / 8 * 16 * 0.01 * 0.02)
''', {"ch11.ex3": "缩放系数由 r 和 lora_alpha"}),
}
