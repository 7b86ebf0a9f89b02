"""course_lib.blocks against independent references: PyTorch's own Transformer layers (real
torch on CPU, weights copied over) and a NumPy attention written from the formula."""
import mindspore as ms
import numpy as np
import pytest
import torch

from course_lib import blocks

E, H, F = 16, 4, 32


def _np(t):
    return torch.tensor(t.asnumpy())


def _torch_encoder_layer(block: blocks.TransformerBlock, norm_first: bool):
    p = {n: _np(v) for n, v in block.parameters_and_names()}
    layer = torch.nn.TransformerEncoderLayer(E, H, F, dropout=0.0, activation="gelu",
                                             batch_first=True, norm_first=norm_first)
    with torch.no_grad():
        a = layer.self_attn
        a.in_proj_weight.copy_(torch.cat([p[f"attn.{k}_proj.weight"] for k in "qkv"]))
        a.in_proj_bias.copy_(torch.cat([p[f"attn.{k}_proj.bias"] for k in "qkv"]))
        a.out_proj.weight.copy_(p["attn.out_proj.weight"])
        a.out_proj.bias.copy_(p["attn.out_proj.bias"])
        layer.linear1.weight.copy_(p["ffn.fc1.weight"])
        layer.linear1.bias.copy_(p["ffn.fc1.bias"])
        layer.linear2.weight.copy_(p["ffn.fc2.weight"])
        layer.linear2.bias.copy_(p["ffn.fc2.bias"])
        for i in (1, 2):
            getattr(layer, f"norm{i}").weight.copy_(p[f"norm{i}.gamma"])
            getattr(layer, f"norm{i}").bias.copy_(p[f"norm{i}.beta"])
    return layer.eval()


def _randomise(cell, seed=0):
    """Non-trivial LayerNorm/bias values so a swapped parameter cannot go unnoticed."""
    rng = np.random.default_rng(seed)
    for _, p in cell.parameters_and_names():
        p.set_data(ms.Tensor(rng.normal(0, 0.3, p.shape).astype(np.float32)))


@pytest.mark.parametrize("norm_first", [True, False])
def test_transformer_block_matches_torch_encoder_layer(norm_first):
    block = blocks.TransformerBlock(E, H, F, norm_first=norm_first)
    _randomise(block)
    block.set_train(False)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 7, E)).astype(np.float32)
    pad = np.zeros((3, 7), bool)
    pad[1, 5:] = True
    pad[2, 2:] = True
    ours = block(ms.Tensor(x), ms.Tensor(pad), blocks.causal_mask(7)).asnumpy()
    ref = _torch_encoder_layer(block, norm_first)(
        torch.tensor(x), src_mask=torch.tensor(blocks.causal_mask(7).asnumpy()),
        src_key_padding_mask=torch.tensor(pad)).detach().numpy()
    assert ours.shape == (3, 7, E)
    np.testing.assert_allclose(ours, ref, atol=2e-5, rtol=1e-4)


def test_cross_attention_matches_torch_multihead_attention_with_kdim():
    kv_dim, T, S = 12, 5, 9
    cross = blocks.CrossAttention(E, H, kv_dim=kv_dim)
    _randomise(cross, seed=2)
    rng = np.random.default_rng(3)
    q = rng.normal(size=(2, T, E)).astype(np.float32)
    ctx = rng.normal(size=(2, S, kv_dim)).astype(np.float32)
    kpm = np.zeros((2, S), bool)
    kpm[0, 6:] = True
    am = np.zeros((T, S), bool)
    am[0, :3] = True          # query 0 may not see context 0..2
    ours = cross(ms.Tensor(q), ms.Tensor(ctx), ms.Tensor(kpm), ms.Tensor(am)).asnumpy()

    p = {n: _np(v) for n, v in cross.parameters_and_names()}
    ref = torch.nn.MultiheadAttention(E, H, kdim=kv_dim, vdim=kv_dim, batch_first=True)
    with torch.no_grad():
        ref.q_proj_weight.copy_(p["q_proj.weight"])
        ref.k_proj_weight.copy_(p["k_proj.weight"])
        ref.v_proj_weight.copy_(p["v_proj.weight"])
        ref.in_proj_bias.copy_(torch.cat([p["q_proj.bias"], p["k_proj.bias"], p["v_proj.bias"]]))
        ref.out_proj.weight.copy_(p["out_proj.weight"])
        ref.out_proj.bias.copy_(p["out_proj.bias"])
    out, _ = ref(torch.tensor(q), torch.tensor(ctx), torch.tensor(ctx),
                 key_padding_mask=torch.tensor(kpm), attn_mask=torch.tensor(am))
    np.testing.assert_allclose(ours, out.detach().numpy(), atol=2e-5, rtol=1e-4)


