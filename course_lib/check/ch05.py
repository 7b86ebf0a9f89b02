"""Checkers for notebook 05 (LLMTrainer)."""
import math

import numpy as np

from .common import (check_number, close, exercise, hidden_rng, Mismatch, observe, recognised,
                     run_code_check)


def _sol(name):
    def factory():
        from ..solutions import ch05
        return getattr(ch05, name)
    factory.__name__ = name
    return factory


# --------------------------------------------------------------------------- numbers
EVAL_BATCHES = ((96, 3.0), (32, 5.0))      # (target tokens, mean loss in nats) of each batch


def _eval_perplexity() -> float:
    nll = sum(n * loss for n, loss in EVAL_BATCHES)
    return math.exp(nll / sum(n for n, _ in EVAL_BATCHES))


@exercise("number", "两个有效 token 数不同的批次：evaluate() 报告的困惑度", solution=_eval_perplexity,
          question="`evaluate()` 在验证集的两个批次上评估：第一批有 96 个要预测的 token（标签不是 `-100` 的位置），"
                   "它们的平均损失是 3.0；第二批的标签大多是 `-100`，只有 32 个要预测的 token，平均损失 5.0"
                   "（单位都是 nat/token）。`evaluate()` 报告的困惑度是多少？（保留 2 位小数）")
def ex1(answer) -> bool:
    """Perplexity evaluate() reports over two batches with 96 and 32 target tokens and mean
    losses 3.0 and 5.0 (it sums the negative log-likelihood over tokens, then averages)."""
    (n1, l1), (n2, l2) = EVAL_BATCHES
    hint = recognised(answer, (
        ("这是两个批次平均损失的简单平均再取指数：两个批次要预测的 token 数不同，"
         "回到第 3 节末尾 `evaluate()` 怎样把各批次合起来。", math.exp((l1 + l2) / 2)),
        ("这是两个批次各自困惑度的平均：第 3 节末尾和“常见误区”说过 `evaluate()` 不这样算。",
         (math.exp(l1) + math.exp(l2)) / 2),
        ("这是平均损失（nat/token），还没有换成困惑度（第 3 节末尾检查过两者的关系）。",
         (n1 * l1 + n2 * l2) / (n1 + n2)),
    ), "回到第 3 节末尾：`evaluate()` 怎样把各批次的负对数似然合起来，又怎样从平均损失得到困惑度。", rel=1e-3)
    return check_number(answer, _eval_perplexity(), rel=0.0, abs_=1e-2, name="ch05.ex1", hint=hint)  # 2 decimals, rounded or cut


EX2_LAYERS = 4      # neither the notebook's model at CI scale (1 layer) nor at full scale (2)


def _decayed_params() -> int:
    """Parameters AdamW decays in internlm.tiny(num_layers=4): the library's rule
    (training.default_decay_filter: tensors of 2 dimensions or more), applied to the shape walk."""
    from ..internlm import tiny
    return sum(int(np.prod(s)) for s in tiny(num_layers=EX2_LAYERS).parameter_shapes().values()
               if len(s) >= 2)


def _tiny_counts() -> dict:
    from ..internlm import tiny
    shapes = tiny(num_layers=EX2_LAYERS).parameter_shapes()
    size = lambda keep: sum(int(np.prod(s)) for n, s in shapes.items() if keep(n))   # noqa: E731
    return {"total": size(lambda n: True), "bias": size(lambda n: n.endswith(".bias")),
            "norm": size(lambda n: "norm" in n), "head": size(lambda n: n.startswith("lm_head"))}


@exercise("number", "LLMTrainer 训练 internlm.tiny(num_layers=4) 时 AdamW 做权重衰减的参数个数", solution=_decayed_params,
          question="用 `LLMTrainer(model, ..., weight_decay=0.1)` 训练 4 层的 `internlm.tiny(num_layers=4)`"
                   "（其余尺寸取默认值，不是本章训练的 `model`；不传 `trainable`，所有参数都训练）。AdamW 对其中**多少个参数**（标量个数）做权重衰减？"
                   "给出整数。（哪些参数衰减、哪些不衰减，见第 2 节；可以数，也可以用公式算。）")
