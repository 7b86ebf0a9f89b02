"""Checkers for notebook 04 (callbacks, metrics)."""
import math

from .common import Mismatch, check_number, exercise, observe, run_code_check


def _sol(name):
    def factory():
        from ..solutions import ch04
        return getattr(ch04, name)
    factory.__name__ = name
    return factory


# --------------------------------------------------------------------------- numbers
HALVED = [0.1 * 0.5 ** i for i in range(4)]


@exercise("number", "每步后把学习率减半的回调：探针 4 步实际用到的学习率", solution=lambda: list(HALVED),
          question="把你写好的 `HalveLR` 交给 `probe_lr(callbacks=[HalveLR()])`，"
                   "量出 4 步实际用到的学习率（一个列表）。")
def ex1(answer) -> bool:
    """Learning rates really used in 4 probe steps by a callback that halves the lr
    (with ops.assign) after every step, starting from 0.1."""
    return check_number(answer, HALVED, rel=1e-4, abs_=1e-6, name="ch04.ex1",
                        hint="在 on_train_step_end 里用 ops.assign(opt.learning_rate, Tensor(新值)) "
                             "写回学习率，再用 probe_lr(callbacks=[你的回调]) 量出实际学习率。")


def _ppl_half_and_half() -> float:
    return math.exp(-(math.log(1 / 2) + math.log(1 / 32)) / 2)


@exercise("number", "一半 token 概率 1/2、另一半 1/32 时的困惑度", solution=_ppl_half_and_half,
          question="某语言模型在一半的 token 上给正确答案的概率是 1/2，在另一半上是 1/32。"
                   "`Perplexity` 报告的困惑度是多少？先手算。")
def ex2(answer) -> bool:
    """A model gives the right token probability 1/2 on half of the tokens and 1/32 on the
    other half: what perplexity does Perplexity report?"""
    return check_number(answer, _ppl_half_and_half(), rel=1e-6, name="ch04.ex2",
                        hint="困惑度 = exp(所有 token 的平均负对数似然)；先平均 -log p，再取 exp"
                             "（不是把两种困惑度 2 和 32 直接平均）。")


def _f1() -> float:
    tp, fp, fn = 40, 10, 20
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    return 2 * precision * recall / (precision + recall)


@exercise("number", "TP=40, FP=10, FN=20 时正类的 F1", solution=_f1,
          question="某次评估 TP=40、FP=10、FN=20，正类 F1 是多少？（保留 3 位小数）")
def ex3(answer) -> bool:
    """F1 of the positive class with TP=40, FP=10, FN=20."""
    return check_number(answer, _f1(), rel=0.0, abs_=5e-4, name="ch04.ex3",
                        hint="先算精确率 P = TP/(TP+FP) 和召回率 R = TP/(TP+FN)，F1 = 2PR/(P+R)。")


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


@exercise("number", "SCORES 与 patience=2：第几次评估后停止训练",
          solution=lambda: _stopping_evaluation(SCORES, patience=2),
          question="每轮的验证 F1 依次是 `ch04.SCORES`，"
                   '`EarlyStopping("f1", patience=2)` 在第几次评估之后停止训练（从 1 数起）？')
def ex4(answer) -> bool:
    """Validation F1 after each epoch is SCORES; EarlyStopping('f1', patience=2): after
    which evaluation (1-based) does training stop?"""
    return check_number(answer, _stopping_evaluation(SCORES, patience=2), integer=True,
                        name="ch04.ex4",
                        hint="只有比此前最好值更高才算进步；连续 patience 次没有进步就停。第 7 个分数"
                             "还来得及看到吗？")


# --------------------------------------------------------------------------- code
HALVE_HINT = ("在 on_train_step_end 里读 run_context.original_args().optimizer.learning_rate（一个 "
              "Parameter），用 ops.assign(lr, Tensor(当前值 * 0.5, ms.float32)) 写回。")


