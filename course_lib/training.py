"""The training core every chapter from 04 on builds on.

* :func:`causal_lm_loss` — mean next-token cross-entropy over the labels that are not
  ``IGNORE_INDEX`` (labels arrive already shifted, as ``course_lib.pipelines`` yields them).
* :func:`warmup_cosine_lr` — linear warm-up then cosine decay, as a per-step list: MindSpore
  optimizers accept such a list as a *dynamic* learning rate (indexed by ``global_step``
  inside the compiled step, so no Python callback has to touch the optimizer).
* :class:`AdamW` — Adam with *decoupled* weight decay and bias correction, the update of
  ``torch.optim.AdamW`` (MindSpore's ``nn.AdamWeightDecay`` skips bias correction).
* :class:`TrainStep` — forward + loss -> gradients of the trainable parameters only ->
  global-norm clipping -> optimizer update, in one Cell that runs in GRAPH and PYNATIVE mode.

    net = TrainStep(LossCell(model), AdamW(params, warmup_cosine_lr(1e-3, 200, 20)), clip=1.0)
    loss, grad_norm = net(input_ids, labels)
"""
from __future__ import annotations

import math
from typing import Callable

import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops
from mindspore.ops import composite as C

from .pipelines import IGNORE_INDEX

AMP_LEVELS = ("O0", "O1", "O2", "O3")


# --------------------------------------------------------------------------------------
# Loss
# --------------------------------------------------------------------------------------
def _check_lm_shapes(logits, labels):
    if logits.ndim != 3:
        raise ValueError(f"logits must be 3-D (batch, seq_len, vocab), got shape {logits.shape}.")
    if labels.ndim != 2 or tuple(labels.shape) != tuple(logits.shape[:2]):
        raise ValueError(f"labels must have shape (batch, seq_len) = {tuple(logits.shape[:2])} "
                         f"to match the logits, got {labels.shape}. Labels are the inputs "
                         "shifted by one (see course_lib.pipelines).")


def token_nll(logits, labels, ignore_index: int = IGNORE_INDEX):
    """Summed negative log-likelihood of the target tokens and how many targets counted.

    Returns ``(nll_sum, n_tokens)`` as float32 scalars; positions whose label equals
    ``ignore_index`` (prompt tokens in SFT, padding) contribute to neither.
    """
    _check_lm_shapes(logits, labels)
    vocab = logits.shape[-1]
    logits = logits.reshape(-1, vocab).astype(ms.float32)   # fp16 logits: softmax in fp32
    labels = labels.reshape(-1).astype(ms.int32)
    keep = labels != ignore_index
    # Any other negative label is a bug in the data, never a class: poison it with NaN (a
    # compiled step cannot raise on values; LLMTrainer checks its batches beforehand).
    invalid = ops.logical_and(keep, labels < 0)
    safe = ops.where(ops.logical_and(keep, labels >= 0), labels, ops.zeros_like(labels))
    log_probs = ops.log_softmax(logits, -1)
    nll = -ops.gather_elements(log_probs, 1, safe.reshape(-1, 1)).reshape(-1)
    nll = ops.where(invalid, ops.full_like(nll, float("nan")), nll)
    keep = keep.astype(ms.float32)
    return (nll * keep).sum(), keep.sum()


def _mean_token_nll(logits, labels, ignore_index: int = IGNORE_INDEX):
    nll_sum, n_tokens = token_nll(logits, labels, ignore_index)
    return nll_sum / ops.maximum(n_tokens, ops.ones_like(n_tokens))


def causal_lm_loss(logits, labels, ignore_index: int = IGNORE_INDEX):
    """Mean cross-entropy over the non-ignored target tokens (0 if every label is ignored).

    Same value as ``torch.nn.functional.cross_entropy(logits.view(-1, V), labels.view(-1),
    ignore_index=-100)``: the mean is over *tokens*, not over rows, so a short answer in a
    padded SFT batch weighs as much per token as a long one. Called eagerly it first checks
    the labels (only ``ignore_index`` may be negative); ``LossCell`` uses the same loss
    without the host-side check so that it compiles.
    """
    from .validate import check_labels
    _check_lm_shapes(logits, labels)
    check_labels(labels, logits.shape[-1], ignore_index)
    return _mean_token_nll(logits, labels, ignore_index)


