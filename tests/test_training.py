"""course_lib.training against independent references: real torch (CPU) and closed forms."""
import math

import mindspore as ms
import numpy as np
import pytest
import torch
from mindspore import Parameter, Tensor, nn

from course_lib.pipelines import IGNORE_INDEX
from course_lib.runtime import execution_mode
from course_lib.training import (AdamW, LossCell, TrainStep, causal_lm_loss, select_trainable,
                                 token_nll, warmup_cosine_lr, apply_amp)
from tiny_lm import TinyLM


def _random_lm_batch(seed=0, b=3, t=7, v=11, ignore_frac=0.3):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(b, t, v)).astype(np.float32) * 3
    labels = rng.integers(0, v, size=(b, t)).astype(np.int32)
    labels[rng.random((b, t)) < ignore_frac] = IGNORE_INDEX
    return logits, labels


# --- loss ---------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_causal_lm_loss_matches_torch_cross_entropy(seed):
    logits, labels = _random_lm_batch(seed)
    ours = float(causal_lm_loss(Tensor(logits), Tensor(labels)).asnumpy())
    ref = torch.nn.functional.cross_entropy(torch.from_numpy(logits).reshape(-1, 11),
                                            torch.from_numpy(labels).long().reshape(-1),
                                            ignore_index=-100).item()
    assert ours == pytest.approx(ref, rel=1e-5)


def test_token_nll_counts_only_kept_tokens():
    logits, labels = _random_lm_batch(3)
    total, count = token_nll(Tensor(logits), Tensor(labels))
    assert int(count.asnumpy()) == int((labels != IGNORE_INDEX).sum())
    ref = torch.nn.functional.cross_entropy(torch.from_numpy(logits).reshape(-1, 11),
                                            torch.from_numpy(labels).long().reshape(-1),
                                            ignore_index=-100, reduction="sum").item()
    assert float(total.asnumpy()) == pytest.approx(ref, rel=1e-5)


def test_all_ignored_labels_give_zero_loss_not_nan():
    logits, labels = _random_lm_batch(0)
    labels[:] = IGNORE_INDEX
    assert float(causal_lm_loss(Tensor(logits), Tensor(labels)).asnumpy()) == 0.0


def test_loss_rejects_wrong_shapes():
    logits, labels = _random_lm_batch(0)
    with pytest.raises(ValueError, match="logits must be 3-D"):
        causal_lm_loss(Tensor(logits[0]), Tensor(labels[0]))
    with pytest.raises(ValueError, match="labels must have shape"):
        causal_lm_loss(Tensor(logits), Tensor(labels[:, :-1]))


# --- schedule -----------------------------------------------------------------------------
def test_warmup_cosine_shape():
    base, total, warm, floor = 1e-3, 50, 10, 1e-4
    lrs = warmup_cosine_lr(base, total, warm, floor)
    assert len(lrs) == total
    assert lrs[0] == pytest.approx(base / warm)             # first step already learns
    assert all(a < b for a, b in zip(lrs[:warm], lrs[1:warm]))  # strictly rising warm-up
    assert lrs[warm - 1] == pytest.approx(base) and lrs[warm] == pytest.approx(base)
    assert all(a >= b for a, b in zip(lrs[warm:], lrs[warm + 1:]))  # never rises after
    assert min(lrs) >= floor
    # halfway through the decay the cosine is exactly at the midpoint
    mid = warm + (total - warm) // 2
    assert lrs[mid] == pytest.approx((base + floor) / 2)
    assert lrs[-1] == pytest.approx(floor + (base - floor) * 0.5 * (1 + math.cos(math.pi * 39 / 40)))


def test_warmup_cosine_decay_matches_hugging_face():
    from transformers import get_cosine_schedule_with_warmup
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2e-3)
    sched = get_cosine_schedule_with_warmup(opt, num_warmup_steps=5, num_training_steps=30)
    hf = []
    for _ in range(30):
        hf.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    ours = warmup_cosine_lr(2e-3, 30, 5)
    np.testing.assert_allclose(ours[5:], hf[5:], rtol=1e-9)        # decay: identical
    np.testing.assert_allclose(ours[:4], hf[1:5], rtol=1e-9)       # warm-up: one step earlier


@pytest.mark.parametrize("kwargs, match", [
    (dict(base_lr=1e-3, total_steps=0, warmup_steps=0), "total_steps"),
    (dict(base_lr=1e-3, total_steps=10, warmup_steps=11), "warmup_steps"),
    (dict(base_lr=1e-3, total_steps=10, warmup_steps=1, min_lr=1e-2), "min_lr"),
])
def test_warmup_cosine_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        warmup_cosine_lr(**kwargs)