def _numpy_attention(q_in, ctx, w, num_heads, mask):
    """Multi-head attention from the formula, in float64."""
    def lin(x, name):
        return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]
    b, t, e = q_in.shape
    s, d = ctx.shape[1], e // num_heads
    split = lambda x, n: x.reshape(b, n, num_heads, d).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = split(lin(q_in, "q_proj"), t), split(lin(ctx, "k_proj"), s), split(lin(ctx, "v_proj"), s)
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d)
    scores = np.where(mask[:, None], -np.inf, scores)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    out = (weights @ v).transpose(0, 2, 1, 3).reshape(b, t, e)
    return lin(out, "out_proj")


def test_cross_attention_per_example_mask_matches_numpy_formula():
    T, S = 4, 6
    cross = blocks.CrossAttention(E, H)
    _randomise(cross, seed=4)
    rng = np.random.default_rng(5)
    q = rng.normal(size=(2, T, E)).astype(np.float32)
    ctx = rng.normal(size=(2, S, E)).astype(np.float32)
    am = rng.random((2, T, S)) < 0.4
    am[..., 0] = False        # keep one visible key per row (fully masked rows are undefined)
    ours = cross(ms.Tensor(q), ms.Tensor(ctx), attn_mask=ms.Tensor(am)).asnumpy()
    w = {n: v.asnumpy().astype(np.float64) for n, v in cross.parameters_and_names()}
    ref = _numpy_attention(q.astype(np.float64), ctx.astype(np.float64), w, H, am)
    np.testing.assert_allclose(ours, ref, atol=1e-5, rtol=1e-4)


def test_masked_context_positions_do_not_influence_the_output():
    cross = blocks.CrossAttention(E, H)
    rng = np.random.default_rng(6)
    q = ms.Tensor(rng.normal(size=(1, 3, E)).astype(np.float32))
    ctx = rng.normal(size=(1, 8, E)).astype(np.float32)
    kpm = np.zeros((1, 8), bool)
    kpm[0, 5:] = True
    changed = ctx.copy()
    changed[0, 5:] = 100.0    # garbage in the padded slots
    a = cross(q, ms.Tensor(ctx), ms.Tensor(kpm)).asnumpy()
    b = cross(q, ms.Tensor(changed), ms.Tensor(kpm)).asnumpy()
    c = cross(q, ms.Tensor(changed)).asnumpy()   # without the mask the garbage leaks in
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 1e-3


def test_causal_self_attention_ignores_the_future():
    attn = blocks.SelfAttention(E, H)
    rng = np.random.default_rng(7)
    x = rng.normal(size=(1, 6, E)).astype(np.float32)
    y = x.copy()
    y[0, 4:] = rng.normal(size=(2, E))
    mask = blocks.causal_mask(6)
    a = attn(ms.Tensor(x), attn_mask=mask).asnumpy()
    b = attn(ms.Tensor(y), attn_mask=mask).asnumpy()
    np.testing.assert_allclose(a[0, :4], b[0, :4], atol=1e-6)
    assert np.abs(a[0, 4:] - b[0, 4:]).max() > 1e-3


@pytest.mark.parametrize("embed_dim,heads,ffn", [(16, 4, 32), (32, 8, 128), (48, 3, 100)])
def test_parameter_count_formula_equals_counted(embed_dim, heads, ffn):
    block = blocks.TransformerBlock(embed_dim, heads, ffn)
    assert blocks.count_parameters(block) == blocks.transformer_block_param_count(embed_dim, ffn)
    cross = blocks.CrossAttention(embed_dim, heads, kv_dim=20)
    assert blocks.count_parameters(cross) == blocks.attention_param_count(embed_dim, kv_dim=20)
    # and the same as torch's layer of identical shape (an independent count)
    ref = torch.nn.TransformerEncoderLayer(embed_dim, heads, ffn, batch_first=True)
    assert blocks.count_parameters(block) == sum(p.numel() for p in ref.parameters())