def ex2(answer) -> bool:
    """How many parameters of internlm.tiny(num_layers=4) does LLMTrainer's AdamW decay (matrices only)?"""
    c = _tiny_counts()
    hint = recognised(answer, (
        ("这是全部参数的个数：第 2 节说权重衰减不作用于哪些参数？", c["total"]),
        ("去掉了偏置，但 RMSNorm 的缩放也不衰减（第 2 节）。", c["total"] - c["bias"]),
        ("去掉了 RMSNorm 的缩放，但 InternLM 的 q/k/v/o 还带偏置，它们也不衰减（第 2 节、第 3 节开头）。",
         c["total"] - c["norm"]),
        ("这只是输出层 lm_head：题目训练的是所有参数。", c["head"]),
    ), "回到第 2 节：哪几类参数做权重衰减；再数 internlm.tiny(num_layers=4) 里属于这几类的参数"
       "（`model.parameters_and_names()` 给出每个参数的名字和形状）。", rel=0.0)
    return check_number(answer, _decayed_params(), integer=True, rel=0, name="ch05.ex2", hint=hint)


def _lr55() -> float:
    from ..training import warmup_cosine_lr
    return warmup_cosine_lr(1e-3, 100, 10, min_lr=1e-3 / 10)[55]     # LLMTrainer's default min_lr


@exercise("number", "LLMTrainer(lr=1e-3, steps=100, warmup_steps=10) 第 55 步（从 0 数）的学习率", solution=_lr55,
          question="`LLMTrainer(model, data, lr=1e-3, steps=100, warmup_steps=10)`（不传 `min_lr`）训练时，"
                   "第 55 步（从 0 数）的学习率是多少？先手算，再用你自己写的 `warmup_cosine` 验证"
                   "（相对误差 1e-6 以内算对；不要调用 `training.warmup_cosine_lr`，成绩册把用它得到的答案记为“借用”）。",
          targets=("course_lib.training.warmup_cosine_lr",))
def ex3(answer) -> bool:
    """LLMTrainer(lr=1e-3, steps=100, warmup_steps=10) without min_lr: the lr of 0-based step 55."""
    from ..training import warmup_cosine_lr
    hint = recognised(answer, (
        ("余弦的进度是从第 0 步算的：第 2 节的图里余弦从哪一步的峰值开始下降？",
         warmup_cosine_lr(1e-3, 100, 0, min_lr=1e-4)[55]),
        ("用了 `min_lr = 0`：那是函数 `warmup_cosine_lr` 的默认值，构造 `LLMTrainer` 时不传 `min_lr` 取的值不同（第 2 节）。",
         warmup_cosine_lr(1e-3, 100, 10)[55]),
        ("这是第 54 步或第 56 步的学习率：步数从 0 数。",
         warmup_cosine_lr(1e-3, 100, 10, min_lr=1e-4)[54]),
        ("这是第 54 步或第 56 步的学习率：步数从 0 数。",
         warmup_cosine_lr(1e-3, 100, 10, min_lr=1e-4)[56]),
    ), "第 55 步已经过了预热：回到第 2 节，余弦段的进度从哪一步算起、一共走多少步，`LLMTrainer` 的 min_lr 取什么。",
        rel=1e-6)
    return check_number(answer, _lr55(), rel=1e-6, name="ch05.ex3", hint=hint)


CLIP_NORMS = (3.0, 4.0, 12.0)          # the norms of three gradient tensors of one step
CLIP = 1.0


def _clip_answer() -> list:
    """[what history["grad_norm"] records, the norm of the first gradient after clipping]:
    TrainStep's rule (the global norm of all gradients; factor clip / max(norm, clip))."""
    norm = math.sqrt(sum(n * n for n in CLIP_NORMS))
    return [norm, CLIP_NORMS[0] * CLIP / max(norm, CLIP)]


@exercise("number", "三个梯度张量的范数 3、4、12，clip=1.0：记录的范数与第一个梯度裁剪后的范数",
          solution=_clip_answer,
          question="训练的某一步，模型三个参数的梯度（三个张量）各自的范数是 3.0、4.0 和 12.0，"
                   "训练器用 `LLMTrainer(..., clip=1.0)`。这一步 `history[\"grad_norm\"]` 记下的数是多少？"
                   "范数为 3.0 的那个梯度裁剪之后的范数是多少？给出两个数的列表 `[记下的范数, 裁剪后的范数]`，"
                   "每个保留 4 位有效数字。（第 2 节 `TrainStep.construct`。）")
