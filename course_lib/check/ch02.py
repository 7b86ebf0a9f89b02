"""Checkers for notebook 02 (Model: train / eval / predict, modes, mixed precision)."""
import math

from .common import (Mismatch, check_number, compare, diagnose, exercise, hidden_rng, observe,
                     run_code_check)


def _sol(name):
    def factory():
        from ..solutions import ch02
        return getattr(ch02, name)
    factory.__name__ = name
    return factory


# --------------------------------------------------------------------------- numbers
def _test_baseline() -> float:
    from ..data import review_splits
    splits = review_splits()
    train = [y for _, y in splits.train]
    majority = max((0, 1), key=lambda c: (train.count(c), -c))
    test = [y for _, y in splits.test]
    return sum(y == majority for y in test) / len(test)


@exercise("number", "测试集上的多数类基线准确率（多数类由训练集决定），3 位小数",
          solution=lambda: round(_test_baseline(), 3),
          question="**测试集**（`splits.test`）上的多数类基线准确率是多少（多数类仍由训练集标签决定）？"
                   "保留 3 位小数。")
def ex1(answer) -> bool:
    """Majority-class baseline accuracy on the *test* reviews (majority taken from the
    training labels), to 3 decimals."""
    return check_number(answer, _test_baseline(), abs_=1e-3, rel=0, name="ch02.ex1",
                        hint="多数类只由训练集标签决定；再数测试集（splits.test）里这一类占多少。")


def _fp32_layernorms(num_layers: int = 3) -> int:
    from mindspore import nn
    from ..classifier import SentimentClassifier
    net = SentimentClassifier(100, 16, embed_dim=8, num_heads=2, ffn_dim=16, num_layers=num_layers)
    return sum(isinstance(cell, nn.LayerNorm) for _, cell in net.cells_and_names())


@exercise("number", "amp_level='O2' 下 3 层编码器的 SentimentClassifier 有几个 LayerNorm 保持 float32",
          solution=_fp32_layernorms,
          question="把本章的 `SentimentClassifier` 改成 `num_layers=3`（pre-norm 块，其余不变），"
                   '用 `amp_level="O2"` 训练时，有几个 `nn.LayerNorm` 子层仍然按 float32 计算？'
                   "先推理（第 5 节的表、[第 01 章](01_cell.ipynb)的块结构、第 2 节的参数公式）。")
def ex2(answer) -> bool:
    """SentimentClassifier with num_layers=3 (pre-norm blocks) under amp_level="O2": how
    many nn.LayerNorm sub-cells keep computing in float32?"""
    return check_number(answer, _fp32_layernorms(), integer=True, name="ch02.ex2",
                        hint="O2 让哪一类层留在 float32（第 5 节的表）？数一数每个 pre-norm 块里有几个，"
                             "再看 TransformerEncoder 在所有块之后还做了什么（第 2 节的参数公式里有它）。")


@exercise("number", "1000 条评论、batch_size=32、不丢最后小批次，train(3, ...) 的优化步数",
          solution=lambda: 3 * math.ceil(1000 / 32),
          question="`review_dataset` 对 1000 条评论、`batch_size=32`（不丢弃最后的小批次）建好数据集后，"
                   "`model.train(3, data)` 一共执行多少步优化？")
def ex3(answer) -> bool:
    """model.train(3, data) where data = review_dataset(<1000 examples>, ..., batch_size=32)
    (drop_remainder=False): how many optimizer steps run?"""
    return check_number(answer, 3 * math.ceil(1000 / 32), integer=True, name="ch02.ex3",
                        hint="每个 epoch 的步数 = ceil(样本数 / batch_size)（不丢最后一个小批次）。")


# --------------------------------------------------------------------------- code
LOSS_HINT = ("目标分布 = (1-s)·one_hot + s/K（K 个类别都分到 s/K，包括正确类），"
             "损失 = -Σ 目标·log_softmax(logits)，再对 batch 取平均。")


