"""Each ch05 checker accepts the reference answer (computed independently here) and
rejects a wrong one."""
import math

import mindspore as ms
import numpy as np
from mindspore import Tensor, ops

from course_lib import internlm
from course_lib.check import ch05
from course_lib.training import global_norm, warmup_cosine_lr
from judging import judged as _judged


def test_ex1_perplexity_is_token_weighted():
    # two batches: 96 targets at mean loss 3.0, 32 targets at 5.0 -> exp of the token mean
    nll, tokens = 96 * 3.0 + 32 * 5.0, 96 + 32
    assert ch05.ex1(math.exp(nll / tokens)) and ch05.ex1(round(math.exp(nll / tokens), 2))
    assert ch05.ex1(math.floor(100 * math.exp(nll / tokens)) / 100)      # 33.11: cut, not rounded
    assert not ch05.ex1(33.09) and not ch05.ex1(33.13)
    assert not ch05.ex1(math.exp((3.0 + 5.0) / 2))                    # batch means averaged
    assert not ch05.ex1((math.exp(3.0) + math.exp(5.0)) / 2)          # batch perplexities averaged
    assert not ch05.ex1(nll / tokens)                                 # the loss, not the perplexity


def test_ex2_decayed_parameters(capsys):
    model = internlm.InternLMForCausalLM(internlm.tiny(num_layers=4))
    params = model.trainable_params()
    matrices = sum(p.size for p in params if len(p.shape) >= 2)       # biases, norm scales: no decay
    assert ch05.ex2(matrices)
    assert not ch05.ex2(sum(p.size for p in params))                 # everything decayed
    assert not ch05.ex2(sum(p.size for p in params if not p.name.endswith(".bias")))   # norms forgotten
    assert not ch05.ex2(sum(p.size for p in params if p.name.startswith("lm_head")))   # the old question
    capsys.readouterr()
    ch05.ex2(0)
    assert str(matrices) not in capsys.readouterr().out


def test_ex2_is_not_the_count_of_the_notebooks_model_at_either_scale():
    """The gradebook replays a learner's cells at CI scale while the learner ran at full scale:
    an answer counted from chapter 05's own ``model`` would pass at one scale only."""
    ci = dict(num_layers=1, hidden_size=64, num_heads=2, intermediate_size=128)
    for overrides in (ci, {}):       # chapter 05's MODEL_CONFIG at CI scale / at full scale
        params = internlm.InternLMForCausalLM(internlm.tiny(**overrides)).trainable_params()
        assert not ch05.ex2(sum(p.size for p in params if len(p.shape) >= 2))


def test_ex3():
    assert ch05.ex3(warmup_cosine_lr(1e-3, 100, 10, min_lr=1e-4)[55])      # LLMTrainer: min_lr = lr / 10
    assert ch05.ex3(5.5e-4)                                                # 1e-4 + 9e-4 * 0.5 * (1 + cos(pi/2))
    assert not ch05.ex3(warmup_cosine_lr(1e-3, 100, 10)[55])   # the function's default min_lr = 0
    assert not ch05.ex3(1e-3)


def test_ex4_recorded_norm_and_clipped_gradient():
    grads = tuple(Tensor(np.array([n], np.float32)) for n in (3.0, 4.0, 12.0))
    norm = float(global_norm(grads).asnumpy())
    clipped = float(np.abs(ops.clip_by_global_norm(grads, 1.0)[0].asnumpy())[0])
    assert ch05.ex4([norm, clipped]) and ch05.ex4(np.array([norm, clipped]))
    assert ch05.ex4([13.0, 0.2308])                                   # 4 significant digits
    assert not ch05.ex4([1.0, clipped])                                # the norm after clipping
    assert not ch05.ex4([norm, 1.0])                                   # clipped tensor by tensor
    assert not ch05.ex4([norm, 3.0])                                   # not clipped
    assert not ch05.ex4(clipped)


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
