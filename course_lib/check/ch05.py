"""Checkers for notebook 05 (LLMTrainer)."""
import math

from .common import Mismatch, check_number, exercise, hidden_rng, observe, run_code_check


def _sol(name):
    def factory():
        from ..solutions import ch05
        return getattr(ch05, name)
    factory.__name__ = name
    return factory


# --------------------------------------------------------------------------- numbers
@exercise("number", "评估损失 4.0 nat/token 时 evaluate() 报告的困惑度", solution=lambda: math.exp(4.0),
          question="评估得到的平均损失是 4.0（每个 token 的负对数似然，单位 nat），"
                   "`evaluate()` 报告的困惑度是多少？")
def ex1(answer) -> bool:
    """The evaluation loss is 4.0 nats per token: what perplexity does evaluate() report?"""
    return check_number(answer, math.exp(4.0), rel=1e-4, name="ch05.ex1",
                        hint="困惑度 = exp(每个 token 的平均负对数似然)。")


def _head_params() -> int:
    from ..internlm import tiny
    cfg = tiny()
    return cfg.vocab_size * cfg.hidden_size          # untied head, no bias


@exercise("number", "只训练 lm_head 时 internlm.tiny() 的可训练参数个数", solution=_head_params,
          question='在 `internlm.tiny()` 上 `finetune(..., trainable=lambda n: n.startswith("lm_head"))` 训练多少个参数？')
def ex2(answer) -> bool:
    """How many parameters does finetune(trainable=lambda n: n.startswith("lm_head")) train
    on internlm.tiny()?"""
    return check_number(answer, _head_params(), integer=True, name="ch05.ex2",
                        hint="lm_head 是 Dense(hidden_size, vocab_size, has_bias=False)：数一数它的权重。")


def _lr55() -> float:
    progress = (55 - 10) / (100 - 10)
    return 1e-3 * 0.5 * (1 + math.cos(math.pi * progress))


@exercise("number", "warmup_cosine_lr(1e-3, 100, 10) 第 55 步（从 0 数）的学习率", solution=_lr55,
          question="`warmup_cosine_lr(1e-3, total_steps=100, warmup_steps=10)`（`min_lr` 取默认值）"
                   "中第 55 步（从 0 数）的学习率是多少？先手算，再用你的 `warmup_cosine` 验证。")
def ex3(answer) -> bool:
    """warmup_cosine_lr(1e-3, total_steps=100, warmup_steps=10): the lr of 0-based step 55."""
    return check_number(answer, _lr55(), rel=1e-6, name="ch05.ex3",
                        hint="预热结束后走余弦：progress = (i - warmup) / (total - warmup)；"
                             "warmup_cosine_lr 的 min_lr 默认是 0.0。")


@exercise("number", "全局范数 5.0 的梯度按 clip=1.0 裁剪：每个梯度乘以的系数", solution=lambda: 1.0 / 5.0,
          question="全局梯度范数是 5.0、`clip=1.0` 时，每个梯度被乘以多少？")
def ex4(answer) -> bool:
    """Gradients with global norm 5.0 are clipped with clip=1.0: by which factor is every
    gradient multiplied?"""
    return check_number(answer, 1.0 / 5.0, rel=1e-6, name="ch05.ex4",
                        hint="全局范数裁剪把所有梯度乘以 clip / max(norm, clip)。")


# --------------------------------------------------------------------------- code
SCHEDULE_HINT = ("i < warmup：base_lr·(i+1)/warmup；之后 progress = (i-warmup)/(total-warmup)，"
                 "lr = min_lr + (base_lr-min_lr)·0.5·(1+cos(π·progress))。")
SCHEDULE_CASES = ((1e-3, 100, 10, 0.0), (3e-3, 37, 5, 3e-4), (0.5, 9, 0, 0.05), (1.0, 6, 6, 0.0), (2e-4, 1, 1, 0.0))


@exercise("code", "写 warmup + cosine 学习率调度函数（与 training.warmup_cosine_lr 逐步相等）",
          solution=_sol("warmup_cosine"),
          wrong=((_sol("wrong_warmup_from_zero"), "第一步"), (_sol("wrong_cosine_over_total"), "total - warmup"),
                 (_sol("wrong_ignores_min_lr"), "min_lr")),
          targets=("course_lib.training.warmup_cosine_lr",),
          question="**预热 + 余弦学习率。"
                   "** 写 `warmup_cosine(base_lr, total_steps, warmup_steps, min_lr=0.0)`，"
                   "返回 `total_steps` 个学习率：第 `i` 步（从 0 数）"
                   "在 `i < warmup_steps` 时是 `base_lr·(i+1)/warmup_steps`，"
                   "之后 `progress = (i - warmup_steps)/(total_steps - warmup_steps)`，"
                   "`lr = min_lr + (base_lr - min_lr)·0.5·(1 + cos(π·progress))`。"
                   "检查器与 `training.warmup_cosine_lr` 逐步比较（包括没有预热、全是预热、"
                   "`min_lr > 0` 的情形）。")
