"""Each ch05 checker accepts the reference answer (computed independently here) and
rejects a wrong one."""
import math

import numpy as np
from mindspore import Tensor, ops

from course_lib import internlm
from course_lib.check import ch05
from course_lib.training import warmup_cosine_lr


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
    assert not ch05.ex3(1e-3)


def test_ex4():
    grads = (Tensor(np.array([3.0, 4.0], np.float32)),)     # norm 5
    clipped = ops.clip_by_global_norm(grads, 1.0)[0].asnumpy()
    assert ch05.ex4(float(clipped[0] / 3.0))
    assert not ch05.ex4(5.0)
