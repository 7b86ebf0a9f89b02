"""Checkers for notebook 02 (Model: train / eval / predict, modes, mixed precision)."""
import math

from .common import (check_number, compare, diagnose, exercise, hidden_rng, Mismatch, observe,
                     recognised, run_code_check)


def _sol(name):
    def factory():
        from ..solutions import ch02
        return getattr(ch02, name)
    factory.__name__ = name
    return factory


# --------------------------------------------------------------------------- numbers
def _baseline(split: str, minority: bool = False) -> float:
    """Share of the majority class of the training labels (or of the other class) in ``split``."""
    from ..data import review_splits
    splits = review_splits()
    train = [y for _, y in splits.train]
    majority = max((0, 1), key=lambda c: (train.count(c), -c))
    labels = [y for _, y in getattr(splits, split)]
    return sum(y == (1 - majority if minority else majority) for y in labels) / len(labels)


def _test_baseline() -> float:
    return _baseline("test")


@exercise("number", "测试集上的多数类基线准确率（多数类由训练集决定），3 位小数",
          solution=lambda: round(_test_baseline(), 3),
          question="**测试集**（`splits.test`）上的多数类基线准确率是多少（多数类仍由训练集标签决定）？"
                   "保留 3 位小数（与正确值相差不超过 0.001 算对）。")
def ex1(answer) -> bool:
    """Majority-class baseline accuracy on the *test* reviews (majority taken from the
    training labels), to 3 decimals."""
    hint = recognised(answer, [
        ("这是验证集上的基线（第 1 节打印的那个）：题目问的是测试集。", _baseline("validation")),
        ("这是另一类在测试集里的比例：多数类由训练集的标签决定（第 1 节）。", _baseline("test", minority=True)),
    ], "回到第 1 节的多数类基线：多数类由哪个集合的标签决定，准确率又在哪个集合上算？"
       "答案保留 3 位小数。", abs_=5e-4)
    return check_number(answer, _test_baseline(), abs_=1e-3, rel=0, name="ch02.ex1", hint=hint)


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
    final = 2 * _fp32_layernorms(1) - _fp32_layernorms(2)         # LayerNorms outside the blocks
    hint = recognised(answer, [
        ("三个块里的都数到了，但编码器里不只有块："
                                         "第 2 节的参数公式列出了编码器的每一部分。", _fp32_layernorms() - final),
        ("每个 pre-norm 块里不止一个 LayerNorm（第 01 章第 5 节的块结构）。", 3),
    ], "O2 让哪一类层保持 float32（第 5 节的表）？再把 num_layers=3 的编码器里这样的层逐个数出来"
       "（第 01 章的块结构、本章第 2 节的参数公式）。")
    return check_number(answer, _fp32_layernorms(), integer=True, name="ch02.ex2", hint=hint)


@exercise("number", "1000 条评论、batch_size=22、不丢最后小批次，train(3, ...) 的优化步数",
          solution=lambda: 3 * math.ceil(1000 / 22),
          question="`review_dataset` 对 1000 条评论、`batch_size=22`（不丢弃最后的小批次）建好数据集后，"
                   "`model.train(3, data)` 一共执行多少步优化？")