def warmup_cosine(fn) -> bool:
    """``fn(base_lr, total_steps, warmup_steps, min_lr=0.0) -> list of total_steps floats``."""
    def body():
        from ..training import warmup_cosine_lr
        for base, total, warmup, min_lr in SCHEDULE_CASES:
            got = [float(x) for x in fn(base, total, warmup, min_lr)]
            want = warmup_cosine_lr(base, total, warmup, min_lr)
            where = f"warmup_cosine({base}, total_steps={total}, warmup_steps={warmup}, min_lr={min_lr})"
            observe(f"{where} 的学习率", got, want, atol=1e-12, rtol=1e-6)
            if len(got) != len(want):
                raise Mismatch(f"{where} 给出 {len(got)} 个学习率，应为 {len(want)} 个（每步一个）。")
            bad = [i for i, (g, w) in enumerate(zip(got, want)) if not math.isclose(g, w, rel_tol=1e-6, abs_tol=1e-12)]
            if not bad:
                continue
            i = bad[0]
            if i < warmup and math.isclose(got[i], base * i / warmup, abs_tol=1e-12):
                bug = "预热从 0 开始了：第一步就该用 base_lr/warmup（i+1），不浪费一步。"
            elif i >= warmup and math.isclose(got[i], min_lr + (base - min_lr) * 0.5 * (1 + math.cos(math.pi * i / total)), rel_tol=1e-6):
                bug = "余弦进度用了 i/total：应为 (i - warmup)/(total - warmup)，预热结束时正好从峰值开始下降。"
            elif i >= warmup and min_lr > 0 and math.isclose(
                    got[i], base * 0.5 * (1 + math.cos(math.pi * (i - warmup) / max(1, total - warmup))), rel_tol=1e-6):
                bug = "忽略了 min_lr：余弦应从 base_lr 降到 min_lr，而不是降到 0。"
            else:
                bug = SCHEDULE_HINT
            raise Mismatch(f"{where} 第 {i} 步（从 0 数）是 {got[i]:.6g}，应为 {want[i]:.6g}。{bug}")
    return run_code_check("ch05.warmup_cosine", SCHEDULE_HINT, body)


STEP_HINT = ("用 ms.value_and_grad 对 optimizer.parameters 求梯度；全局范数 = sqrt(所有梯度元素平方和)；"
             "grads = ops.clip_by_global_norm(grads, clip)；optimizer(grads)；返回 (loss, 裁剪前的范数)。")


def _step_case(seed, clip):
    """A tiny two-layer net, SGD (update = -lr * grad) and data; the expected result by hand."""
    import mindspore as ms
    import numpy as np
    from mindspore import nn
    rng = hidden_rng(seed)
    ms.set_seed(int(rng.integers(2 ** 31)))
    net = nn.SequentialCell(nn.Dense(5, 4), nn.Tanh(), nn.Dense(4, 2))
    for _, p in net.parameters_and_names():
        p.set_data(ms.Tensor(rng.normal(0, 1.0, p.shape).astype(np.float32)))
    x = ms.Tensor(rng.normal(size=(3, 5)).astype(np.float32))
    y = ms.Tensor((rng.normal(size=(3, 2)) * 4).astype(np.float32))
    loss_fn = nn.MSELoss()
    opt = nn.SGD(net.trainable_params(), learning_rate=0.1)
    before = [p.asnumpy().copy() for p in opt.parameters]
    loss, grads = ms.value_and_grad(lambda a, b: loss_fn(net(a), b), None, opt.parameters)(x, y)
    grads = [g.asnumpy().astype(np.float64) for g in grads]
    norm = float(np.sqrt(sum((g ** 2).sum() for g in grads)))
    return net, loss_fn, opt, x, y, before, grads, norm, float(loss.asnumpy())


