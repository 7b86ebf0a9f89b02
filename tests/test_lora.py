"""course_lib.lora on small nets of plain nn.Dense layers (independent of the course models).

References: closed-form NumPy (float64) for the forward pass and the merge, and real
torch's ``kaiming_uniform_(a=sqrt(5))`` for the initialisation bound of A.
"""
import math
import re

import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor, nn

from course_lib import lora
from course_lib.lora import (LoRADense, inject_lora, parameter_counts, load_adapter,
                             lora_layers, lora_parameters, merge_lora, parameter_table,
                             save_adapter, unmerge_lora)

H = 16


class Attn(nn.Cell):
    def __init__(self):
        super().__init__()
        self.q_proj, self.k_proj = nn.Dense(H, H), nn.Dense(H, H)
        self.v_proj, self.o_proj = nn.Dense(H, H), nn.Dense(H, H, has_bias=False)

    def construct(self, x):
        return self.o_proj(self.q_proj(x) * ms.ops.sigmoid(self.k_proj(x)) + self.v_proj(x))


class Block(nn.Cell):
    def __init__(self):
        super().__init__()
        self.self_attn = Attn()
        self.up = nn.Dense(H, 2 * H, has_bias=False)
        self.down = nn.Dense(2 * H, H, has_bias=False)

    def construct(self, x):
        x = x + self.self_attn(x)
        return x + self.down(ms.ops.tanh(self.up(x)))