class LossCell(nn.Cell):
    """``model(input_ids) -> logits`` plus a loss, so ``cell(input_ids, labels) -> loss``.

    ``auto_prefix=False`` keeps the model's parameter names unchanged (checkpoints stay
    loadable into the bare model)."""

    def __init__(self, model: nn.Cell, loss_fn: Callable | None = None):
        super().__init__(auto_prefix=False)
        self.model = model
        self.loss_fn = _mean_token_nll if loss_fn in (None, causal_lm_loss) else loss_fn

    def construct(self, input_ids, labels):
        return self.loss_fn(self.model(input_ids), labels)


class EvalCell(nn.Cell):
    """``(input_ids, labels) -> (nll_sum, n_tokens)``: evaluation sums tokens over batches,
    so the corpus perplexity is exact even when batches hold different numbers of targets."""

    def __init__(self, model: nn.Cell, ignore_index: int = IGNORE_INDEX):
        super().__init__(auto_prefix=False)
        self.model = model
        self.ignore_index = ignore_index

    def construct(self, input_ids, labels):
        return token_nll(self.model(input_ids), labels, self.ignore_index)


# --------------------------------------------------------------------------------------
# Learning-rate schedule
# --------------------------------------------------------------------------------------
def warmup_cosine_lr(base_lr: float, total_steps: int, warmup_steps: int,
                     min_lr: float = 0.0) -> list[float]:
    """Per-step learning rates: ``warmup_steps`` linear steps up to ``base_lr`` (the first
    step already uses ``base_lr / warmup_steps``, so no step is wasted at lr 0), then a
    half cosine from ``base_lr`` towards ``min_lr``:

        lr[i] = min_lr + (base_lr - min_lr) * 0.5 * (1 + cos(pi * (i - warmup) / (total - warmup)))

    (the decay part is Hugging Face's ``get_cosine_schedule_with_warmup`` with a floor).
    """
    if total_steps < 1:
        raise ValueError(f"total_steps must be >= 1, got {total_steps}")
    if not 0 <= warmup_steps <= total_steps:
        raise ValueError(f"warmup_steps must be in [0, total_steps={total_steps}], got {warmup_steps}")
    if base_lr <= 0 or min_lr < 0 or min_lr > base_lr:
        raise ValueError(f"Need 0 <= min_lr <= base_lr and base_lr > 0, got base_lr={base_lr}, "
                         f"min_lr={min_lr}")
    lrs = []
    for i in range(total_steps):
        if i < warmup_steps:
            lrs.append(base_lr * (i + 1) / warmup_steps)
        else:
            progress = (i - warmup_steps) / max(1, total_steps - warmup_steps)
            lrs.append(min_lr + (base_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress)))
    return lrs


# --------------------------------------------------------------------------------------
# AdamW
# --------------------------------------------------------------------------------------
_adamw_update = C.MultitypeFuncGraph("adamw_update")


@_adamw_update.register("Tensor", "Tensor", "Tensor", "Tensor", "Tensor", "Tensor", "Bool",
                        "Number", "Tensor", "Tensor", "Tensor", "Tensor")
def _adamw_update_one(beta1, beta2, eps, lr, beta1_t, beta2_t, fused, weight_decay, param, m, v,
                      grad):
    """One parameter, exactly torch.optim.AdamW (amsgrad=False), bc_i = 1 - beta_i^t:
    p <- p * (1 - lr*wd);  m <- b1 m + (1-b1) g;  v <- b2 v + (1-b2) g^2
    p <- p - lr * (m / bc1) / (sqrt(v / bc2) + eps)."""
    if weight_decay > 0.0:   # decoupled: p * (1 - lr*wd), not through the gradient
        shrink = (1.0 - lr * weight_decay).astype(param.dtype)
        param = ops.depend(param, ops.assign(param, param * shrink))
    bias_c1, bias_c2 = 1.0 - beta1_t, 1.0 - beta2_t
    if fused:
        # float32 parameters: ONE fused CPU kernel (``ops.Adam``) instead of ~12 element-wise
        # passes. It computes p -= lr*sqrt(bc2)/bc1 * m / (sqrt(v) + eps'): the update above
        # with sqrt(bc2) moved out of the denominator, so eps' = eps*sqrt(bc2).
        return _adam_kernel(param, m, v, beta1_t, beta2_t, lr, beta1, beta2,
                            eps * ops.sqrt(bias_c2), grad)[0]
    grad = grad.astype(ms.float32)             # float16 parameter: float32 moments and math
    next_m = beta1 * m + (1.0 - beta1) * grad
    next_v = beta2 * v + (1.0 - beta2) * ops.square(grad)
    step = lr * (next_m / bias_c1) / (ops.sqrt(next_v / bias_c2) + eps)
    next_param = param.astype(ms.float32) - step
    next_param = ops.depend(next_param, ops.assign(m, next_m))
    next_param = ops.depend(next_param, ops.assign(v, next_v))
    return ops.assign(param, next_param.astype(param.dtype))