def ex3(answer) -> bool:
    """model.train(3, data) where data = review_dataset(<1000 examples>, ..., batch_size=22)
    (drop_remainder=False): how many optimizer steps run?"""
    hint = recognised(answer, [
        ("最后那个不满 22 条的小批次也是一步：题目说不丢弃它。", 3 * (1000 // 22)),
        ("这是一轮（epoch）的步数：train 的第一个参数是轮数（第 3 节）。", math.ceil(1000 / 22)),
        ("这是本章 BATCH（32，CI 规模下 16）对应的步数：题目的 batch_size 是 22。", 3 * math.ceil(1000 / 32)),
        ("这是本章 BATCH（32，CI 规模下 16）对应的步数：题目的 batch_size 是 22。", 3 * math.ceil(1000 / 16)),
    ], "一轮（epoch）里有几个批（最后不满的小批次算不算），train(3, ...) 又跑几轮（第 3 节）？")
    return check_number(answer, 3 * math.ceil(1000 / 22), integer=True, name="ch02.ex3", hint=hint)


# --------------------------------------------------------------------------- code
LOSS_HINT = ("对照题目逐项核对：平滑后的目标分布给每个类别多少、log_softmax 沿哪一维、"
             "对类别求和之后对 batch 怎样汇总。")
FP16_TOL = 1e-3              # absolute tolerance of the float16 case (float32 cases: 1e-5)


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
          wrong=((_sol("wrong_loss_sum"), "在 batch 上是怎样合起来"), (_sol("wrong_loss_k_minus_1"), "K-1"),
                 (_sol("wrong_loss_no_smoothing"), "smoothing")),
          targets=("mindspore.nn.CrossEntropyLoss", "mindspore.ops.cross_entropy",
                   "mindspore.mint.nn.CrossEntropyLoss", "mindspore.mint.nn.functional.cross_entropy",
                   "mindspore.ops.nll_loss", "mindspore.mint.nn.functional.nll_loss"),
          question="**损失 Cell。** 写 `MyLabelSmoothingCE(smoothing)`："
                   "`construct(logits, labels)` 中 `logits` 形状 `(B, K)`、`labels` 形状 `(B,)`（int32），"
                   "目标分布是 `(1 - s)·one_hot + s/K`（K 个类别**都**分到 `s/K`，包括正确类），"
                   "损失是 `-Σ 目标 · log_softmax(logits)` 对 batch 取平均，返回一个标量。"
                   "`logits` 可能是 float16：先转成 float32，整个损失在 float32 下计算。"
                   "检查器的参考是 MindSpore 自带的 `nn.CrossEntropyLoss(label_smoothing=s)`（在 float32 下计算）。"
                   "不要调用它（或 `ops.cross_entropy`、`ops.nll_loss`、`mint` 里的交叉熵）：题目要你自己写它算的东西，"
                   "成绩册把这样得到的答案记为“借用”。检查器的"
                   "输入包括 batch 1、K=2 与 K=7、float16 的 logits；损失的容差是绝对 1e-5 加相对 1e-4"
                   "（float16 的 logits：绝对 1e-3 加相对 1e-4），还比较对 logits 的梯度。"
                   "检查器在 PyNative 下运行你的 Cell；想把它当本章 GRAPH 模式下 `Model(net, loss_fn=MyLabelSmoothingCE(0.1), ...)` 的损失，"
                   "`construct` 里只能用静态图支持的写法（例如不调用 `.asnumpy()`）。")
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
            observe(f"{what}的 dtype", str(got.dtype), "Float32")
            if got.dtype != ms.float32:
                raise Mismatch(f"logits 为 {logits.dtype} 时你的损失是 {got.dtype}：题目要求先把 logits 转成 "
                               "float32、整个损失在 float32 下计算（float16 只有约 3 位有效数字，"
                               "logits 大一些时误差会超出容差）。")
            log_p = np.log(np.exp(logits.astype(np.float64)) / np.exp(logits.astype(np.float64)).sum(-1, keepdims=True))
            one_hot = np.eye(classes)[labels]
            k1 = (1 - s) * one_hot + (1 - one_hot) * s / (classes - 1)
            bug = diagnose(got, {
                f"batch={batch} 时随 batch 变大，batch=1 时却对：损失在 batch 上是怎样合起来的？对照题目里损失的定义。":
                    lambda: want * batch if batch > 1 else None,
                "平滑的质量只分给了 K-1 个错误类别：nn.CrossEntropyLoss 的约定是 K 个类都分 s/K。":
                    lambda: -(k1 * log_p).sum(-1).mean() if s > 0 else None,
                "这是没有平滑的交叉熵：smoothing 被忽略了。":
                    lambda: -(one_hot * log_p).sum(-1).mean() if s > 0 else None,
            }, atol=1e-4)
            if not bug and logits.dtype == np.float16 and \
                    abs(float(got.reshape(()).asnumpy()) - float(want.asnumpy())) < 1e-2:
                bug = ("float16 的 logits 上差了一点、超出了容差：题目要求在 float32 下计算"
                       "（float16 的精度只有约 3 位有效数字）。")
            compare(got.reshape(()), want, what, atol=FP16_TOL if logits.dtype == np.float16 else 1e-5,
                    bug=bug or LOSS_HINT)
        batch, classes, s, logits, labels = next(iter(_loss_cases()))
        x, y = ms.Tensor(logits), ms.Tensor(labels)
        g_got = ms.grad(lambda t: cls(0.1)(t, y))(x)
        g_want = ms.grad(lambda t: nn.CrossEntropyLoss(label_smoothing=0.1)(t, y))(x)
        compare(g_got, g_want, "对 logits 的梯度", bug="前向对了、梯度不对：是不是用了 asnumpy() 或 stop_gradient？")
    return run_code_check("ch02.label_smoothing_loss", LOSS_HINT, body)


F1_HINT = ("对照题目逐项核对 clear、update、eval：上面给出了这次评估应有的 TP、FP、FN，"
           "看你的计数从哪一批开始和它们不同。")
ZERO_HINT = ("这次评估没有正类预测、也没有正类标签（TP = FP = FN = 0），F1 的分母为 0："
             "题目规定这时返回 0。")


def _f1(pred, labels) -> float:
    tp = int(((pred == 1) & (labels == 1)).sum())
    fp = int(((pred == 1) & (labels == 0)).sum())
    fn = int(((pred == 0) & (labels == 1)).sum())
    return 2 * tp / max(2 * tp + fp + fn, 1), tp, fp, fn


def _f1_evaluations(rng):
    """The four evaluations' batches (logits, labels), drawn again until every wrong answer
    the hints name gives a different F1 on them, whatever the grading session's salt: the
    last batch alone, a count not cleared between evaluations, precision, recall. The last
    evaluation is all negative (TP = FP = FN = 0)."""
    import numpy as np
    while True:
        runs = []
        for sizes in ([1, 7, 3], [5, 2], [4], [3, 2]):
            logits = [rng.normal(size=(b, 2)).astype(np.float32) for b in sizes]
            labels = [rng.integers(0, 2, size=b).astype(np.int32) for b in sizes]
            runs.append((logits, labels))
        runs[-1] = ([np.sort(lg, axis=-1)[:, ::-1].copy() for lg in runs[-1][0]],
                    [np.zeros_like(lb) for lb in runs[-1][1]])
        if _f1_discriminates(runs):
            return runs


def _f1_discriminates(runs) -> bool:
    """In every evaluation but the all-negative one, F1 and what each named wrong answer
    returns there differ pairwise, so each wrong answer fails with its own hint."""
    import numpy as np
    counts = np.zeros(3, dtype=int)
    for r, (logits, labels) in enumerate(runs[:-1]):
        pred, truth = np.concatenate([lg.argmax(-1) for lg in logits]), np.concatenate(labels)
        f1, tp, fp, fn = _f1(pred, truth)
        counts = counts + (tp, fp, fn)               # what a metric that never clears counts
        values = [f1, tp / max(tp + fp, 1), tp / max(tp + fn, 1)]
        if len(labels) > 1:
            values.append(_f1(logits[-1].argmax(-1), labels[-1])[0])
        if r > 0:
            values.append(2 * counts[0] / max(2 * counts[0] + counts[1] + counts[2], 1))
        if min(abs(a - b) for i, a in enumerate(values) for b in values[i + 1:]) < 1e-3:
            return False
    return True


@exercise("code", "写一个自定义指标 nn.Metric：正类的 F1（clear / update / eval），交给 Model(metrics=...)",
          solution=_sol("F1"),
          wrong=((_sol("wrong_f1_last_batch"), "累加"), (_sol("wrong_f1_no_clear"), "clear"),
                 (_sol("wrong_f1_precision"), "精确率")),
          targets=("course_lib.metrics.BinaryF1", "mindspore.train.F1", "mindspore.train.Fbeta",
                   "mindspore.nn.F1", "mindspore.nn.Fbeta"),
          question="**自定义指标。** 写 `MyF1(Metric)`（`from mindspore.train import Metric`）："
                   "`Metric` 在[第 04 章](04_callbacks.ipynb)细讲，这里用到的只有三个方法："
                   "`Model.eval` 开始时调用 `clear()`、每个批次调用一次 `update(...)`、最后调用 `eval()` 取结果；"
                   "脚手架里的 `self._convert_data(x)` 是基类 `Metric` 提供的方法，把 Tensor 或 list 转成 NumPy 数组"
                   "（MindSpore 2.7 `mindspore/train/metrics/metric.py` 第 126–145 行）。"
                   "`clear()` 清零，`update(logits, labels)` 用 `argmax(-1)` 得到预测、"
                   "**累加**正类（标签 1）的 TP/FP/FN，`eval()` 返回 `2TP / (2TP + FP + FN)`；"
                   "分母为 0（这次评估既没有正类预测、也没有正类标签）时返回 0。"
                   "检查器会分几个批次调用 `update`，并在两次评估之间调用 `clear`，"
                   "其中一次评估全是负类；F1 的容差是 1e-6。"
                   '写好后可以放进 `Model(..., metrics={"f1": MyF1()})`。'
                   "不要调用 `course_lib.metrics.BinaryF1` 或 MindSpore 自带的 `F1` / `Fbeta`：它们做的正是这件事，"
                   "成绩册把用到它们的答案记为“借用”。")
def f1_metric(cls) -> bool:
    """``cls()`` is a mindspore.train.Metric; update(logits (B, 2), labels (B,)); eval() -> float."""
    def body():
        import mindspore as ms
        import numpy as np
        metric = cls()
        for r, (logits, labels) in enumerate(_f1_evaluations(hidden_rng(0))):
            sizes = [len(lb) for lb in labels]
            metric.clear()
            for lg, lb in zip(logits, labels):
                metric.update(ms.Tensor(lg), ms.Tensor(lb))
            pred, truth = np.concatenate([lg.argmax(-1) for lg in logits]), np.concatenate(labels)
            want, tp, fp, fn = _f1(pred, truth)
            what = f"第 {r + 1} 次评估（批大小 {sizes}）的 F1"
            try:
                got = float(metric.eval())
            except ZeroDivisionError:
                observe(what, None, want, atol=1e-6)
                raise Mismatch(f"{what}：eval() 抛出了 ZeroDivisionError。{ZERO_HINT}") from None
            observe(what, got, want, atol=1e-6)
            if abs(got - want) < 1e-6:
                continue
            if tp + fp + fn == 0:
                raise Mismatch(f"{what} 是 {got:.4f}，应为 {want:.4f}。{ZERO_HINT}")
            last = _f1(logits[-1].argmax(-1), labels[-1])[0]
            bug = diagnose(got, {
                "只算了最后一个批次：update 应把 TP/FP/FN 累加，而不是覆盖。": last if len(sizes) > 1 else None,
                "这是精确率：eval() 要返回的是 F1（题目里的公式）。": tp / max(tp + fp, 1),
                "这是召回率：eval() 要返回的是 F1（题目里的公式）。": tp / max(tp + fn, 1),
            }, atol=1e-6)
            if not bug and r > 0:
                bug = "第一次评估对、之后的不对：clear() 没有把计数清零，上一次评估的数还在。"
            raise Mismatch(f"{what} 是 {got:.4f}，应为 {want:.4f}"
                           f"（TP={tp}, FP={fp}, FN={fn}）。{bug or F1_HINT}")
    return run_code_check("ch02.f1_metric", F1_HINT, body)