class TinyNet(nn.Cell):
    """Two blocks + head, names like a decoder: layers.0.self_attn.q_proj ..."""

    def __init__(self, head_out=5):
        super().__init__()
        self.layers = nn.CellList([Block(), Block()])
        self.head = nn.Dense(H, head_out)

    def construct(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def fresh_net(seed=0, **kw):
    ms.set_seed(seed)
    np.random.seed(seed)
    return TinyNet(**kw)


def x_batch(shape=(3, 4, H), seed=1):
    return Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def weights(model):
    return {n: p.asnumpy().copy() for n, p in model.parameters_and_names()}


def randomise_lora(model, seed=3, scale=0.2):
    rng = np.random.default_rng(seed)
    for layer in lora_layers(model).values():
        layer.lora_B.set_data(Tensor(rng.standard_normal(layer.lora_B.shape).astype(np.float32) * scale))


# ------------------------------------------------------------------------------ the layer
def test_lora_dense_starts_equal_to_base_and_A_is_kaiming_uniform():
    import torch
    base = nn.Dense(64, 48)
    x = x_batch((2, 7, 64))
    expected = base(x).asnumpy()
    layer = LoRADense(base, r=16, alpha=32)
    assert np.array_equal(layer(x).asnumpy(), expected)          # B = 0: bit-identical
    assert np.count_nonzero(layer.lora_B.asnumpy()) == 0
    a = layer.lora_A.asnumpy()
    assert a.shape == (16, 64) and layer.lora_B.shape == (48, 16)
    ref = torch.empty(16, 64)
    torch.nn.init.kaiming_uniform_(ref, a=math.sqrt(5))
    bound = torch.nn.init.calculate_gain("leaky_relu", math.sqrt(5)) * math.sqrt(3 / 64)
    assert abs(bound - 1 / 8) < 1e-12                           # = 1/sqrt(fan_in)
    assert np.abs(a).max() <= bound and float(ref.abs().max()) <= bound
    assert np.abs(a).max() > 0.9 * bound                        # spread over the whole range
    assert abs(a.std() - bound / math.sqrt(3)) < 0.1 * bound   # uniform's std
    assert layer.weight is base.weight and not base.weight.requires_grad


def test_lora_dense_forward_is_closed_form():
    base = nn.Dense(12, 10)
    layer = LoRADense(base, r=4, alpha=6)
    rng = np.random.default_rng(0)
    B = rng.standard_normal((10, 4)).astype(np.float32)
    layer.lora_B.set_data(Tensor(B))
    x = x_batch((5, 12))
    W, b, A = (t.asnumpy().astype(np.float64) for t in (base.weight, base.bias, layer.lora_A))
    xs = x.asnumpy().astype(np.float64)
    expected = xs @ W.T + b + (xs @ A.T @ B.astype(np.float64).T) * (6 / 4)
    np.testing.assert_allclose(layer(x).asnumpy(), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(layer.delta_weight(), B.astype(np.float64) @ A * 1.5, rtol=1e-12)


def test_dropout_only_in_training_mode():
    layer = LoRADense(nn.Dense(32, 32), r=4, alpha=4, dropout=0.5)
    layer.lora_B.set_data(Tensor(np.ones((32, 4), np.float32)))
    x = x_batch((4, 32))
    layer.set_train(False)
    assert np.array_equal(layer(x).asnumpy(), layer(x).asnumpy())
    layer.set_train(True)
    assert not np.array_equal(layer(x).asnumpy(), layer(x).asnumpy())


# ------------------------------------------------------------------------------ injecting
def test_inject_report_freezes_everything_else_and_keeps_names():
    net = fresh_net()
    names_before = [n for n, _ in net.parameters_and_names()]
    total_before = parameter_counts(net).total
    report = inject_lora(net, ["q_proj", "v_proj"], r=4, alpha=8)
    replaced = [x.name for x in report.replaced]
    assert replaced == ["layers.0.self_attn.q_proj", "layers.0.self_attn.v_proj",
                        "layers.1.self_attn.q_proj", "layers.1.self_attn.v_proj"]
    assert all((x.in_features, x.out_features, x.added) == (H, H, 4 * (H + H))
               for x in report.replaced)
    count = parameter_counts(net)
    assert count.trainable == report.added == 4 * 4 * 2 * H
    assert count.total == total_before + report.added
    # every old name is still there, the adapters add <layer>.lora_A / .lora_B
    names_after = [p.name for p in net.get_parameters()]
    assert len(set(names_after)) == len(names_after)
    assert set(names_before) < set(names_after)
    assert sorted(set(names_after) - set(names_before)) == sorted(
        f"{n}.{p}" for n in replaced for p in ("lora_A", "lora_B"))
    assert [p.name for p in net.trainable_params()] == [p.name for p in lora_parameters(net)]
    assert all(not p.requires_grad for p in net.get_parameters() if "lora_" not in p.name)
    table = parameter_table(net)
    assert "layers.*.self_attn.q_proj" in table and "TOTAL" in table
    assert f"{count.trainable:,}" in table
    assert "q_proj" in str(report) and "scaling 2" in str(report)


@pytest.mark.parametrize("targets, expected", [
    (["layers.1.self_attn.k_proj"], ["layers.1.self_attn.k_proj"]),               # exact
    (["self_attn.o_proj"], ["layers.0.self_attn.o_proj", "layers.1.self_attn.o_proj"]),
    (["head", "up"], ["layers.0.up", "layers.1.up", "head"]),                      # model order
    (["re:layers\\.0\\.self_attn\\.(q|v)_proj"],
     ["layers.0.self_attn.q_proj", "layers.0.self_attn.v_proj"]),
    ([re.compile(r".*\.1\..*_proj")],
     [f"layers.1.self_attn.{p}_proj" for p in "qkvo"]),
    ("down", ["layers.0.down", "layers.1.down"]),                                  # one str
])
def test_target_matching(targets, expected):
    assert lora.match_targets(fresh_net(), targets) == expected


def test_suffix_match_respects_dot_boundaries():
    with pytest.raises(ValueError, match="matches no nn.Dense"):
        lora.match_targets(fresh_net(), ["proj"])        # 'q_proj' does not end in '.proj'


def test_only_lora_parameters_change_after_training_steps_in_both_modes():
    for mode in (ms.PYNATIVE_MODE, ms.GRAPH_MODE):
        ms.set_context(mode=mode)
        net = fresh_net()
        inject_lora(net, ["q_proj", "v_proj"], r=4, alpha=8)
        before = weights(net)
        optimizer = nn.AdamWeightDecay(lora_parameters(net), 1e-2, weight_decay=0.1)
        step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), optimizer)
        x, target = x_batch(), x_batch((3, 4, 5), seed=9)
        losses = [float(step(x, target).asnumpy()) for _ in range(3)]
        after = weights(net)
        changed = {n for n in before if not np.array_equal(before[n], after[n])}
        assert changed == {p.name for p in lora_parameters(net)}, mode
        assert losses[-1] < losses[0]
    ms.set_context(mode=ms.PYNATIVE_MODE)