_adam_kernel = ops.Adam()   # inputs: var, m, v, beta1^t, beta2^t, lr, beta1, beta2, eps, grad


def default_decay_filter(param: Parameter) -> bool:
    """Decay matrices (linear weights, embeddings); never biases or norm scales — the
    GPT-2/nanoGPT convention."""
    return param.ndim >= 2


class AdamW(nn.Optimizer):
    """Adam with decoupled weight decay and bias correction (= ``torch.optim.AdamW``).

    ``learning_rate`` may be a float or a per-step list (e.g. :func:`warmup_cosine_lr`):
    the list lives in the optimizer and is indexed by ``global_step`` inside the step.
    ``decay_filter(param) -> bool`` chooses which parameters get weight decay.
    """

    def __init__(self, params, learning_rate=1e-3, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-8, weight_decay: float = 0.0,
                 decay_filter: Callable[[Parameter], bool] = default_decay_filter):
        params = list(params)
        if not params:
            raise ValueError("AdamW got no parameters to optimise: the trainable selection "
                             "is empty.")
        if weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
        # The base class's own weight decay is coupled (added to the gradient): keep it at 0
        # and apply the decoupled decay in the update itself.
        super().__init__(learning_rate, params, 0.0)
        self.beta1 = Tensor(beta1, ms.float32)
        self.beta2 = Tensor(beta2, ms.float32)
        self.eps = Tensor(eps, ms.float32)
        self.decay_rates = tuple(float(weight_decay) if decay_filter(p) else 0.0
                                 for p in self._parameters)
        self.moments1 = self._parameters.clone(prefix="adam_m", init="zeros")
        self.moments2 = self._parameters.clone(prefix="adam_v", init="zeros")
        for moment in list(self.moments1) + list(self.moments2):   # fp16 models: fp32 state
            moment.set_dtype(ms.float32)
        self.fused = tuple(p.dtype == ms.float32 for p in self._parameters)

    @ms.jit  # compiled even in PyNative mode (eager per-parameter updates are slow)
    def construct(self, gradients):
        gradients = self.flatten_gradients(gradients)
        lr = self.get_lr()                                  # lr of step global_step (0-based)
        self.assignadd(self.global_step, self.global_step_increase_tensor)
        t = self.global_step.reshape(()).astype(ms.float32)  # 1-based step for bias correction
        beta1_t, beta2_t = ops.pow(self.beta1, t), ops.pow(self.beta2, t)
        return self.hyper_map(
            ops.partial(_adamw_update, self.beta1, self.beta2, self.eps, lr, beta1_t, beta2_t),
            self.fused, self.decay_rates, self._parameters, self.moments1, self.moments2, gradients)


# --------------------------------------------------------------------------------------
# The train step
# --------------------------------------------------------------------------------------
def global_norm(grads):
    """sqrt(sum of squares of every gradient entry) — what clipping compares to ``clip``."""
    # .sum(-1).sum(): MindSpore's CPU ReduceSum over ALL axes of a large tensor is several
    # times slower than a reduction over the last axis followed by a small one
    # (benchmarks/RESULTS.md, train step)
    return ops.sqrt(ops.addn([ops.square(g.astype(ms.float32)).sum(-1).sum() for g in grads]))


_scale_grad = C.MultitypeFuncGraph("scale_grad")


@_scale_grad.register("Tensor", "Tensor")
def _scale_grad_one(factor, grad):
    return grad * factor.astype(grad.dtype)


