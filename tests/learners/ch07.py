RIGHT = {
    ("ch07.top_p", "ch07.repetition_penalty"): '''import numpy as np
from course_lib.check import ch07, show_solution


def my_top_p(logits, p):
    logits = np.asarray(logits)
    order = np.argsort(-logits, axis=-1, kind="stable")          # most likely first
    sorted_logits = np.take_along_axis(logits, order, -1)
    probs = np.exp(sorted_logits - sorted_logits.max(-1, keepdims=True))
    probs = probs / probs.sum(-1, keepdims=True)
    mass_before = np.cumsum(probs, -1) - probs                    # mass of the better tokens
    drop_sorted = mass_before >= p                                # p already reached before this one
    drop_sorted[..., 0] = False                                   # keep at least one token
    drop = np.zeros_like(drop_sorted)
    np.put_along_axis(drop, order, drop_sorted, -1)               # back to vocabulary order
    return np.where(drop, -np.inf, logits)


def my_repetition_penalty(logits, seen, penalty):
    logits = np.asarray(logits)
    penalised = np.where(logits > 0, logits / penalty, logits * penalty)
    return np.where(seen, penalised, logits)


ch07.top_p(my_top_p)
ch07.repetition_penalty(my_repetition_penalty)
# show_solution("ch07.top_p")
# show_solution("ch07.repetition_penalty")
''',
    "ch07.append_kv": '''from mindspore import ops


def my_append_kv(past_k, past_v, k, v):
    if past_k is None:
        return k, v
    return ops.cat((past_k, k), 2), ops.cat((past_v, v), 2)


ch07.append_kv(my_append_kv)
# show_solution("ch07.append_kv")
''',
    ("ch07.ex1", "ch07.ex2", "ch07.ex3", "ch07.ex4"): '''from course_lib.check import ch07

print("PROBS =", ch07.PROBS)
# 1: perplexity = exp(mean cross-entropy over the positions)
ch07.ex1(round(math.exp(-(0.75 * math.log(1 / 2) + 0.25 * math.log(1 / 64))), 2))
# 2: keep up to (and including) the token where the running sum first reaches 0.8
running, kept = 0.0, []
for i, prob in enumerate(ch07.PROBS):
    kept.append(i)
    running += prob
    if running >= 0.8:
        break
ch07.ex2(kept)
# 3: seen tokens 0 and 2: positive logit / 1.25, negative logit * 1.25, then softmax
penalised = np.array([2.0 / 1.25, 1.0, -1.0 * 1.25])
probs = np.exp(penalised) / np.exp(penalised).sum()
ch07.ex3(round(float(probs[1]), 3))
# 4: K and V of every layer, 256 tokens x hidden, 4 bytes each (float32)
tiny_cfg = baichuan.tiny(num_layers=3)
ch07.ex4(2 * tiny_cfg.num_layers * 1 * 256 * tiny_cfg.hidden_size * 4)
''',
}

WRONG = {
    ("ch07.top_p", "ch07.repetition_penalty"): ('''import numpy as np
from course_lib.check import ch07, show_solution


def my_top_p(logits, p):
    logits = np.asarray(logits)
    order = np.argsort(-logits, axis=-1, kind="stable")          # most likely first
    sorted_logits = np.take_along_axis(logits, order, -1)
    probs = np.exp(sorted_logits - sorted_logits.max(-1, keepdims=True))
    probs = probs / probs.sum(-1, keepdims=True)
    drop_sorted = np.cumsum(probs, -1) >= p                       # drop once the sum reaches p
    drop_sorted[..., 0] = False                                   # keep at least one token
    drop = np.zeros_like(drop_sorted)
    np.put_along_axis(drop, order, drop_sorted, -1)               # back to vocabulary order
    return np.where(drop, -np.inf, logits)


def my_repetition_penalty(logits, seen, penalty):
    logits = np.asarray(logits)
    penalised = np.where(logits > 0, logits / penalty, logits * penalty)
    return np.where(seen, penalised, logits)


ch07.top_p(my_top_p)
ch07.repetition_penalty(my_repetition_penalty)
# show_solution("ch07.top_p")
# show_solution("ch07.repetition_penalty")
''', {"ch07.top_p": "少留了一个"}),
    "ch07.append_kv": ('''from mindspore import ops


def my_append_kv(past_k, past_v, k, v):
    if past_k is None:
        return k, v
    return ops.cat((k, past_k), 2), ops.cat((v, past_v), 2)


ch07.append_kv(my_append_kv)
# show_solution("ch07.append_kv")
''', {"ch07.append_kv": "放到了过去的 token 前面"}),
    ("ch07.ex1", "ch07.ex2", "ch07.ex3", "ch07.ex4"): ('''from course_lib.check import ch07

print("PROBS =", ch07.PROBS)
# 1: perplexity = exp(mean cross-entropy over the positions)
ch07.ex1(round(math.exp(-(0.75 * math.log(1 / 2) + 0.25 * math.log(1 / 64))), 2))
# 2: keep up to (and including) the token where the running sum first reaches 0.8
running, kept = 0.0, []
for i, prob in enumerate(ch07.PROBS):
    kept.append(i)
    running += prob
    if running >= 0.8:
        break
ch07.ex2(kept)
# 3: seen tokens 0 and 2: positive logit / 1.25, negative logit * 1.25, then softmax
penalised = np.array([2.0 / 1.25, 1.0, -1.0 * 1.25])
probs = np.exp(penalised) / np.exp(penalised).sum()
ch07.ex3(round(float(probs[1]), 3))
# 4: the KV cache of every layer for 256 tokens (memory.kv_cache_bytes counts 2 bytes a value)
tiny_cfg = baichuan.tiny(num_layers=3)
ch07.ex4(2 * tiny_cfg.num_layers * 1 * 256 * tiny_cfg.hidden_size * 2)
''', {"ch07.ex4": "字节数不对"}),
}