@exercise("code", "写带全局范数梯度裁剪的训练一步：返回 (loss, 裁剪前的梯度范数)",
          solution=_sol("train_step"),
          wrong=((_sol("wrong_step_no_clip"), "没有裁剪"), (_sol("wrong_step_per_tensor"), "逐个张量"),
                 (_sol("wrong_step_by_value"), "按元素")),
          targets=("course_lib.training.TrainStep", "course_lib.training.global_norm"),
          question="**带梯度裁剪的一步训练。"
                   "** 写 `train_step(net, loss_fn, optimizer, inputs, labels, clip)`："
                   "用 `ms.value_and_grad` 对 `optimizer.parameters` 求损失 `loss_fn(net(inputs), labels)` 的梯度，"
                   "算全局范数（所有梯度所有元素平方和的平方根），"
                   "用 `ops.clip_by_global_norm(grads, clip)` 裁剪，`optimizer(grads)` 更新，"
                   "返回 `(loss, 裁剪前的范数)`——这就是第 2 节 `TrainStep.construct` 的 PyNative 写法。"
                   "检查器用 SGD（更新量 = −lr × 梯度）从参数的变化反推你真正用的梯度，"
                   "与手算的裁剪结果比较。")
def clipped_train_step(fn) -> bool:
    """``fn(net, loss_fn, optimizer, inputs, labels, clip) -> (loss, grad_norm_before_clipping)``."""
    def body():
        import numpy as np
        for seed, clip in ((0, 0.5), (1, 1e3), (2, 2.0)):
            net, loss_fn, opt, x, y, before, grads, norm, loss = _step_case(seed, clip)
            out = fn(net, loss_fn, opt, x, y, clip)
            where = f"clip={clip}（裁剪前全局范数 {norm:.4g}）"
            observe(f"{where}：返回值的个数", len(out) if isinstance(out, (tuple, list)) else None, 2)
            if not isinstance(out, (tuple, list)) or len(out) != 2:
                raise Mismatch(f"返回值是 {type(out).__name__}，应为 (loss, grad_norm) 两个值。")
            got_loss, got_norm = (float(np.asarray(v.asnumpy() if hasattr(v, "asnumpy") else v)) for v in out)
            observe(f"{where}：返回的 loss", got_loss, loss, rtol=1e-5)
            observe(f"{where}：返回的梯度范数", got_norm, norm, rtol=1e-4)
            if not math.isclose(got_loss, loss, rel_tol=1e-5):
                raise Mismatch(f"{where}：返回的 loss 是 {got_loss:.6g}，应为更新前的 {loss:.6g}。")
            if not math.isclose(got_norm, norm, rel_tol=1e-4):
                bug = ("返回的是裁剪后的范数：日志里要记裁剪前的。" if math.isclose(got_norm, min(norm, clip), rel_tol=1e-4)
                       else "全局范数 = sqrt(所有梯度所有元素的平方和)。")
                raise Mismatch(f"{where}：返回的梯度范数是 {got_norm:.6g}，应为 {norm:.6g}。{bug}")
            after = [p.asnumpy() for p in opt.parameters]
            update = [(b - a) / 0.1 for b, a in zip(before, after)]     # the gradient SGD really applied
            factor = clip / max(norm, clip)
            observe(f"{where}：各参数实际更新量对应的梯度", update, [g * factor for g in grads],
                    atol=1e-5, rtol=1e-3)
            if all(np.allclose(u, g * factor, rtol=1e-3, atol=1e-5) for u, g in zip(update, grads)):
                continue
            suspects = {
                "没有裁剪：用的是原始梯度。": grads,
                "逐个张量按各自的范数裁剪了（ops.clip_by_norm）：要按所有梯度合起来的全局范数统一缩放。":
                    [g * min(1.0, clip / max(np.sqrt((g ** 2).sum()), 1e-12)) for g in grads],
                "按元素截断了（clip_by_value）：全局范数裁剪是把所有梯度乘同一个系数，方向不变。":
                    [np.clip(g, -clip, clip) for g in grads],
            }
            bug = next((b for b, s in suspects.items()
                        if all(np.allclose(u, v, rtol=1e-3, atol=1e-5) for u, v in zip(update, s))), STEP_HINT)
            name = opt.parameters[0].name
            raise Mismatch(f"{where}：{name} 实际更新量对应的梯度 {[round(float(v), 4) for v in update[0].ravel()[:3]]}，"
                           f"应为 {[round(float(v), 4) for v in (grads[0] * factor).ravel()[:3]]}（系数 {factor:.4g}）。{bug}")
    return run_code_check("ch05.clipped_train_step", STEP_HINT, body)
