"""ch13 checkers accept the reference answers and reject wrong ones."""
from course_lib.check import ch13


def test_ex1_layernorm_default_epsilon(capsys):
    assert ch13.ex1(1e-7)
    assert not ch13.ex1(1e-5)                 # PyTorch's default, the classic mistake
    assert not ch13.ex1("1e-7x")


def test_ex2_parameter_name():
    assert ch13.ex2("encoder.norm.gamma")
    assert not ch13.ex2("encoder.norm.weight")


def test_ex3_adamw_first_step_matches_closed_form_and_torch():
    import torch
    p0, g, lr, wd, eps = 1.0, 0.5, 1e-3, 0.01, 1e-8
    closed = p0 * (1 - lr * wd) - lr * g / (abs(g) + eps)     # bias-corrected first step
    p = torch.nn.Parameter(torch.tensor([p0]))
    p.grad = torch.tensor([g])
    torch.optim.AdamW([p], lr=lr, betas=(0.9, 0.999), eps=eps, weight_decay=wd).step()
    assert abs(float(p.detach()) - closed) < 1e-6
    assert ch13.ex3(closed) and ch13.ex3(float(p.detach()))
    assert not ch13.ex3(p0 - lr * g)          # plain SGD
    assert not ch13.ex3(p0 - lr * 0.1 / 0.001 ** 0.5)   # no bias correction (AdamWeightDecay)