def _loss_cases():
    import numpy as np
    rng = hidden_rng(0)
    for batch, classes, s, dtype in ((1, 2, 0.1, np.float32), (5, 2, 0.1, np.float32),
                                     (4, 7, 0.2, np.float32), (3, 7, 0.0, np.float32),
                                     (6, 5, 0.1, np.float16)):
        logits = (rng.normal(size=(batch, classes)) * 3).astype(dtype)
        labels = rng.integers(0, classes, size=batch).astype(np.int32)
        yield batch, classes, s, logits, labels


@exercise("code", "写一个带 label smoothing 的交叉熵损失 Cell（可直接交给 Model 的 loss_fn）",
          solution=_sol("LabelSmoothingCE"),
          wrong=((_sol("wrong_loss_sum"), "sum"), (_sol("wrong_loss_k_minus_1"), "K-1"),
                 (_sol("wrong_loss_no_smoothing"), "smoothing")),
          targets=("mindspore.nn.CrossEntropyLoss", "mindspore.ops.cross_entropy",
                   "mindspore.mint.nn.CrossEntropyLoss", "mindspore.mint.nn.functional.cross_entropy"),
          question="**损失 Cell。** 写 `MyLabelSmoothingCE(smoothing)`："
                   "`construct(logits, labels)` 中 `logits` 形状 `(B, K)`、`labels` 形状 `(B,)`（int32），"
                   "目标分布是 `(1 - s)·one_hot + s/K`（K 个类别**都**分到 `s/K`，包括正确类），"
                   "损失是 `-Σ 目标 · log_softmax(logits)` 对 batch 取平均。"
                   "检查器的参考是 MindSpore 自带的 `nn.CrossEntropyLoss(label_smoothing=s)`，"
                   "输入包括 batch 1、K=2 与 K=7、float16 的 logits，并比较对 logits 的梯度。"
                   "写好后它可以直接当 `Model(net, loss_fn=MyLabelSmoothingCE(0.1), ...)` 的损失。")
def label_smoothing_loss(cls) -> bool:
    """``cls(smoothing)``; construct(logits (B, K), labels (B,) int32) -> scalar mean loss.
    Reference: MindSpore's own nn.CrossEntropyLoss(label_smoothing=s)."""
    def body():
        import mindspore as ms
        import numpy as np
        from mindspore import nn
        for batch, classes, s, logits, labels in _loss_cases():
            learner, ref = cls(s), nn.CrossEntropyLoss(label_smoothing=s)
            x, y = ms.Tensor(logits), ms.Tensor(labels)
            got = learner(x, y)
            want = ref(x.astype(ms.float32), y)
            what = f"batch={batch}、K={classes}、s={s}、logits 为 {logits.dtype} 时的损失"
            observe(f"{what}是否为标量", tuple(got.shape) in ((), (1,)), True)
            if got.shape not in ((), (1,)):
                raise Mismatch(f"损失的形状是 {tuple(got.shape)}，应是一个标量：最后要 .mean()。")
            log_p = np.log(np.exp(logits.astype(np.float64)) / np.exp(logits.astype(np.float64)).sum(-1, keepdims=True))
            one_hot = np.eye(classes)[labels]
            k1 = (1 - s) * one_hot + (1 - one_hot) * s / (classes - 1)
            bug = diagnose(got, {
                f"batch={batch} 时正好是正确值的 {batch} 倍：对 batch 求了 sum，应取 mean。":
                    lambda: want * batch if batch > 1 else None,
                "平滑的质量只分给了 K-1 个错误类别：nn.CrossEntropyLoss 的约定是 K 个类都分 s/K。":
                    lambda: -(k1 * log_p).sum(-1).mean() if s > 0 else None,
                "这是没有平滑的交叉熵：smoothing 被忽略了。":
                    lambda: -(one_hot * log_p).sum(-1).mean() if s > 0 else None,
            }, atol=1e-4)
            compare(got.reshape(()), want, what, atol=1e-3 if logits.dtype == np.float16 else 1e-5,
                    bug=bug or LOSS_HINT)
        batch, classes, s, logits, labels = next(iter(_loss_cases()))
        x, y = ms.Tensor(logits), ms.Tensor(labels)
        g_got = ms.grad(lambda t: cls(0.1)(t, y))(x)
        g_want = ms.grad(lambda t: nn.CrossEntropyLoss(label_smoothing=0.1)(t, y))(x)
        compare(g_got, g_want, "对 logits 的梯度", bug="前向对了、梯度不对：是不是用了 asnumpy() 或 stop_gradient？")
    return run_code_check("ch02.label_smoothing_loss", LOSS_HINT, body)


