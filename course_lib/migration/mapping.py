"""PyTorch -> MindSpore, row by row, each row proved by running both frameworks.

Every entry of ``CHECKS`` builds the same inputs (NumPy, fixed seed), runs the PyTorch
call and the MindSpore translation, and returns a ``MappingRow`` with the measured
maximum absolute difference. Where a *tempting but wrong* translation exists (MindSpore's
different default ``epsilon``, GELU's tanh approximation, ``nn.AdamWeightDecay``...) the
row also measures that one, so the table shows why the correct row is the correct one.

    rows = run_checks()               # real PyTorch (CPU) + MindSpore, PyNative mode
    print(as_markdown(rows))

Must run in a process where ``torch`` is the real PyTorch, i.e. one that has NOT imported
``mindnlp``/``mindtorch`` (those replace ``import torch`` by a MindSpore-backed shim).
"""
from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..hf_weights import real_torch  # noqa: F401  (the file layer owns the torch import guard)
from ..runtime import execution_mode


# --------------------------------------------------------------------------------------
# Result types
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Alternative:
    """A tempting translation that is NOT equivalent, with what it measurably does."""

    api: str
    max_diff: float | None = None     # None when it raised instead of returning numbers
    error: str | None = None          # first line of the exception it raised

    def outcome(self) -> str:
        return f"max diff {self.max_diff:.1e}" if self.error is None else f"error: {self.error}"