class TrainStep(nn.Cell):
    """One optimisation step: ``(input_ids, labels) -> (loss, grad_norm_before_clipping)``.

    * gradients only for ``optimizer.parameters`` (the trainable subset: frozen weights get
      no gradient and no update — they stay bit-identical);
    * ``clip > 0``: global-norm clipping, the rule of ``ops.clip_by_global_norm`` (every
      gradient times ``clip / max(norm, clip)``) with the norm computed once and also
      returned for the log; ``clip=None`` or 0 disables it;
    * ``loss_scale``: fixed loss scaling for float16 (multiply the loss, divide the
      gradients); CPU supports no dynamic loss scaling, so the value stays fixed.

    Runs as is in PYNATIVE mode (eager) and compiles as a whole in GRAPH mode.
    """

    def __init__(self, loss_net: nn.Cell, optimizer: nn.Optimizer, clip: float | None = 1.0,
                 loss_scale: float = 1.0):
        super().__init__(auto_prefix=False)
        if clip is not None and clip < 0:
            raise ValueError(f"clip must be > 0 (or None/0 to disable), got {clip}")
        if loss_scale <= 0:
            raise ValueError(f"loss_scale must be > 0, got {loss_scale}")
        self.loss_net = loss_net
        self.optimizer = optimizer
        self.weights = optimizer.parameters
        self.grad = ops.GradOperation(get_by_list=True, sens_param=True)
        self.clip = float(clip or 0.0)
        self.loss_scale = float(loss_scale)
        self.hyper_map = C.HyperMap()

    def construct(self, input_ids, labels):
        loss = self.loss_net(input_ids, labels)
        sens = ops.fill(loss.dtype, loss.shape, self.loss_scale)
        grads = self.grad(self.loss_net, self.weights)(input_ids, labels, sens)
        if self.loss_scale != 1.0:
            grads = self.hyper_map(ops.partial(_scale_grad, Tensor(1.0 / self.loss_scale)), grads)
        norm = global_norm(grads)
        if self.clip > 0.0:
            # = ops.clip_by_global_norm(grads, clip), reusing the norm computed above
            # instead of a second pass over every gradient
            factor = self.clip / ops.maximum(norm, self.clip)
            grads = self.hyper_map(ops.partial(_scale_grad, factor), grads)
        loss = ops.depend(loss, self.optimizer(grads))
        return loss, norm


# --------------------------------------------------------------------------------------
# Helpers: mixed precision, trainable selection
# --------------------------------------------------------------------------------------
def apply_amp(model: nn.Cell, amp_level: str = "O0") -> nn.Cell:
    """Mixed precision IN PLACE (same object, same parameter names, so name filters and
    checkpoints keep working): ``O0`` float32; ``O1`` the Dense layers compute in float16;
    ``O2`` everything but MindSpore's black-listed norms (BatchNorm/LayerNorm) in float16;
    ``O3`` everything in float16. Parameters stay float32 (the master weights).

    ``ms.amp.auto_mixed_precision`` is used for O2/O3, which cast in place and only wrap
    the output; its O1 rewrites the network into a NEW object, so O1 is done here directly.
    float16 only: bfloat16 MatMul/Softmax have no CPU kernels. The loss is computed in
    float32 either way (``token_nll`` casts the logits)."""
    if amp_level not in AMP_LEVELS:
        raise ValueError(f"Unknown amp_level {amp_level!r}; use one of {AMP_LEVELS}.")
    if amp_level == "O1":
        for _, cell in model.cells_and_names():
            if isinstance(cell, nn.Dense):
                cell.to_float(ms.float16)
    elif amp_level in ("O2", "O3"):
        ms.amp.auto_mixed_precision(model, amp_level=amp_level, dtype=ms.float16)
    return model


def select_trainable(model: nn.Cell, trainable=None) -> list[Parameter]:
    """The parameters to optimise.

    ``trainable`` is ``None`` (all of ``model.trainable_params()``), a callable
    ``name -> bool`` (e.g. ``lambda n: "lora" in n``) or a list of the model's Parameters.
    """
    params = model.trainable_params()
    if trainable is None:
        chosen = params
    elif callable(trainable):
        chosen = [p for p in params if trainable(p.name)]
    else:
        wanted = list(trainable)
        by_id = {id(p) for p in params}
        foreign = [getattr(p, "name", repr(p)) for p in wanted if id(p) not in by_id]
        if foreign:
            raise ValueError(f"{len(foreign)} of the given parameters are not trainable "
                             f"parameters of this model (e.g. {foreign[:3]}); pass Parameters "
                             "from model.trainable_params() or a name filter callable.")
        chosen = wanted
    if not chosen:
        names = [p.name for p in params[:5]]
        raise ValueError("The trainable selection is empty: no parameter matched. "
                         f"The model's parameter names look like {names}.")
    return chosen
