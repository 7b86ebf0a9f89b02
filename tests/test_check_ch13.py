"""ch13 checkers: references accepted, wrong variants rejected with their hint, numbers vs torch."""
import inspect

import numpy as np
import torch

from course_lib.check import ch13
from course_lib.solutions import ch13 as sol
from judging import judged as _judged


def test_convert_state_dict_loads_into_the_native_translation():
    """The converted keys are exactly the parameters of the course's native TinyGPT."""
    from course_lib.migration import native_demo, torch_demo
    from course_lib.migration.demo_data import DemoConfig
    cfg = DemoConfig(vocab_size=11, hidden=8, heads=2, layers=1, max_len=9)
    tm = torch_demo.TinyGPT(cfg.vocab_size, cfg.hidden, cfg.heads, cfg.layers, cfg.max_len)
    types = {name: type(m).__name__ for name, m in tm.named_modules()}
    state = {k: v.detach().numpy() for k, v in tm.state_dict().items()}
    converted = sol.convert_state_dict(state, types)
    native = native_demo.build(cfg)
    shapes = {p.name: tuple(p.shape) for p in native.get_parameters()}
    assert {k: v.shape for k, v in converted.items()} == shapes


def test_ex1_layernorm_ratio_against_torch():
    from mindspore import Tensor, nn
    eps_torch = inspect.signature(torch.nn.LayerNorm.__init__).parameters["eps"].default
    assert eps_torch == 1e-5
    x = np.array([[1, -1, 1, -1]], np.float32) * np.sqrt(1e-5).astype(np.float32)   # variance 1e-5
    t = torch.nn.LayerNorm(4)(torch.tensor(x)).detach().numpy()
    m = nn.LayerNorm((4,))(Tensor(x)).asnumpy()
    ratio = float(m[0, 0] / t[0, 0])
    assert ch13.ex1(ratio) and abs(ratio - ch13._layernorm_ratio()) < 1e-3
    assert not ch13.ex1(1.0) and not ch13.ex1(1e-7)


def test_ex2_renamed_keys():
    assert ch13._ex2_answer() == 5                     # embedding 1, two LayerNorms 2 each
    assert ch13.ex2(5)
    assert not ch13.ex2(4) and not ch13.ex2(2) and not ch13.ex2("encoder.norm.gamma")


def test_ex3_adamw_first_step_matches_closed_form_and_torch():
    p0, g, lr, wd, eps = 1.0, 0.5, 1e-3, 0.01, 1e-8
    closed = p0 * (1 - lr * wd) - lr * g / (abs(g) + eps)     # bias-corrected first step
    p = torch.nn.Parameter(torch.tensor([p0]))
    p.grad = torch.tensor([g])
    torch.optim.AdamW([p], lr=lr, betas=(0.9, 0.999), eps=eps, weight_decay=wd).step()
    assert abs(float(p.detach()) - closed) < 1e-6
    assert ch13.ex3(closed) and ch13.ex3(np.float32(float(p.detach())))
    assert not ch13.ex3(p0 - lr * g)          # plain SGD
    assert not ch13.ex3(p0 - lr * 0.1 / 0.001 ** 0.5)   # no bias correction (AdamWeightDecay)


def test_ex3_names_the_paper_literal_decay(capsys):
    """The AdamW paper's Algorithm 2 scales the decay by a schedule factor (1 here), torch by lr:
    p0 - (lr * g / |g| + wd * p0) is the paper read literally; its hint names the decay term."""
    p0, g, lr, wd = 1.0, 0.5, 1e-3, 0.01
    assert not ch13.ex3(p0 - (lr * g / abs(g) + wd * p0))
    assert "权重衰减这一项的系数" in capsys.readouterr().out


def test_translation_judged_alike_whatever_its_registration_order():
    """Two correct translations may register their parameters in another order: the
    observations (gradients included) must not depend on it."""
    from mindspore import nn, ops

    class Reordered(nn.Cell):
        def __init__(self, hidden, inner):
            super().__init__()
            self.fc2 = nn.Dense(inner, hidden, has_bias=False)
            self.fc1 = nn.Dense(hidden, inner)
            self.norm = nn.LayerNorm((hidden,), epsilon=1e-6)

        def construct(self, x):
            return x + self.fc2(ops.gelu(self.fc1(self.norm(x)), approximate="tanh"))
    assert _judged(ch13.translate_block, Reordered, sol.FeedForwardBlock) == "pass"
    assert _judged(ch13.translate_block, sol.wrong_exact_gelu, sol.FeedForwardBlock) == "fail"


def test_the_torch_module_is_the_one_the_reference_translates():
    """The module to translate spells out eps=1e-6, the tanh GELU and fc2 without bias (not
    the defaults the mapping table lists), so copying a table row is not the answer."""
    tb = ch13.torch_block()(8, 20)
    assert tb.norm.eps == 1e-6 and tb.act.approximate == "tanh" and tb.fc2.bias is None
    cell = sol.FeedForwardBlock(8, 20)
    assert cell.norm.epsilon == 1e-6 and cell.fc2.has_bias is False


def test_translation_hints_name_the_slip_not_the_code(capsys):
    for wrong, slip in ((sol.wrong_default_eps, "1e-07"), (sol.wrong_table_eps, "1e-05"),
                        (sol.wrong_exact_gelu, "erf"), (sol.wrong_fc2_bias, "fc2.bias")):
        assert not ch13.translate_block(wrong)
        out = capsys.readouterr().out
        assert slip in out and "epsilon=1e-6" not in out and "approximate=True" not in out, out


def test_hidden_inputs_follow_the_grading_salt(monkeypatch):
    plain = ch13._gpt_like_state(ch13.hidden_rng(31))[0]
    monkeypatch.setenv("COURSE_CHECK_SALT", "7")
    salted = ch13._gpt_like_state(ch13.hidden_rng(31))[0]
    assert plain.keys() == salted.keys()
    assert not np.array_equal(plain["head.weight"], salted["head.weight"])
