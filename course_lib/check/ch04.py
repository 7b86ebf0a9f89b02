"""Checkers for notebook 04 (callbacks, metrics)."""
from .common import close, verdict


def ex1(answer) -> bool:
    """Learning rates really used in 4 probe steps by a callback that halves the lr
    (with ops.assign) after every step, starting from 0.1."""
    expected = [0.1 * 0.5 ** i for i in range(4)]
    ok = isinstance(answer, (list, tuple)) and close(list(answer), expected, rel=1e-4, abs_=1e-6)
    return verdict(ok, "在 on_train_step_end 里用 ops.assign(opt.learning_rate, Tensor(新值)) "
                   "写回学习率，再用 probe_lr(callbacks=[你的回调]) 量出实际学习率。", "ch04.ex1")


def ex2(answer) -> bool:
    """Perplexity of a model that gives every token of the course tokenizer the same logit."""
    from ..tokenizer import load_tokenizer
    ok = close(answer, load_tokenizer().vocab_size, rel=1e-6)
    return verdict(ok, "均匀分布下每个 token 的概率是 1/V，困惑度 = exp(-log(1/V))。", "ch04.ex2")


def ex3(answer) -> bool:
    """F1 of the positive class with TP=30, FP=10, FN=20."""
    tp, fp, fn = 30, 10, 20
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    ok = close(answer, 2 * precision * recall / (precision + recall), rel=1e-6, abs_=1e-9)
    return verdict(ok, "先算精确率 P = TP/(TP+FP) 和召回率 R = TP/(TP+FN)，F1 = 2PR/(P+R)。",
                   "ch04.ex3")


SCORES = (0.60, 0.65, 0.64, 0.66, 0.63, 0.62, 0.70)


def _stopping_evaluation(scores, patience: int) -> int | None:
    best, waited = None, 0
    for i, s in enumerate(scores, start=1):
        if best is None or s > best:
            best, waited = s, 0
        else:
            waited += 1
            if waited >= patience:
                return i
    return None


def ex4(answer) -> bool:
    """Validation F1 after each epoch is SCORES; EarlyStopping('f1', patience=2): after
    which evaluation (1-based) does training stop?"""
    ok = answer == _stopping_evaluation(SCORES, patience=2)
    return verdict(ok, "只有比此前最好值更高才算进步；连续 patience 次没有进步就停。第 7 个分数"
                   "还来得及看到吗？", "ch04.ex4")