# --- AdamW --------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["pynative", "graph"])
def test_adamw_matches_torch_adamw_with_decoupled_decay(mode):
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=(4, 3)).astype(np.float32)
    b0 = rng.normal(size=(3,)).astype(np.float32)
    grads = [(rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=(3,)).astype(np.float32))
             for _ in range(5)]
    lrs = warmup_cosine_lr(0.05, 5, 2)

    w, b = Parameter(Tensor(w0), name="w"), Parameter(Tensor(b0), name="b")
    opt = AdamW([w, b], lrs, beta1=0.8, beta2=0.95, eps=1e-6, weight_decay=0.3)
    with execution_mode(mode):
        for gw, gb in grads:
            opt((Tensor(gw), Tensor(gb)))

    tw, tb = torch.nn.Parameter(torch.from_numpy(w0.copy())), torch.nn.Parameter(torch.from_numpy(b0.copy()))
    # the default decay filter decays matrices only: the bias goes in a no-decay group
    topt = torch.optim.AdamW([{"params": [tw], "weight_decay": 0.3},
                              {"params": [tb], "weight_decay": 0.0}],
                             lr=lrs[0], betas=(0.8, 0.95), eps=1e-6)
    for i, (gw, gb) in enumerate(grads):
        for g in topt.param_groups:
            g["lr"] = lrs[i]
        tw.grad, tb.grad = torch.from_numpy(gw), torch.from_numpy(gb)
        topt.step()
    np.testing.assert_allclose(w.asnumpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.asnumpy(), tb.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert int(opt.global_step.asnumpy()[0]) == 5


def test_adamw_float16_parameter_matches_torch_rounded_each_step():
    # float16 parameters skip the fused float32 kernel: float32 moments and math, the result
    # stored in float16. Reference: torch AdamW on float32, rounded to float16 after each step.
    rng = np.random.default_rng(5)
    w0 = rng.normal(size=(4, 3)).astype(np.float16)
    grads = [rng.normal(size=(4, 3)).astype(np.float16) for _ in range(4)]
    w = Parameter(Tensor(w0), name="w16")
    opt = AdamW([w], 0.01, weight_decay=0.1)
    tw = torch.nn.Parameter(torch.from_numpy(w0.astype(np.float32)))
    topt = torch.optim.AdamW([tw], lr=0.01, weight_decay=0.1)
    for g in grads:
        opt((Tensor(g),))
        tw.grad = torch.from_numpy(g.astype(np.float32))
        topt.step()
        with torch.no_grad():
            tw.copy_(tw.half().float())
    assert w.dtype == ms.float16 and opt.moments1[0].dtype == ms.float32
    np.testing.assert_allclose(w.asnumpy().astype(np.float32), tw.detach().numpy(), atol=1e-3)


def test_adamw_rejects_empty_parameter_list():
    with pytest.raises(ValueError, match="no parameters"):
        AdamW([], 1e-3)


# --- TrainStep ----------------------------------------------------------------------------
def _torch_twin(model: TinyLM):
    """The same TinyLM in torch, weights copied, for an independent gradient reference."""
    cfg = model.config

    class T(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(cfg.vocab_size, cfg.hidden_size)
            self.norm = torch.nn.LayerNorm(cfg.hidden_size, eps=1e-7)
            self.mix = torch.nn.Linear(cfg.hidden_size, cfg.hidden_size)
            self.head = torch.nn.Linear(cfg.hidden_size, cfg.vocab_size)

        def forward(self, ids):
            h = self.embed(ids)
            steps = torch.arange(1, h.shape[1] + 1, dtype=h.dtype).reshape(1, -1, 1)
            h = h + torch.tanh(self.mix(torch.cumsum(h, 1) / steps))
            return self.head(self.norm(h))

    t = T()
    src = {p.name: torch.from_numpy(p.asnumpy().copy()) for p in model.get_parameters()}
    with torch.no_grad():
        t.embed.weight.copy_(src["embed.embedding_table"])
        t.norm.weight.copy_(src["norm.gamma"]); t.norm.bias.copy_(src["norm.beta"])
        t.mix.weight.copy_(src["mix.weight"]); t.mix.bias.copy_(src["mix.bias"])
        t.head.weight.copy_(src["head.weight"]); t.head.bias.copy_(src["head.bias"])
    return t


@pytest.mark.parametrize("mode", ["pynative", "graph"])
def test_train_step_clips_like_torch_and_updates(mode):
    ms.set_seed(1)
    model = TinyLM()
    ref = _torch_twin(model)
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 64, (4, 9)).astype(np.int32)
    labels = rng.integers(0, 64, (4, 9)).astype(np.int32)
    labels[:, :3] = IGNORE_INDEX

    # torch reference: loss, gradient norm, clipped SGD update with lr 0.1
    tloss = torch.nn.functional.cross_entropy(ref(torch.from_numpy(ids).long()).reshape(-1, 64),
                                              torch.from_numpy(labels).long().reshape(-1),
                                              ignore_index=-100)
    tloss.backward()
    tnorm = torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm=0.5).item()
    with torch.no_grad():
        for p in ref.parameters():
            p -= 0.1 * p.grad

    step = TrainStep(LossCell(model), nn.SGD(model.trainable_params(), 0.1), clip=0.5)
    with execution_mode(mode):
        loss, norm = step(Tensor(ids), Tensor(labels))
    assert float(loss.asnumpy()) == pytest.approx(tloss.item(), rel=1e-5)
    assert float(norm.asnumpy()) == pytest.approx(tnorm, rel=1e-4)
    assert tnorm > 0.5  # the clipping really did something in this test
    np.testing.assert_allclose(model.head.weight.asnumpy(), ref.head.weight.detach().numpy(),
                               rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(model.embed.embedding_table.asnumpy(),
                               ref.embed.weight.detach().numpy(), rtol=1e-4, atol=1e-6)


def test_train_step_leaves_frozen_parameters_bit_identical():
    model = TinyLM()
    subset = select_trainable(model, lambda name: name.startswith("head."))
    frozen = {p.name: p.asnumpy().copy() for p in model.trainable_params()
              if not p.name.startswith("head.")}
    head_before = model.head.weight.asnumpy().copy()
    step = TrainStep(LossCell(model), AdamW(subset, 1e-2, weight_decay=0.1), clip=1.0)
    rng = np.random.default_rng(0)
    for _ in range(3):
        step(Tensor(rng.integers(0, 64, (2, 8)).astype(np.int32)),
             Tensor(rng.integers(0, 64, (2, 8)).astype(np.int32)))
    for p in model.trainable_params():
        if p.name in frozen:
            assert np.array_equal(p.asnumpy(), frozen[p.name]), p.name
    assert not np.array_equal(model.head.weight.asnumpy(), head_before)
    assert len(step.optimizer.parameters) == 2  # head.weight, head.bias only


def test_select_trainable_errors():
    model = TinyLM()
    with pytest.raises(ValueError, match="selection is empty"):
        select_trainable(model, lambda n: "lora" in n)
    other = TinyLM()
    with pytest.raises(ValueError, match="not trainable parameters of this model"):
        select_trainable(model, other.trainable_params())


@pytest.mark.parametrize("level, head_dtype", [("O0", ms.float32), ("O1", ms.float16),
                                               ("O2", ms.float16), ("O3", ms.float16)])
def test_amp_levels_cast_in_place(level, head_dtype):
    model = TinyLM()
    names = [p.name for p in model.get_parameters()]
    assert apply_amp(model, level) is model
    assert [p.name for p in model.get_parameters()] == names     # filters/checkpoints still work
    hidden = Tensor(np.ones((1, 2, 16), np.float32))
    assert model.head(hidden).dtype == head_dtype
    assert all(p.dtype == ms.float32 for p in model.get_parameters())   # fp32 master weights


def test_float16_o2_step_runs_on_cpu_without_dynamic_loss_scaling():
    model = apply_amp(TinyLM(), "O2")
    step = TrainStep(LossCell(model), AdamW(model.trainable_params(), 1e-2), clip=1.0,
                     loss_scale=128.0)
    rng = np.random.default_rng(0)
    ids = Tensor(rng.integers(0, 64, (4, 8)).astype(np.int32))
    losses = [float(step(ids, ids)[0].asnumpy()) for _ in range(8)]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    with pytest.raises(ValueError, match="amp_level"):
        apply_amp(TinyLM(), "O5")


def test_clipping_equals_ops_clip_by_global_norm():
    from mindspore import ops
    from course_lib.training import global_norm
    rng = np.random.default_rng(0)
    grads = tuple(Tensor(rng.normal(size=s).astype(np.float32)) for s in [(3, 4), (5,), (2, 2)])
    norm = global_norm(grads)
    ref = ops.clip_by_global_norm(grads, 0.7)
    factor = 0.7 / max(float(norm.asnumpy()), 0.7)
    for g, r in zip(grads, ref):
        np.testing.assert_allclose(g.asnumpy() * factor, r.asnumpy(), rtol=1e-5, atol=1e-7)