@dataclass(frozen=True)
class MappingRow:
    topic: str
    torch_api: str
    mindspore_api: str
    note: str                         # what to watch out for (Chinese, for the notebook)
    max_diff: float                   # |torch - mindspore| with the correct translation
    tol: float
    alternatives: tuple[Alternative, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        return bool(np.isfinite(self.max_diff) and self.max_diff <= self.tol)

    @property
    def alternatives_differ(self) -> bool:
        """True when every listed wrong translation errs or differs beyond ``tol``."""
        return all(a.error is not None or a.max_diff > self.tol for a in self.alternatives)


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------
def _ms():
    import mindspore as ms
    return ms


def _diff(a, b) -> float:
    a, b = _np(a), _np(b)
    if a.shape != b.shape:
        raise AssertionError(f"shape mismatch: {a.shape} vs {b.shape}")
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0


def _np(x):
    if hasattr(x, "asnumpy"):
        return x.asnumpy()
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _first_line(exc: BaseException, limit: int = 120) -> str:
    """``Type: first line of the message`` (runs of spaces made one), at most ``limit``
    characters: a longer line is cut at a word boundary and ends in "…" (never in the
    middle of a word)."""
    text = str(exc).strip().splitlines()
    line = " ".join(f"{type(exc).__name__}: {text[0] if text else ''}".split())   # one space
    if len(line) <= limit:
        return line
    cut = line[:limit]                         # the "…" replaces the character at limit - 1
    space = cut.rfind(" ")
    cut = cut[:space] if space > limit // 2 else cut[:limit - 1]
    return cut.rstrip(" ,;:.") + "…"


def _rng(seed: int = 0):
    """NumPy generator for the inputs; also seeds torch (its modules initialise randomly)."""
    real_torch().manual_seed(seed)
    return np.random.default_rng(seed)


def _f32(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# --------------------------------------------------------------------------------------
# The checks (one function per row)
# --------------------------------------------------------------------------------------
def check_linear() -> MappingRow:
    torch, ms = real_torch(), _ms()
    from mindspore import nn, Tensor
    rng = _rng(1)
    x = _f32(rng, 4, 8)
    lin = torch.nn.Linear(8, 8)
    w, b = _np(lin.weight), _np(lin.bias)              # torch weight is (out, in)
    dense = nn.Dense(8, 8)                              # MindSpore weight is (out, in) too
    dense.weight.set_data(Tensor(w))
    dense.bias.set_data(Tensor(b))
    ref = lin(torch.tensor(x))
    good = _diff(ref, dense(Tensor(x)))
    # The classic slip (from Keras/TF, whose kernels are (in, out)): transposing. On a
    # square layer the shapes still fit, so nothing complains — the numbers are just wrong.
    dense.weight.set_data(Tensor(np.ascontiguousarray(w.T)))
    wrong = _diff(ref, dense(Tensor(x)))
    return MappingRow(
        "Linear -> Dense", "nn.Linear(in, out)", "nn.Dense(in, out)",
        "权重形状两边都是 (out, in)，直接拷贝，不要转置；y = x·Wᵀ + b。",
        good, 1e-5, (Alternative("Dense.weight = Linear.weight.T", wrong),))


def check_layernorm() -> MappingRow:
    torch, ms = real_torch(), _ms()
    from mindspore import nn, Tensor
    rng = _rng(2)
    # Small activations (std 0.01, variance 1e-4) make the epsilon visible.
    x = _f32(rng, 3, 5, 16, scale=0.01)
    ln = torch.nn.LayerNorm(16)                         # eps = 1e-5
    with torch.no_grad():
        ln.weight.copy_(torch.tensor(_f32(rng, 16)))
        ln.bias.copy_(torch.tensor(_f32(rng, 16)))
    ref = ln(torch.tensor(x))

    def ms_ln(**kw):
        cell = nn.LayerNorm((16,), **kw)
        cell.gamma.set_data(Tensor(_np(ln.weight)))
        cell.beta.set_data(Tensor(_np(ln.bias)))
        return cell(Tensor(x))

    good = _diff(ref, ms_ln(epsilon=1e-5))
    wrong = _diff(ref, ms_ln())                         # MindSpore default epsilon=1e-7
    return MappingRow(
        "LayerNorm", "nn.LayerNorm(h)  # eps=1e-5, weight/bias",
        "nn.LayerNorm((h,), epsilon=1e-5)  # gamma/beta",
        "MindSpore 默认 epsilon=1e-7（PyTorch 1e-5），须显式传入；参数名 weight/bias -> gamma/beta；"
        "normalized_shape 要写成元组。",
        good, 1e-5, (Alternative("nn.LayerNorm((h,))  # 默认 epsilon", wrong),))


def _rmsnorm_inputs():
    rng = _rng(3)
    return _f32(rng, 2, 6, 32), _f32(rng, 32)


def fused_rms_norm_fresh() -> dict:
    """``ops.rms_norm`` on the check's inputs, for :func:`check_rmsnorm`'s fresh process.

    Returns ``{"out": nested list}`` or ``{"error": first line}``. Run in its own process
    because a missing CPU kernel is reported by PyNative's asynchronous dispatch at some
    LATER operator (CI, 2026-12-04: the next check's Gather), which poisons the caller."""
    from mindspore import Tensor, ops
    x, w = _rmsnorm_inputs()
    try:
        return {"out": ops.rms_norm(Tensor(x), Tensor(w), 1e-6)[0].asnumpy().tolist()}
    except Exception as exc:  # noqa: BLE001 - we report whatever the backend says
        return {"error": _first_line(exc)}


def _fused_rmsnorm_row(ref) -> Alternative:
    from ..runtime import IsolatedError, run_isolated
    api = "ops.rms_norm(x, w, eps)"
    try:
        got = run_isolated(fused_rms_norm_fresh, timeout=300)
    except IsolatedError as exc:     # a crash of the backend is a result too
        return Alternative(api, error=f"process exited with code {exc.exit_code}")
    if "error" in got:
        return Alternative(api, error=got["error"])
    return Alternative(api, _diff(ref, np.asarray(got["out"], np.float32)))


def check_rmsnorm() -> MappingRow:
    torch, ms = real_torch(), _ms()
    from mindspore import Tensor, nn
    from ..layers import RMSNorm
    x, w = _rmsnorm_inputs()
    ref_cell = torch.nn.RMSNorm(32, eps=1e-6)
    with torch.no_grad():
        ref_cell.weight.copy_(torch.tensor(w))
    ref = ref_cell(torch.tensor(x))
    cell = RMSNorm(32, eps=1e-6)
    cell.weight.set_data(Tensor(w))
    good = _diff(ref, cell(Tensor(x)))
    # MindSpore's fused operator is in the API, but has it a CPU kernel? Asked in a fresh
    # process: see fused_rms_norm_fresh for why.
    alt = _fused_rmsnorm_row(ref)
    has_layer = "有" if hasattr(nn, "RMSNorm") else "没有"
    return MappingRow(
        "RMSNorm", "nn.RMSNorm(h, eps=1e-6)",
        "course_lib.layers.RMSNorm(h, eps=1e-6)  # x·rsqrt(mean(x²)+eps)·w",
        f"MindSpore {ms.__version__} 的 nn 里{has_layer} RMSNorm 层；融合算子 ops.rms_norm 见右列实测结果"
        "（在独立进程里测：缺 CPU kernel 的报错会在后面的算子处才抛出）。"
        "用 3 行基本算子实现，float32 计算。",
        good, 1e-5, (alt,))


def check_embedding() -> MappingRow:
    torch, ms = real_torch(), _ms()
    from mindspore import nn, Tensor
    rng = _rng(4)
    ids = rng.integers(0, 50, (3, 7))
    emb = torch.nn.Embedding(50, 16)
    cell = nn.Embedding(50, 16)
    cell.embedding_table.set_data(Tensor(_np(emb.weight)))
    want = emb(torch.tensor(ids))
    good = max(_diff(want, cell(Tensor(ids.astype(np.int32)))),      # both id dtypes it accepts
               _diff(want, cell(Tensor(ids.astype(np.int64)))))
    return MappingRow(
        "Embedding", "nn.Embedding(V, h)  # weight (V, h), ids int64",
        "nn.Embedding(V, h)  # embedding_table (V, h), ids int32 or int64",
        "权重同形状 (V, h)，参数名 weight -> embedding_table；id 可以是 int32 或 int64（本课程用 int32）。",
        good, 0.0)


def check_softmax_masked_fill() -> MappingRow:
    torch, ms = real_torch(), _ms()
    from mindspore import Tensor, ops
    rng = _rng(5)
    scores = _f32(rng, 2, 4, 6, 6)
    future = np.triu(np.ones((6, 6), dtype=bool), k=1)      # True = must not attend
    ref = torch.tensor(scores).masked_fill(torch.tensor(future), float("-inf")).softmax(dim=-1)
    got = ops.softmax(ops.masked_fill(Tensor(scores), Tensor(future), float("-inf")), axis=-1)
    return MappingRow(
        "softmax / masked_fill", "x.masked_fill(mask, -inf).softmax(dim=-1)",
        "ops.softmax(ops.masked_fill(x, mask, -inf), axis=-1)",
        "mask 为 True 的位置被填充，两边含义相同；参数名 dim -> axis（Tensor 方法也可用）。",
        _diff(ref, got), 1e-6)


def check_matmul_bmm() -> MappingRow:
    torch, ms = real_torch(), _ms()
    from mindspore import Tensor, ops
    rng = _rng(6)
    a4, b4 = _f32(rng, 2, 3, 5, 8), _f32(rng, 2, 3, 8, 4)   # broadcasting batched matmul
    a3, b3 = _f32(rng, 6, 5, 8), _f32(rng, 6, 8, 4)
    d1 = _diff(torch.matmul(torch.tensor(a4), torch.tensor(b4)), ops.matmul(Tensor(a4), Tensor(b4)))
    d2 = _diff(torch.bmm(torch.tensor(a3), torch.tensor(b3)), ops.bmm(Tensor(a3), Tensor(b3)))
    return MappingRow(
        "matmul / bmm", "torch.matmul(a, b); torch.bmm(a, b)", "ops.matmul(a, b); ops.bmm(a, b)",
        "语义相同（matmul 支持批维广播，bmm 要求 3 维）；a @ b 两边都可用。",
        max(d1, d2), 1e-5)


def check_view_reshape_permute() -> MappingRow:
    torch, ms = real_torch(), _ms()
    from mindspore import Tensor, ops
    rng = _rng(7)
    x = _f32(rng, 2, 5, 12)                                   # (B, T, H*D), H=3, D=4
    t = torch.tensor(x)
    m = Tensor(x)
    ref = [t.view(2, 5, 3, 4).permute(0, 2, 1, 3),            # split heads
           t.view(2, 5, 3, 4).transpose(1, 2),                # same, swapping two dims
           t.reshape(10, 12),
           t.view(2, 5, 3, 4).transpose(1, 2).contiguous().view(2, 3, 20),
           t.view(2, 5, 3, 4).transpose(1, 2)]
    got = [m.view(2, 5, 3, 4).permute(0, 2, 1, 3),
           ops.swapaxes(m.view(2, 5, 3, 4), 1, 2),
           m.reshape(10, 12),
           ops.transpose(m.view(2, 5, 3, 4), (0, 2, 1, 3)).view(2, 3, 20),
           m.view(2, 5, 3, 4).transpose(1, 2)]
    d = max(_diff(a, b) for a, b in zip(ref, got))
    return MappingRow(
        "view / reshape / permute", "x.view(...).permute(0,2,1,3); x.transpose(1,2)",
        "x.view(...).permute(0,2,1,3) 或 ops.transpose(x, perm); ops.swapaxes(x,1,2)",
        "ops.transpose 接收完整的维度排列（= torch.permute），交换两维用 ops.swapaxes"
        "（Tensor.transpose(1, 2) 在 MindSpore 2.7 中也按 PyTorch 的含义交换两维）。",
        d, 0.0)


def check_cross_entropy() -> MappingRow:
    torch, ms = real_torch(), _ms()
    from mindspore import Tensor, nn, ops
    rng = _rng(8)
    V = 11
    logits = _f32(rng, 2, 6, V)
    labels = rng.integers(0, V, (2, 6))
    labels[0, :2] = -100                                       # e.g. prompt tokens in SFT
    labels[1, 4:] = -100                                       # e.g. padding
    ref = torch.nn.functional.cross_entropy(torch.tensor(logits).view(-1, V),
                                            torch.tensor(labels).view(-1), ignore_index=-100)
    good = _diff(ref, ops.cross_entropy(Tensor(logits).view(-1, V),
                                        Tensor(labels.astype(np.int32)).view(-1), ignore_index=-100))
    try:   # the older sparse loss has no ignore_index at all
        sce = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        out = sce(Tensor(logits).view(-1, V), Tensor(labels.astype(np.int32)).view(-1))
        alt = Alternative("nn.SoftmaxCrossEntropyWithLogits(sparse=True)", _diff(ref, out))
    except Exception as exc:  # noqa: BLE001
        # the message ends with the offending label value: keep it (longer than the default)
        alt = Alternative("nn.SoftmaxCrossEntropyWithLogits(sparse=True)",
                          error=_first_line(exc, limit=160))
    # Edge case: every label ignored (e.g. a batch of pure padding).
    none = np.full(6, -100)
    t_none = float(torch.nn.functional.cross_entropy(torch.tensor(logits[0]), torch.tensor(none)))
    m_none = float(ops.cross_entropy(Tensor(logits[0]), Tensor(none.astype(np.int32))).asnumpy())
    return MappingRow(
        "CrossEntropy + ignore_index", "F.cross_entropy(logits, labels, ignore_index=-100)",
        "ops.cross_entropy(logits, labels, ignore_index=-100)  # 或 nn.CrossEntropyLoss",
        "均值只在未忽略的位置上取；标签用 int32；" + _all_ignored(t_none, m_none) +
        "（训练时要避免全是填充的批）。",
        good, 1e-5, (alt,))


def _all_ignored(torch_value: float, ms_value: float) -> str:
    """What the two frameworks return when every label is ignored (0 of 0 tokens)."""
    same = (np.isnan(torch_value) and np.isnan(ms_value)) or torch_value == ms_value
    if same:
        return f"全部被忽略时（0 个 token 求平均）两边都得到 {torch_value}"
    return f"全部被忽略时 PyTorch 得到 {torch_value}，MindSpore 得到 {ms_value}"


def _adamw_hparams():
    return dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


def check_adamw(steps: int = 3) -> MappingRow:
    torch, ms = real_torch(), _ms()
    from mindspore import Parameter, Tensor, nn
    from mindspore.experimental.optim import AdamW
    rng = _rng(9)
    w0 = _f32(rng, 5, 4)
    grads = [_f32(rng, 5, 4) for _ in range(steps)]
    hp = _adamw_hparams()

    tp = torch.nn.Parameter(torch.tensor(w0))
    topt = torch.optim.AdamW([tp], **hp)
    for g in grads:
        tp.grad = torch.tensor(g)
        topt.step()
    ref = _np(tp)

    def run(make_opt):
        p = Parameter(Tensor(w0), name="w")
        opt = make_opt([p])
        for g in grads:
            opt((Tensor(g),))
        return _diff(ref, p)

    good = run(lambda ps: AdamW(ps, **hp))
    alts = []
    # nn.AdamWeightDecay: decoupled decay like AdamW, but no bias correction (and eps 1e-6
    # by default) — the first steps are far smaller than PyTorch's.
    alts.append(Alternative(
        "nn.AdamWeightDecay(..., eps=1e-8)",
        run(lambda ps: nn.AdamWeightDecay(ps, learning_rate=hp["lr"], beta1=hp["betas"][0],
                                          beta2=hp["betas"][1], eps=hp["eps"],
                                          weight_decay=hp["weight_decay"]))))
    try:
        from mindspore import mint
        alts.append(Alternative("mint.optim.AdamW", run(lambda ps: mint.optim.AdamW(ps, **hp))))
    except Exception as exc:  # noqa: BLE001
        alts.append(Alternative("mint.optim.AdamW", error=_first_line(exc)))
    return MappingRow(
        f"AdamW ({steps} steps)",
        "optim.AdamW(p, lr, betas=(0.9,0.95), eps=1e-8, weight_decay=0.1)",
        "mindspore.experimental.optim.AdamW(p, lr, betas, eps, weight_decay)  # opt(grads)",
        "同名同义的超参数（含偏差修正、解耦的权重衰减 p -= lr·wd·p）；nn.AdamWeightDecay "
        "没有偏差修正、eps 默认 1e-6，数值不同。MindSpore 优化器以梯度元组为参数调用。",
        good, 1e-6, tuple(alts))


def check_clip_grad_norm() -> MappingRow:
    torch, ms = real_torch(), _ms()
    from mindspore import Tensor, ops
    rng = _rng(10)
    grads = [_f32(rng, 4, 3, scale=3.0), _f32(rng, 7, scale=3.0)]
    params = [torch.nn.Parameter(torch.zeros(g.shape)) for g in grads]
    for p, g in zip(params, grads):
        p.grad = torch.tensor(g)
    total = torch.nn.utils.clip_grad_norm_(params, max_norm=1.0)
    clipped = ops.clip_by_global_norm(tuple(Tensor(g) for g in grads), clip_norm=1.0)
    d = max(_diff(p.grad, c) for p, c in zip(params, clipped))
    # torch also returns the pre-clipping global norm; MindSpore: compute it yourself.
    norm = float(np.sqrt(sum(float((ops.norm(Tensor(g)) ** 2).asnumpy()) for g in grads)))
    d = max(d, abs(norm - float(total)) / float(total))
    return MappingRow(
        "clip_grad_norm", "nn.utils.clip_grad_norm_(params, 1.0)  # in place, returns norm",
        "grads = ops.clip_by_global_norm(grads, 1.0)  # returns new grads",
        "MindSpore 作用于梯度元组并返回新梯度（不原地修改、不返回范数，要自己算）；"
        "PyTorch 的缩放分母多加 1e-6，所以两边只差一个很小的量（这一行量到的差）。",
        d, 1e-6)


def check_no_grad() -> MappingRow:
    torch, ms = real_torch(), _ms()
    from mindspore import Parameter, Tensor, nn, ops
    rng = _rng(11)
    x = _f32(rng, 4, 6)
    w1, w2 = _f32(rng, 3, 6), _f32(rng, 3, 6)

    # PyTorch: w2 frozen (requires_grad=False), one term treated as a constant (detach).
    t1 = torch.tensor(w1, requires_grad=True)
    t2 = torch.tensor(w2, requires_grad=False)
    xt = torch.tensor(x)
    h = xt @ t1.T
    loss = (torch.tanh(h) * h.detach() + xt @ t2.T).sum()
    loss.backward()
    ref = t1.grad

    class Net(nn.Cell):
        def __init__(self, stop: bool):
            super().__init__()
            self.w1 = Parameter(Tensor(w1), name="w1")
            self.w2 = Parameter(Tensor(w2), name="w2", requires_grad=False)
            self.stop = stop

        def construct(self, x):
            h = ops.matmul(x, self.w1.T)
            const = ops.stop_gradient(h) if self.stop else h
            return (ops.tanh(h) * const + ops.matmul(x, self.w2.T)).sum()

    def grad_w1(stop: bool):
        net = Net(stop)
        weights = net.trainable_params()              # requires_grad=False ones are excluded
        assert [p.name for p in weights] == ["w1"], [p.name for p in weights]
        _, grads = ms.value_and_grad(net, None, weights)(Tensor(x))
        return grads[0]

    return MappingRow(
        "no_grad / detach / requires_grad",
        "with torch.no_grad(): ...; h.detach(); p.requires_grad = False",
        "ops.stop_gradient(h); Parameter(..., requires_grad=False) + net.trainable_params()",
        "MindSpore 求导只对传给 value_and_grad 的 weights 求梯度：冻结参数不放进去即可；"
        "某项当常数用 ops.stop_gradient（相当于 detach / no_grad 内计算）。",
        _diff(ref, grad_w1(True)), 1e-5,
        (Alternative("省略 stop_gradient", _diff(ref, grad_w1(False))),))


# ---- state_dict <-> MindSpore checkpoint ---------------------------------------------
def builtin_param_name(module_type: str, torch_suffix: str) -> str:
    """MindSpore's parameter name for a torch.nn built-in's parameter.

    Only three built-ins rename their parameters; everything else (Linear/Dense, course
    Cells such as RMSNorm) keeps ``weight``/``bias``."""
    renames = {"LayerNorm": {"weight": "gamma", "bias": "beta"},
               "Embedding": {"weight": "embedding_table"},
               "BatchNorm1d": {"weight": "gamma", "bias": "beta",
                               "running_mean": "moving_mean", "running_var": "moving_variance"}}
    return renames.get(module_type, {}).get(torch_suffix, torch_suffix)


def torch_state_to_mindspore(module) -> dict[str, np.ndarray]:
    """A torch module's ``state_dict`` as {MindSpore name: float32 array}."""
    types = {name: type(m).__name__ for name, m in module.named_modules()}
    out = {}
    for name, tensor in module.state_dict().items():
        owner, _, suffix = name.rpartition(".")
        ms_name = f"{owner}.{builtin_param_name(types.get(owner, ''), suffix)}" if owner else \
            builtin_param_name(types.get("", ""), suffix)
        out[ms_name] = _np(tensor)
    return out


def check_state_dict_checkpoint() -> MappingRow:
    torch, ms = real_torch(), _ms()
    from mindspore import Tensor, nn
    rng = _rng(12)
    ids = rng.integers(0, 40, (2, 5))

    class TorchNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(40, 16)
            self.norm = torch.nn.LayerNorm(16)
            self.proj = torch.nn.Linear(16, 40)

        def forward(self, ids):
            return self.proj(self.norm(self.emb(ids)))

    class MsNet(nn.Cell):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(40, 16)
            self.norm = nn.LayerNorm((16,), epsilon=1e-5)
            self.proj = nn.Dense(16, 40)

        def construct(self, ids):
            return self.proj(self.norm(self.emb(ids)))

    tnet = TorchNet()
    with torch.no_grad():
        tnet.norm.weight.copy_(torch.tensor(_f32(rng, 16)))
    ref = tnet(torch.tensor(ids))
    params = torch_state_to_mindspore(tnet)
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "net.ckpt")
        ms.save_checkpoint([{"name": k, "data": Tensor(v)} for k, v in params.items()], path)
        net = MsNet()
        not_loaded, unused = ms.load_param_into_net(net, ms.load_checkpoint(path), strict_load=True)
    if not_loaded or unused:
        raise AssertionError(f"checkpoint did not match the network: missing {not_loaded}, "
                             f"unused {unused}")
    got = net(Tensor(ids.astype(np.int32)))
    # Loading with the torch names leaves the renamed parameters at their initial values.
    raw = {k: Tensor(_np(v)) for k, v in tnet.state_dict().items()}
    net2 = MsNet()
    missing, _ = ms.load_param_into_net(net2, {k: ms.Parameter(v, name=k) for k, v in raw.items()})
    alt = Alternative(f"torch 名字原样加载（{len(missing)} 个参数未加载）",
                      _diff(ref, net2(Tensor(ids.astype(np.int32)))))
    return MappingRow(
        "state_dict <-> checkpoint", "model.state_dict(); torch.save / model.load_state_dict",
        "net.parameters_dict(); ms.save_checkpoint / ms.load_checkpoint + ms.load_param_into_net",
        "按 MindSpore 名字（gamma/beta/embedding_table）保存；load_param_into_net 返回 "
        "(未加载的参数, 未使用的键)，两者都应为空——名字不匹配时它不会报错！",
        _diff(ref, got), 1e-5, (alt,))


def check_gelu() -> MappingRow:
    torch, ms = real_torch(), _ms()
    from mindspore import Tensor, nn
    rng = _rng(13)
    x = _f32(rng, 4, 32, scale=2.0)
    ref = torch.nn.GELU()(torch.tensor(x))                # exact (erf) by default
    good = _diff(ref, nn.GELU(approximate=False)(Tensor(x)))
    wrong = _diff(ref, nn.GELU()(Tensor(x)))               # MindSpore default: tanh approx.
    return MappingRow(
        "GELU", "nn.GELU()  # exact erf", "nn.GELU(approximate=False)",
        "默认值相反：MindSpore nn.GELU 默认 tanh 近似，PyTorch 默认精确 erf。",
        good, 1e-6, (Alternative("nn.GELU()  # 默认 approximate=True", wrong),))


CHECKS: dict[str, Callable[[], MappingRow]] = {
    "linear": check_linear,
    "layernorm": check_layernorm,
    "rmsnorm": check_rmsnorm,
    "embedding": check_embedding,
    "softmax_masked_fill": check_softmax_masked_fill,
    "matmul_bmm": check_matmul_bmm,
    "view_reshape_permute": check_view_reshape_permute,
    "cross_entropy": check_cross_entropy,
    "gelu": check_gelu,
    "adamw": check_adamw,
    "clip_grad_norm": check_clip_grad_norm,
    "no_grad": check_no_grad,
    "state_dict": check_state_dict_checkpoint,
}


def run_checks(names=None) -> list[MappingRow]:
    """Run the named checks (all by default) in PyNative mode; returns one row each."""
    names = list(CHECKS) if names is None else list(names)
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise KeyError(f"Unknown mapping check(s) {unknown}; available: {list(CHECKS)}")
    real_torch()
    with execution_mode("pynative"):
        return [CHECKS[n]() for n in names]


def as_markdown(rows) -> str:
    """The table for the notebook: generated from measured rows, never typed."""
    lines = ["| 主题 | PyTorch | MindSpore | 实测最大差 | 通过 | 容易写错的译法（实测） | 注意 |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        alts = "<br>".join(f"`{a.api}` → {a.outcome()}" for a in r.alternatives) or "—"
        lines.append(f"| {r.topic} | `{r.torch_api}` | `{r.mindspore_api}` | {r.max_diff:.1e} "
                     f"| {'✅' if r.passed else '❌'} | {alts} | {r.note} |")
    return "\n".join(lines)


def summary_lines(rows) -> list[str]:
    """Deterministic one-liners (booleans only) for checked notebook output."""
    return [f"{r.topic:34s} passed={r.passed}  wrong-translation-differs="
            f"{r.alternatives_differ if r.alternatives else '-'}" for r in rows]


if __name__ == "__main__":  # python -m course_lib.migration.mapping
    import course_lib as cl
    cl.setup(device="CPU", quiet=True)
    print(as_markdown(run_checks()))
    sys.exit(0)