F1_HINT = ("clear() 把 TP/FP/FN 清零；update(logits, labels) 用 argmax(-1) 得到预测并累加计数；"
           "eval() 返回 2TP / (2TP + FP + FN)。")


def _f1(pred, labels) -> float:
    tp = int(((pred == 1) & (labels == 1)).sum())
    fp = int(((pred == 1) & (labels == 0)).sum())
    fn = int(((pred == 0) & (labels == 1)).sum())
    return 2 * tp / max(2 * tp + fp + fn, 1), tp, fp, fn


@exercise("code", "写一个自定义指标 nn.Metric：正类的 F1（clear / update / eval），交给 Model(metrics=...)",
          solution=_sol("F1"),
          wrong=((_sol("wrong_f1_last_batch"), "累加"), (_sol("wrong_f1_no_clear"), "clear"),
                 (_sol("wrong_f1_precision"), "精确率")),
          targets=("course_lib.metrics.BinaryF1",),
          question="**自定义指标。** 写 `MyF1(Metric)`（`from mindspore.train import Metric`）："
                   "`clear()` 清零，`update(logits, labels)` 用 `argmax(-1)` 得到预测、"
                   "**累加**正类的 TP/FP/FN，`eval()` 返回 `2TP / (2TP + FP + FN)`。"
                   "检查器会分几个批次调用 `update`，并在两次评估之间调用 `clear`。"
                   '写好后可以放进 `Model(..., metrics={"f1": MyF1()})`。')
def f1_metric(cls) -> bool:
    """``cls()`` is a mindspore.train.Metric; update(logits (B, 2), labels (B,)); eval() -> float."""
    def body():
        import mindspore as ms
        import numpy as np
        rng = hidden_rng(0)
        metric = cls()
        runs = [[1, 7, 3], [5, 2], [4]]                # batch sizes of three evaluations
        for r, sizes in enumerate(runs):
            metric.clear()
            logits = [rng.normal(size=(b, 2)).astype(np.float32) for b in sizes]
            labels = [rng.integers(0, 2, size=b).astype(np.int32) for b in sizes]
            for lg, lb in zip(logits, labels):
                metric.update(ms.Tensor(lg), ms.Tensor(lb))
            pred, truth = np.concatenate([lg.argmax(-1) for lg in logits]), np.concatenate(labels)
            want, tp, fp, fn = _f1(pred, truth)
            got = float(metric.eval())
            observe(f"第 {r + 1} 次评估（批大小 {sizes}）的 F1", got, want, atol=1e-6)
            if abs(got - want) < 1e-6:
                continue
            last = _f1(logits[-1].argmax(-1), labels[-1])[0]
            bug = diagnose(got, {
                "只算了最后一个批次：update 应把 TP/FP/FN 累加，而不是覆盖。": last if len(sizes) > 1 else None,
                "这是精确率 TP/(TP+FP)，不是 F1 = 2TP/(2TP+FP+FN)。": tp / max(tp + fp, 1),
                "这是召回率 TP/(TP+FN)，不是 F1。": tp / max(tp + fn, 1),
            }, atol=1e-6)
            if not bug and r > 0:
                bug = "第一次评估对、之后的不对：clear() 没有把计数清零，上一次评估的数还在。"
            raise Mismatch(f"第 {r + 1} 次评估（批大小 {sizes}）的 F1 是 {got:.4f}，应为 {want:.4f}"
                           f"（TP={tp}, FP={fp}, FN={fn}）。{bug or F1_HINT}")
    return run_code_check("ch02.f1_metric", F1_HINT, body)
