"""Each ch05 checker accepts the reference answer (computed independently here) and
rejects a wrong one."""
import math

import mindspore as ms
import numpy as np
from mindspore import Tensor, ops

from course_lib import internlm
from course_lib.check import ch05
from course_lib.training import warmup_cosine_lr
from judging import judged as _judged


def test_ex1():
    assert ch05.ex1(math.exp(4.0))
    assert not ch05.ex1(4.0)


def test_ex2():
    model = internlm.InternLMForCausalLM(internlm.tiny())
    head = sum(p.size for p in model.trainable_params() if p.name.startswith("lm_head"))
    assert ch05.ex2(head)
    assert not ch05.ex2(head + 128)   # as if lm_head had a bias


def test_ex3():
    assert ch05.ex3(warmup_cosine_lr(1e-3, 100, 10)[55])
    assert not ch05.ex3(warmup_cosine_lr(1e-3, 100, 10, min_lr=1e-4)[55])   # min_lr is 0 by default
    assert not ch05.ex3(1e-3)


def test_ex4():
    grads = (Tensor(np.array([3.0, 4.0], np.float32)),)     # norm 5
    clipped = ops.clip_by_global_norm(grads, 1.0)[0].asnumpy()
    assert ch05.ex4(float(clipped[0] / 3.0))
    assert not ch05.ex4(5.0)


def _my_schedule(base_lr, total_steps, warmup_steps, min_lr=0.0):
    steps = np.arange(total_steps)
    warm = base_lr * (steps + 1) / max(warmup_steps, 1)
    t = np.clip((steps - warmup_steps) / max(1, total_steps - warmup_steps), 0, 1)
    cos = min_lr + (base_lr - min_lr) * (1 + np.cos(np.pi * t)) / 2
    return list(np.where(steps < warmup_steps, warm, cos))


def _my_step(net, loss_fn, optimizer, inputs, labels, clip):
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, optimizer.parameters)
    loss, grads = grad_fn(inputs, labels)
    norm = float(np.sqrt(sum(float((g.asnumpy() ** 2).sum()) for g in grads)))
    optimizer(tuple(g * (clip / max(norm, clip)) for g in grads))
    return loss, norm


def test_code_checkers_accept_independent_code(capsys):
    assert ch05.warmup_cosine(_my_schedule)
    assert ch05.clipped_train_step(_my_step)
    assert not ch05.warmup_cosine(lambda b, t, w, m=0.0: [b] * t)
    assert "❌" in capsys.readouterr().out


def test_the_judge_passes_independent_code_and_fails_wrong_code():
    from course_lib.solutions import ch05 as sol
    assert _judged(ch05.warmup_cosine, _my_schedule, sol.warmup_cosine) == "pass"
    assert _judged(ch05.clipped_train_step, _my_step, sol.train_step) == "pass"
    assert _judged(ch05.warmup_cosine, sol.wrong_cosine_over_total, sol.warmup_cosine) == "fail"
    assert _judged(ch05.clipped_train_step, sol.wrong_step_per_tensor, sol.train_step) == "fail"