def test_an_optimizer_over_all_parameters_still_decays_frozen_weights():
    """The pitfall the chapter warns about: requires_grad=False gives a frozen weight a zero
    gradient, but an AdamWeightDecay that *owns* it still shrinks it by lr*wd every step.
    Freezing is only real if the optimizer gets the LoRA parameters alone."""
    lr, wd = 0.1, 0.5
    for optimizer_of, decayed in ((lambda n: nn.SGD(list(n.get_parameters()), lr), False),
                                  (lambda n: nn.AdamWeightDecay(list(n.get_parameters()), lr,
                                                                weight_decay=wd), True)):
        net = fresh_net()
        inject_lora(net, ["q_proj"], r=2, alpha=2)
        before = weights(net)
        step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), optimizer_of(net))
        step(x_batch(), x_batch((3, 4, 5), seed=9))
        after = net.head.weight.asnumpy()
        if decayed:   # zero gradient -> Adam's update is 0; only decay acts: w * (1 - lr*wd)
            np.testing.assert_allclose(after, before["head.weight"] * (1 - lr * wd), rtol=1e-6)
        else:
            assert np.array_equal(after, before["head.weight"])


# ------------------------------------------------------------------------------ merging
def test_merge_equals_lora_and_unmerge_restores_base():
    net = fresh_net()
    base_weights = weights(net)
    inject_lora(net, ["q_proj", "v_proj", "head"], r=4, alpha=8)
    randomise_lora(net)
    x = x_batch()
    lora_out = net(x).asnumpy()
    assert not np.allclose(lora_out, fresh_net()(x).asnumpy(), atol=1e-3)   # adapter matters
    names = sorted(lora_layers(net))
    report = merge_lora(net)
    assert report.merged == names and not lora_layers(net)
    cells = dict(net.cells_and_names())
    assert all(type(cells[n]) is nn.Dense for n in names)
    assert sorted(p.name for p in net.get_parameters()) == sorted(base_weights)
    np.testing.assert_allclose(net(x).asnumpy(), lora_out, rtol=1e-5, atol=1e-5)
    # merged weight = W + B A alpha/r (float64 reference)
    A = report.tensors["head.lora_A"].astype(np.float64)
    B = report.tensors["head.lora_B"].astype(np.float64)
    np.testing.assert_allclose(net.head.weight.asnumpy(),
                               base_weights["head.weight"] + B @ A * 2.0, rtol=1e-6, atol=1e-6)
    unmerge_lora(net, report)
    assert sorted(lora_layers(net)) == names
    np.testing.assert_allclose(net(x).asnumpy(), lora_out, rtol=1e-5, atol=1e-5)
    for n in names:
        np.testing.assert_allclose(cells[n].weight.asnumpy(), base_weights[f"{n}.weight"],
                                   atol=1e-6)


def test_merge_without_lora_and_unmerge_of_unmerged_raise():
    with pytest.raises(ValueError, match="no LoRA layers"):
        merge_lora(fresh_net())
    net = fresh_net()
    inject_lora(net, ["q_proj"], r=2)
    report = merge_lora(net)
    inject_lora(net, ["q_proj"], r=2)
    with pytest.raises(ValueError, match="still has"):
        unmerge_lora(net, report)


# ------------------------------------------------------------------------------ adapters
def test_adapter_round_trip_onto_a_fresh_base(tmp_path):
    net = fresh_net()
    inject_lora(net, ["q_proj", "v_proj"], r=4, alpha=8)
    randomise_lora(net)
    x = x_batch()
    expected = net(x).asnumpy()
    path = save_adapter(net, tmp_path / "adapter.safetensors")
    adapter_bytes = sum(p.size * 4 for p in lora_parameters(net))
    full_bytes = sum(p.size * 4 for p in net.get_parameters())
    size = path.stat().st_size
    assert adapter_bytes <= size < adapter_bytes + 4096 < full_bytes   # tensors + small header
    fresh = fresh_net()                        # same seed -> same base weights
    report = load_adapter(fresh, path)
    assert [x.name for x in report.replaced] == sorted(lora_layers(net))
    assert report.count == parameter_counts(net)
    assert np.array_equal(fresh(x).asnumpy(), expected)
    # loading again onto a model that already has the same LoRA layers just sets values
    other = fresh_net()
    inject_lora(other, ["q_proj", "v_proj"], r=4, alpha=8)
    load_adapter(other, path)
    assert np.array_equal(other(x).asnumpy(), expected)
    # unmerge from the file works too
    merge_lora(net)
    unmerge_lora(net, path)
    np.testing.assert_allclose(net(x).asnumpy(), expected, rtol=1e-5, atol=1e-5)