def ex4(answer) -> bool:
    """Gradients of norms 3, 4 and 12, clip=1.0: the norm history["grad_norm"] records, and the
    norm of the first gradient after global-norm clipping."""
    norm = math.sqrt(sum(n * n for n in CLIP_NORMS))
    first = CLIP_NORMS[0]
    hint = "回到第 2 节 `TrainStep.construct`：它记录的范数在裁剪之前还是之后算，是哪些梯度的范数；再看裁剪把梯度乘以什么。"
    try:
        got = [float(v) for v in answer]
    except (TypeError, ValueError):
        got = []
    if len(got) == 2 and math.isfinite(got[0]) and math.isfinite(got[1]):
        if close(got[0], CLIP, 1e-3):
            hint = "记下的是裁剪之后的范数：第 2 节 `TrainStep.construct` 返回的 norm 是在裁剪之前算的。"
        elif close(got[0], sum(CLIP_NORMS), 1e-3):
            hint = "记下的范数不是各张量范数的和：全局范数是所有梯度的所有元素合起来算的（第 2 节 global_norm）。"
        elif close(got[0], max(CLIP_NORMS), 1e-3):
            hint = "记下的范数只是最大的那个张量的范数：全局范数把所有梯度合起来算（第 2 节）。"
        elif close(got[1], min(first, CLIP), 1e-3):
            hint = ("第一个梯度按它自己的范数裁剪到了 clip：那是逐个张量的裁剪；"
                    "全局范数裁剪把所有梯度乘以同一个系数，方向和相对大小都不变（第 2 节）。")
        elif close(got[1], first, 1e-3):
            hint = "第一个梯度没有被裁剪：全局范数比 clip 大时，每个梯度都要缩小（第 2 节）。"
        elif close(got[0], norm, 1e-3):
            hint = "记下的范数对了；裁剪后的范数不对：裁剪把每个梯度乘以同一个系数，这个系数由哪两个数决定？（第 2 节）"
    return check_number(answer, _clip_answer(), rel=1e-3, name="ch05.ex4", hint=hint)


# --------------------------------------------------------------------------- code
SCHEDULE_HINT = ("对照题目逐段检查：预热段第 0 步的学习率、余弦段的进度从哪一步算起、"
                 "余弦降到哪里（第 2 节的学习率图）。")
SCHEDULE_CASES = ((1e-3, 100, 10, 0.0), (3e-3, 37, 5, 3e-4), (0.5, 9, 0, 0.05), (1.0, 6, 6, 0.0), (2e-4, 1, 1, 0.0))


@exercise("code", "写 warmup + cosine 学习率调度函数（与 training.warmup_cosine_lr 逐步相等）",
          solution=_sol("warmup_cosine"),
          wrong=((_sol("wrong_warmup_from_zero"), "第一步"), (_sol("wrong_cosine_over_total"), "进度"),
                 (_sol("wrong_ignores_min_lr"), "min_lr")),
          targets=("course_lib.training.warmup_cosine_lr",),
          question="**预热 + 余弦学习率。"
                   "** 写 `warmup_cosine(base_lr, total_steps, warmup_steps, min_lr=0.0)`，"
                   "返回长度为 `total_steps` 的学习率列表（第 `i` 个是第 `i` 步的，从 0 数）。"
                   "预热段（`i < warmup_steps`）线性上升：第 0 步就是峰值 `base_lr` 的 1/warmup_steps，"
                   "第 `warmup_steps - 1` 步到达峰值。之后是半个余弦：第 `warmup_steps` 步从峰值开始，"
                   "余弦的进度从 0 起每步增加 `1/(total_steps - warmup_steps)`，进度为 1 时学习率降到 `min_lr`"
                   "（所以最后一步还没降到 `min_lr`）。余弦的式子自己写（第 2 节的学习率图可以对照）。"
                   "检查器与 `training.warmup_cosine_lr` 逐步比较（相对误差 1e-6；包括没有预热、全是预热、"
                   "只有 1 步、`min_lr > 0` 的情形）。")
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
                bug = ("预热整体晚了一步：你的第 0 步学习率是 0，这一步白白浪费了"
                       "（回到第 2 节对预热第一步的说明）。")
            elif i >= warmup and math.isclose(got[i], min_lr + (base - min_lr) * 0.5 * (1 + math.cos(math.pi * i / total)), rel_tol=1e-6):
                bug = ("余弦段的进度是从第 0 步、按全部步数算的：预热结束时学习率应该正好是峰值，"
                       "再从那里开始下降（第 2 节的学习率图）。")
            elif i >= warmup and min_lr > 0 and math.isclose(
                    got[i], base * 0.5 * (1 + math.cos(math.pi * (i - warmup) / max(1, total - warmup))), rel_tol=1e-6):
                bug = "min_lr > 0 时你的余弦降向 0：这个参数没有用上。"
            else:
                bug = ("这一步在预热段。" if i < warmup else "这一步在余弦段。") + SCHEDULE_HINT
            raise Mismatch(f"{where} 第 {i} 步（从 0 数）是 {got[i]:.6g}，应为 {want[i]:.6g}。{bug}")
    return run_code_check("ch05.warmup_cosine", SCHEDULE_HINT, body)