def test_requires_grad_false_removes_parameters_from_trainable_params():
    block = blocks.TransformerBlock(E, H, F)
    total = blocks.count_parameters(block)
    for p in block.ffn.get_parameters():
        p.requires_grad = False
    assert blocks.count_parameters(block, trainable_only=True) == total - (2 * E * F + F + E)
    assert blocks.count_parameters(block) == total
    # a list of Parameters counts the same way
    assert blocks.count_parameters(list(block.get_parameters())) == total
    trainable = blocks.count_parameters(block.get_parameters(), trainable_only=True)
    assert trainable == total - (2 * E * F + F + E)
    assert blocks.count_parameters(block.ffn.get_parameters()) == 2 * E * F + F + E


def test_encoder_stack_has_final_norm_only_when_pre_norm():
    pre = blocks.TransformerEncoder(2, E, H, F, norm_first=True)
    post = blocks.TransformerEncoder(2, E, H, F, norm_first=False)
    per_block = blocks.transformer_block_param_count(E, F)
    assert blocks.count_parameters(pre) == 2 * per_block + 2 * E
    assert blocks.count_parameters(post) == 2 * per_block
    out = pre(ms.Tensor(np.ones((2, 3, E), np.float32)))
    assert out.shape == (2, 3, E)


# --- clear errors on bad input ---------------------------------------------------------

def test_wrong_rank_and_width_give_clear_errors():
    block = blocks.TransformerBlock(E, H, F)
    with pytest.raises(ValueError, match=r"TransformerBlock input must have shape \(batch, seq, 16\).*rank 2"):
        block(ms.Tensor(np.ones((5, E), np.float32)))
    with pytest.raises(ValueError, match="has 8 features in its last axis, but this layer was built for 16"):
        block(ms.Tensor(np.ones((2, 5, 8), np.float32)))
    cross = blocks.CrossAttention(E, H, kv_dim=12)
    q = ms.Tensor(np.ones((2, 3, E), np.float32))
    with pytest.raises(ValueError, match="key/value input has 16 features.*built for 12"):
        cross(q, q)
    with pytest.raises(ValueError, match="query has batch size 2 but key/value input has 3"):
        cross(q, ms.Tensor(np.ones((3, 4, 12), np.float32)))
    with pytest.raises(ValueError, match="FeedForward input"):
        blocks.FeedForward(E, F)(ms.Tensor(np.ones((E,), np.float32)))


def test_bad_masks_give_clear_errors():
    attn = blocks.SelfAttention(E, H)
    x = ms.Tensor(np.ones((2, 5, E), np.float32))
    with pytest.raises(ValueError, match=r"key_padding_mask must have shape \(batch, src_len\) = \(2, 5\), got \(2, 4\)"):
        attn(x, ms.Tensor(np.zeros((2, 4), bool)))
    with pytest.raises(TypeError, match="key_padding_mask must be a bool Tensor"):
        attn(x, ms.Tensor(np.zeros((2, 5), np.int32)))
    with pytest.raises(ValueError, match=r"attn_mask must have shape \(tgt_len, src_len\) = \(5, 5\)"):
        attn(x, attn_mask=blocks.causal_mask(4))


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="embed_dim=10 is not divisible by num_heads=4"):
        blocks.SelfAttention(10, 4)
    with pytest.raises(ValueError, match="length >= 1"):
        blocks.causal_mask(0)
    with pytest.raises(ValueError, match="num_layers must be >= 1"):
        blocks.TransformerEncoder(0, E, H, F)


def test_shape_errors_are_raised_in_graph_mode_too(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # a failed graph compile writes rank_0/om/analyze_fail.ir here
    ms.set_context(mode=ms.GRAPH_MODE)
    block = blocks.TransformerBlock(E, H, F)
    with pytest.raises(ValueError, match="TransformerBlock input must have shape"):
        block(ms.Tensor(np.ones((5, E), np.float32)))
    ok = block(ms.Tensor(np.ones((1, 5, E), np.float32)))
    assert ok.shape == (1, 5, E)
