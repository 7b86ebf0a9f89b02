"""Chapter 05 reference solutions: the warmup-cosine schedule and a clipped train step."""
import math

import mindspore as ms
from mindspore import ops


def warmup_cosine(base_lr, total_steps, warmup_steps, min_lr=0.0):
    """Linear warm-up (the first step already uses base_lr / warmup_steps), then a half
    cosine from base_lr down towards min_lr over the remaining steps."""
    lrs = []
    for i in range(total_steps):
        if i < warmup_steps:
            lrs.append(base_lr * (i + 1) / warmup_steps)
        else:
            progress = (i - warmup_steps) / max(1, total_steps - warmup_steps)
            lrs.append(min_lr + (base_lr - min_lr) * 0.5 * (1 + math.cos(math.pi * progress)))
    return lrs


def train_step(net, loss_fn, optimizer, inputs, labels, clip):
    """One step: loss and gradients of the optimizer's parameters, global-norm clipping to
    ``clip``, update. Returns (loss, global gradient norm BEFORE clipping)."""
    def forward(x, y):
        return loss_fn(net(x), y)
    loss, grads = ms.value_and_grad(forward, None, optimizer.parameters)(inputs, labels)
    norm = ops.sqrt(sum((g.astype(ms.float32) ** 2).sum() for g in grads))
    grads = ops.clip_by_global_norm(grads, clip)
    optimizer(grads)
    return loss, norm


# ---------------------------------------------------------------- realistic wrong solutions
def wrong_warmup_from_zero(base_lr, total_steps, warmup_steps, min_lr=0.0):
    lrs = warmup_cosine(base_lr, total_steps, warmup_steps, min_lr)
    return [base_lr * i / warmup_steps if i < warmup_steps else lr for i, lr in enumerate(lrs)]


def wrong_cosine_over_total(base_lr, total_steps, warmup_steps, min_lr=0.0):
    lrs = warmup_cosine(base_lr, total_steps, warmup_steps, min_lr)
    return [lr if i < warmup_steps else
            min_lr + (base_lr - min_lr) * 0.5 * (1 + math.cos(math.pi * i / total_steps))
            for i, lr in enumerate(lrs)]


def wrong_ignores_min_lr(base_lr, total_steps, warmup_steps, min_lr=0.0):
    return warmup_cosine(base_lr, total_steps, warmup_steps, 0.0)


def wrong_step_no_clip(net, loss_fn, optimizer, inputs, labels, clip):
    def forward(x, y):
        return loss_fn(net(x), y)
    loss, grads = ms.value_and_grad(forward, None, optimizer.parameters)(inputs, labels)
    norm = ops.sqrt(sum((g ** 2).sum() for g in grads))
    optimizer(grads)
    return loss, norm


def wrong_step_per_tensor(net, loss_fn, optimizer, inputs, labels, clip):
    def forward(x, y):
        return loss_fn(net(x), y)
    loss, grads = ms.value_and_grad(forward, None, optimizer.parameters)(inputs, labels)
    norm = ops.sqrt(sum((g ** 2).sum() for g in grads))
    optimizer(tuple(ops.clip_by_norm(g, clip) for g in grads))
    return loss, norm


def wrong_step_by_value(net, loss_fn, optimizer, inputs, labels, clip):
    def forward(x, y):
        return loss_fn(net(x), y)
    loss, grads = ms.value_and_grad(forward, None, optimizer.parameters)(inputs, labels)
    norm = ops.sqrt(sum((g ** 2).sum() for g in grads))
    optimizer(tuple(ops.clip_by_value(g, -clip, clip) for g in grads))
    return loss, norm


def wrong_step_norm_after(net, loss_fn, optimizer, inputs, labels, clip):
    """Logs the norm AFTER clipping (what the optimizer saw), not the one before."""
    def forward(x, y):
        return loss_fn(net(x), y)
    loss, grads = ms.value_and_grad(forward, None, optimizer.parameters)(inputs, labels)
    grads = ops.clip_by_global_norm(grads, clip)
    optimizer(grads)
    return loss, ops.sqrt(sum((g ** 2).sum() for g in grads))