STEP_HINT = ("对照题目的几步（第 2 节 `TrainStep.construct` 是同一件事的 GRAPH 写法）："
             "对哪些参数求梯度、范数在裁剪之前还是之后算、优化器拿到的是哪一份梯度、返回哪两个值。")


def _step_case(seed, clip):
    """A tiny two-layer net, SGD (update = -lr * grad) and data; the expected result by hand."""
    import mindspore as ms
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
                 (_sol("wrong_step_by_value"), "按元素"), (_sol("wrong_step_norm_after"), "裁剪后")),
          targets=("course_lib.training.TrainStep", "course_lib.training.global_norm"),
          taught=("ops.clip_by_global_norm(grads, clip)",),
          question="**带梯度裁剪的一步训练。"
                   "** 写 `train_step(net, loss_fn, optimizer, inputs, labels, clip)`："
                   "对 `optimizer.parameters` 求损失 `loss_fn(net(inputs), labels)` 的梯度，"
                   "按全局范数（所有梯度所有元素平方和的平方根）裁剪到 `clip`，用 `optimizer` 更新参数，"
                   "返回 `(loss, 裁剪前的全局范数)`：第 2 节 `TrainStep.construct` 做的事，在 PyNative 下自己写一遍"
                   "（不要调用 `TrainStep` 或 `training.global_norm`，成绩册把用到它们的答案记为“借用”）。"
                   "检查器用 SGD（更新量 = −lr × 梯度）从参数的变化反推你真正用的梯度，"
                   "与手算的裁剪结果比较（clip 比范数小和比范数大的情形都有）。")
def clipped_train_step(fn) -> bool:
    """``fn(net, loss_fn, optimizer, inputs, labels, clip) -> (loss, grad_norm_before_clipping)``."""
    def body():
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
                bug = ("返回的是裁剪后的范数：history 里要记裁剪前的（第 2 节 TrainStep 返回的 norm）。"
                       if math.isclose(got_norm, min(norm, clip), rel_tol=1e-4)
                       else "返回的范数不是所有梯度合起来的全局范数（题目里的定义）。")
                raise Mismatch(f"{where}：返回的梯度范数是 {got_norm:.6g}，应为 {norm:.6g}。{bug}")
            after = [p.asnumpy() for p in opt.parameters]
            update = [(b - a) / 0.1 for b, a in zip(before, after)]     # the gradient SGD really applied
            factor = clip / max(norm, clip)
            observe(f"{where}：各参数实际更新量对应的梯度", update, [g * factor for g in grads],
                    atol=1e-5, rtol=1e-3)
            if all(np.allclose(u, g * factor, rtol=1e-3, atol=1e-5) for u, g in zip(update, grads)):
                continue
            suspects = {
                "没有裁剪：优化器拿到的是原始梯度。": grads,
                "逐个张量按各自的范数裁剪了：全局范数裁剪是所有梯度按合起来的范数统一缩放（第 2 节）。":
                    [g * min(1.0, clip / max(np.sqrt((g ** 2).sum()), 1e-12)) for g in grads],
                "按元素截断了：全局范数裁剪把所有梯度乘同一个系数，方向不变。":
                    [np.clip(g, -clip, clip) for g in grads],
            }
            bug = next((b for b, s in suspects.items()
                        if all(np.allclose(u, v, rtol=1e-3, atol=1e-5) for u, v in zip(update, s))), STEP_HINT)
            name = opt.parameters[0].name
            raise Mismatch(f"{where}：{name} 实际更新量对应的梯度 {[round(float(v), 4) for v in update[0].ravel()[:3]]}，"
                           f"应为 {[round(float(v), 4) for v in (grads[0] * factor).ravel()[:3]]}（系数 {factor:.4g}）。{bug}")
    return run_code_check("ch05.clipped_train_step", STEP_HINT, body)