def test_adapter_refuses_a_different_base(tmp_path):
    net = fresh_net(seed=0)
    inject_lora(net, ["v_proj"], r=2)
    path = save_adapter(net, tmp_path / "a.safetensors")
    with pytest.raises(ValueError, match="different base model"):
        load_adapter(fresh_net(seed=1), path)
    loose = fresh_net(seed=1)
    load_adapter(loose, path, strict_base=False)             # explicitly allowed
    assert sorted(lora_layers(loose)) == ["layers.0.self_attn.v_proj", "layers.1.self_attn.v_proj"]
    with pytest.raises(ValueError, match="different model size"):
        load_adapter(fresh_net(head_out=7), save_adapter_for_head(tmp_path))
    wrong_r = fresh_net()
    inject_lora(wrong_r, ["v_proj"], r=4)
    with pytest.raises(ValueError, match="r=2"):
        load_adapter(wrong_r, path)
    wrong_layers = fresh_net()
    inject_lora(wrong_layers, ["q_proj"], r=2)
    with pytest.raises(ValueError, match="start from a model without adapters"):
        load_adapter(wrong_layers, path)


def save_adapter_for_head(tmp_path):
    net = fresh_net(head_out=5)
    inject_lora(net, ["head"], r=2)
    return save_adapter(net, tmp_path / "head.safetensors")


def test_adapter_refuses_other_architecture_missing_and_corrupt_files(tmp_path):
    net = fresh_net()
    inject_lora(net, ["q_proj"], r=2)
    path = save_adapter(net, tmp_path / "a.safetensors")

    class Other(nn.Cell):
        def __init__(self):
            super().__init__()
            self.proj = nn.Dense(H, H)

        def construct(self, x):
            return self.proj(x)

    with pytest.raises(ValueError, match="does not have"):
        load_adapter(Other(), path)
    with pytest.raises(FileNotFoundError, match="No adapter file"):
        load_adapter(fresh_net(), tmp_path / "missing.safetensors")
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(path.read_bytes()[:40])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        load_adapter(fresh_net(), broken)
    from safetensors.numpy import save_file
    save_file({"w": np.zeros(3, np.float32)}, str(tmp_path / "plain.safetensors"))
    with pytest.raises(ValueError, match="not a course LoRA adapter"):
        load_adapter(fresh_net(), tmp_path / "plain.safetensors")
    with pytest.raises(ValueError, match="no LoRA adapters to save"):
        save_adapter(fresh_net(), tmp_path / "none.safetensors")


# ------------------------------------------------------------------------------ bad input
def test_target_matching_nothing_lists_close_names():
    with pytest.raises(ValueError, match=r"'q_porj' matches no nn.Dense.*'q_proj'"):
        inject_lora(fresh_net(), ["q_porj"], r=2)
    with pytest.raises(ValueError, match="not nn.Dense"):
        inject_lora(fresh_net(), ["self_attn"], r=2)
    with pytest.raises(ValueError, match="targets is empty"):
        inject_lora(fresh_net(), [], r=2)
    with pytest.raises(TypeError, match="non-empty str"):
        inject_lora(fresh_net(), [3], r=2)


@pytest.mark.parametrize("r, error, message", [
    (0, ValueError, "r must be >= 1"),
    (-2, ValueError, "r must be >= 1"),
    (17, ValueError, r"larger than .*in=16, out=16"),
    (2.0, TypeError, "must be an int"),
])
def test_bad_rank(r, error, message):
    net = fresh_net()
    with pytest.raises(error, match=message):
        inject_lora(net, ["q_proj"], r=r)
    assert not lora_layers(net)                # the model is left unchanged


def test_rank_checked_against_every_target_before_changing_anything():
    net = fresh_net(head_out=3)
    with pytest.raises(ValueError, match="'head'.*r <= 3"):
        inject_lora(net, ["q_proj", "head"], r=4)
    assert not lora_layers(net)


def test_bad_alpha_dropout_activation_and_double_injection():
    with pytest.raises(ValueError, match="alpha must be a positive"):
        inject_lora(fresh_net(), ["q_proj"], r=2, alpha=0)
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
        inject_lora(fresh_net(), ["q_proj"], r=2, dropout=1.0)
    with pytest.raises(ValueError, match="built-in activation"):
        LoRADense(nn.Dense(4, 4, activation="relu"), r=2, alpha=2)
    net = fresh_net()
    inject_lora(net, ["q_proj"], r=2)
    with pytest.raises(ValueError, match="already has LoRA adapters"):
        inject_lora(net, ["v_proj"], r=2)
    with pytest.raises(ValueError, match="inject only once"):
        LoRADense(lora_layers(net)["layers.0.self_attn.q_proj"], r=2, alpha=2)