def _dry_run(callback) -> None:
    """Call the step hooks once outside Model.train, so a scaffold's NotImplementedError is
    reported as "not implemented yet" (other errors are left for the probe to report)."""
    import mindspore as ms
    import numpy as np
    from mindspore import nn
    from mindspore.train import RunContext
    w = ms.Parameter(ms.Tensor(np.zeros(1, np.float32)), name="w")
    context = RunContext(_Params(optimizer=nn.SGD([w], learning_rate=0.1), cur_step_num=1,
                                 cur_epoch_num=1, net_outputs=ms.Tensor(0.0)))
    for hook in (callback.on_train_step_begin, callback.on_train_step_end):
        try:
            hook(context)
        except NotImplementedError:
            raise
        except Exception:                              # noqa: BLE001 - the probe reports it
            return


@exercise("code", "写一个每步结束后把学习率减半的回调（用 probe_lr 量实际学习率）",
          solution=_sol("HalveLR"),
          wrong=((_sol("wrong_halve_attribute"), "ops.assign"), (_sol("wrong_halve_at_begin"), "第一步"),
                 (_sol("wrong_halve_from_initial"), "只减半了一次")),
          targets=("course_lib.callbacks.AssignLR",),
          question="**学习率减半回调。** 写 `HalveLR(Callback)`："
                   "每一步**结束后**把优化器的学习率减半（学习率是一个 `Parameter`，用 `ops.assign` 写回）"
                   "。"
                   "检查器用第 2 节的探针 `probe_lr(callbacks=[HalveLR()])` 在 PyNative 和 GRAPH 两种模式下**量出**每一步真正用到的学习率（初始 0.1）"
                   "，而不是读你打印的数字。")
def halve_lr(cls) -> bool:
    """``cls()`` is a Callback; probe_lr(callbacks=[cls()]) in PyNative and GRAPH mode must
    measure 0.1, 0.05, 0.025, 0.0125."""
    def body():
        from ..callbacks import probe_lr
        _dry_run(cls())                                # NotImplementedError surfaces here
        want = [round(x, 6) for x in HALVED]
        for mode in ("pynative", "graph"):
            where = f"{mode} 模式下探针实测"
            try:
                got = probe_lr(mode=mode, callbacks=[cls()])
            except IndexError:                         # probe_lr formats an exception without a message
                observe(f"{where}的学习率", None, want)
                raise Mismatch(f"{mode} 模式下训练时你的回调抛出了一个没有说明的异常。{HALVE_HINT}") from None
            observe(f"{where}的学习率", got, want, atol=1e-7, rtol=1e-4)
            if isinstance(got, str):
                if got.startswith("NotImplementedError"):
                    raise NotImplementedError
                bug = ("learning_rate 是 Parameter，不能用赋值替换：用 ops.assign 写回新值。"
                       if got.startswith("TypeError") else HALVE_HINT)
                raise Mismatch(f"{where}：训练时报错 {got}。{bug}")
            if all(math.isclose(g, w, rel_tol=1e-4, abs_tol=1e-7) for g, w in zip(got, want)):
                continue
            if all(math.isclose(g, w * 0.5, rel_tol=1e-4) for g, w in zip(got, want)):
                bug = "第一步就减半了：应在这一步用完之后（on_train_step_end）再减半。"
            elif all(math.isclose(g, want[0], rel_tol=1e-4) for g in got):
                bug = "学习率根本没有变：有没有用 ops.assign 写回 optimizer.learning_rate？"
            elif got[0] == want[0] and all(math.isclose(g, got[1], rel_tol=1e-4) for g in got[1:]):
                bug = "只减半了一次：每步都要从当前的学习率（lr.asnumpy()）出发再减半，而不是从初值。"
            else:
                bug = HALVE_HINT
            raise Mismatch(f"{where}的学习率是 {got}，应为 {want}。{bug}")
    return run_code_check("ch04.halve_lr", HALVE_HINT, body)


class _Params(dict):
    """What Model.train passes to callbacks: a dict whose keys also read as attributes."""

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None

    def __setattr__(self, key, value):
        self[key] = value


def _stop_epoch(make_callback, scores, patience):
    """Drive a callback through len(scores) epoch ends -> (epoch it asked to stop, evaluations)."""
    from mindspore.train import RunContext
    it, calls = iter(scores), []

    def evaluate():
        calls.append(1)
        return next(it)
    cb = make_callback(evaluate, patience)
    for epoch in range(1, len(scores) + 1):
        context = RunContext(_Params(cur_epoch_num=epoch, cur_step_num=10 * epoch, epoch_num=len(scores)))
        cb.on_train_epoch_end(context)
        if context.get_stop_requested():
            return epoch, len(calls)
    return None, len(calls)


STOP_HINT = ("on_train_epoch_end 里调用一次 evaluate()；比此前最好值严格更高才算进步（计数清零），"
             "否则计数 +1；计数达到 patience 时 run_context.request_stop()。")
STOP_CASES = (((0.9, 0.8, 0.7, 0.6, 0.5), 2), (SCORES, 2), (SCORES, 1), ((0.5, 0.5, 0.5, 0.5), 2), ((0.1, 0.2, 0.3, 0.4, 0.5), 1),
              ((0.9, 0.8, 0.95, 0.94, 0.96, 0.93, 0.92, 0.91), 3))


@exercise("code", "写一个早停回调：每轮末尾评估，连续 patience 次没有进步就 request_stop()",
          solution=_sol("EarlyStop"),
          wrong=((_sol("wrong_stop_no_reset"), "清零"), (_sol("wrong_stop_ties_improve"), "持平"),
                 (_sol("wrong_stop_one_late"), "多等了一次")),
          targets=("course_lib.callbacks.EarlyStopping",),
          question="**早停回调。** 写 `MyEarlyStopping(evaluate, patience=2)`："
                   "每轮末尾（`on_train_epoch_end`）调用一次 `evaluate()` 得到一个分数（越高越好）；"
                   "只有**严格高于**此前最好值才算进步（计数清零），否则计数加 1；"
                   "计数达到 `patience` 时调用 `run_context.request_stop()`。检查器用几组分数序列驱动它，"
                   '与 `course_lib.callbacks.EarlyStopping(mode="max")` 的停止时机比较。')
def early_stopping(cls) -> bool:
    """``cls(evaluate, patience)``; compared with the library's EarlyStopping(mode="max")."""
    def body():
        from ..callbacks import EarlyStopping

        def library(evaluate, patience):
            return EarlyStopping("score", lambda: {"score": evaluate()}, patience=patience,
                                 mode="max", restore_best=False)
        for scores, patience in STOP_CASES:
            got, calls = _stop_epoch(cls, scores, patience)
            want, _ = _stop_epoch(library, scores, patience)
            where = f"分数 {list(scores)}、patience={patience}："
            observe(f"{where}请求停止时的评估次数", got, want)
            observe(f"{where}evaluate() 的调用次数", calls, want or len(scores))
            if calls != (got or len(scores)):
                raise Mismatch(f"{where}跑了 {got or len(scores)} 轮，evaluate() 却被调用了 {calls} 次："
                               "每轮末尾正好调用一次。")
            if got == want:
                continue
            said = f"第 {got} 次评估后请求停止" if got else "始终没有请求停止"
            should = f"应在第 {want} 次评估后停止" if want else "应一直训练下去"
            bug = STOP_HINT
            if got and want and got == want + 1:
                bug = "多等了一次：计数达到 patience（>=）就该停，不是超过它。"
            elif patience == 2 and scores[0] == scores[1] and (got is None or got > 3):
                bug = "分数持平被当成了进步：只有严格更高才算进步。"
            elif got and (want is None or got < want):
                bug = "有进步之后没有把计数清零：计数的是“连续”没有进步的次数。"
            raise Mismatch(f"{where}你的回调{said}，{should}。{bug}")
    return run_code_check("ch04.early_stopping", STOP_HINT, body)
