"""Checkers for notebook 04 (callbacks, metrics)."""
import math

from .common import check_number, close, exercise, Mismatch, observe, recognised, run_code_check


def _sol(name):
    def factory():
        from ..solutions import ch04
        return getattr(ch04, name)
    factory.__name__ = name
    return factory


# --------------------------------------------------------------------------- numbers
HALVE_EVERY = (1, 2)                             # halve_lr's hidden `every` values


def halved(every: int, steps: int = 4, *, early: bool = False, from_initial: bool = False) -> list:
    """The lr each of ``steps`` probe steps uses (from 0.1) under ``HalveLR(every)``: halved
    after steps every, 2 every, ... (counted from 1), so step s has been halved
    (s - 1) // every times. ``early``: one step sooner (s // every: halving as step s
    begins, or a counter that starts one ahead); ``from_initial``: 0.1 / 2 written each time."""
    used = []
    for s in range(1, steps + 1):
        k = s // every if early else (s - 1) // every
        used.append(0.1 * 0.5 ** (min(k, 1) if from_initial else k))
    return used


HALVED = halved(1)                               # halving after every step


def every_second_step(lr, step):
    """ex1's learning_rate_function: x0.1 whenever ``step`` is even (MindSpore's own example
    of LearningRateScheduler, with 1000 steps made 2)."""
    return lr * 0.1 if step % 2 == 0 else lr


def _scheduled(fn, steps: int = 4, lr: float = 0.1, *, called_before: bool = False,
               first_step: int = 1) -> list:
    """The learning rate each step uses when ``LearningRateScheduler(fn)`` drives it:
    MindSpore calls ``fn(lr, cur_step_num)`` at the END of step ``cur_step_num`` (counted
    from 1) and the value it returns is used from the next step on. ``called_before`` /
    ``first_step`` give the readings a learner may wrongly assume."""
    used = []
    for step in range(first_step, first_step + steps):
        if called_before:
            lr = fn(lr, step)
        used.append(lr)
        if not called_before:
            lr = fn(lr, step)
    return used


@exercise("number", "LearningRateScheduler(每 2 步乘 0.1) 在探针里 4 步实际用到的学习率",
          solution=lambda: _scheduled(every_second_step),
          question="第 2 节的 `scheduler` 一行用的是 MindSpore 自带的 `LearningRateScheduler(fn)`。"
                   "设想把 `LearningRateScheduler(lambda lr, step: lr * 0.1 if step % 2 == 0 else lr)` 交给同一个探针"
                   "（初始学习率 0.1，训练 4 步；这个 `fn` 就是 MindSpore 文档里的例子，只把 1000 换成了 2）。"
                   "4 步**实际**用到的学习率各是多少？按第 2 节常见误区里 `fn(lr, step)` 被调用的时机推理出来（`step` 从 1 数），"
                   "写成 4 个数的列表，每个数的相对误差在 1e-4 以内算对。提交之后可以在另一格里用探针 `probe_lr` 量出来核对；"
                   "在答题格里用 `probe_lr` 得到的答案，成绩册记为“借用”。",
          targets=("course_lib.callbacks.probe_lr",))
def ex1(answer) -> bool:
    """Learning rates really used in the 4 probe steps (initial lr 0.1) under
    LearningRateScheduler(lambda lr, step: lr * 0.1 if step % 2 == 0 else lr)."""
    want = _scheduled(every_second_step)
    hint = recognised(answer, [
        ("你的学习率比实测早一步变小：回到第 2 节常见误区，fn(lr, step) 在什么时候被调用，"
         "它的返回值从哪一步起生效？", _scheduled(every_second_step, called_before=True)),
        ("第 1 步用的应是优化器的初始学习率：回调只会在某一步结束后改它（第 2 节常见误区）。", _scheduled(every_second_step, called_before=True, first_step=0)),
        ("这是每步减半的学习率：题目里的 fn 只在部分步之后改变学习率。", HALVED),
        ("量出来的学习率没有变：fn 在哪几步之后返回了新值？", [0.1] * 4),
    ], "回到第 2 节常见误区：LearningRateScheduler 的 fn(lr, step) 在什么时候被调用、step 从几数起、"
       "返回值从哪一步起生效？再用探针量出来核对。", rel=1e-4)
    return check_number(answer, want, rel=1e-4, abs_=1e-6, name="ch04.ex1", hint=hint)


def _ppl_half_and_half() -> float:
    return math.exp(-(math.log(1 / 2) + math.log(1 / 32)) / 2)


@exercise("number", "一半 token 概率 1/2、另一半 1/32 时的困惑度", solution=_ppl_half_and_half,
          question="某语言模型在一半的 token 上给正确答案的概率是 1/2，在另一半上是 1/32。"
                   "`Perplexity` 报告的困惑度是多少？先手算（相对误差 1e-6 以内算对）。")
def ex2(answer) -> bool:
    """A model gives the right token probability 1/2 on half of the tokens and 1/32 on the
    other half: what perplexity does Perplexity report?"""
    hint = recognised(answer, [
        ("这是两种困惑度的算术平均：困惑度不是按 token 直接平均的量（第 3 节的定义）。", (2 + 32) / 2),
        ("这是用平均概率算的：第 3 节的定义里，在所有 token 上取平均的不是概率。", 1 / ((1 / 2 + 1 / 32) / 2)),
        ("符号反了：困惑度里平均的是负对数似然（第 3 节）。", 1 / _ppl_half_and_half()),
    ], "回到第 3 节困惑度的定义：在所有 token 上取平均的是哪个量，平均之后再做什么？", rel=1e-6)
    return check_number(answer, _ppl_half_and_half(), rel=1e-6, name="ch04.ex2", hint=hint)


# ex3: an evaluation described by counts, as a report would give them
EX3_REVIEWS, EX3_PREDICTED_POSITIVE, EX3_CORRECT_POSITIVE, EX3_ACTUAL_POSITIVE = 200, 50, 40, 60


def _ex3_counts() -> tuple:
    """(TP, FP, FN, TN) of ex3's evaluation."""
    tp = EX3_CORRECT_POSITIVE
    fp, fn = EX3_PREDICTED_POSITIVE - tp, EX3_ACTUAL_POSITIVE - tp
    return tp, fp, fn, EX3_REVIEWS - tp - fp - fn


def _f1() -> float:
    tp, fp, fn, _ = _ex3_counts()
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    return 2 * precision * recall / (precision + recall)


@exercise("number", "由评估的计数（判为正面 50 条、其中对 40 条、实际正面 60 条）求正类 F1", solution=_f1,
          question=f"某次评估共 {EX3_REVIEWS} 条评论：模型判为正面的有 {EX3_PREDICTED_POSITIVE} 条，"
                   f"其中 {EX3_CORRECT_POSITIVE} 条确实是正面；数据里正面评论一共 {EX3_ACTUAL_POSITIVE} 条。"
                   "正类（正面）的 F1 是多少？保留 3 位小数（误差 5e-4 以内算对）。")
def ex3(answer) -> bool:
    """An evaluation of 200 reviews: 50 predicted positive, 40 of them right; 60 positive in
    the data. The F1 of the positive class?"""
    tp, fp, fn, tn = _ex3_counts()
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    hint = recognised(answer, [
        ("这是精确率（判为正面的里有多少真是正面）：F1 还要用到召回率（第 3 节）。", precision),
        ("这是召回率（真正面的里有多少被找出来）：F1 还要用到精确率（第 3 节）。", recall),
        ("这是准确率：正类 F1 只看正类的精确率和召回率（第 3 节）。", (tp + tn) / EX3_REVIEWS),
        ("这是精确率和召回率的算术平均：F1 是另一种平均（第 3 节的定义）。", (precision + recall) / 2),
    ], "先从题目的计数得出 TP、FP、FN，再回到第 3 节正类 F1 的定义。答案保留 3 位小数。", rel=5e-4)
    return check_number(answer, _f1(), rel=0.0, abs_=5e-4, name="ch04.ex3", hint=hint)


SCORES = (0.60, 0.65, 0.64, 0.66, 0.63, 0.62, 0.70)


def _stopping_evaluation(scores, patience: int, reset: bool = True) -> int | None:
    """After which evaluation (1-based) EarlyStopping stops, None: never (``reset=False``:
    the count of evaluations without progress is never reset, a learner's bug)."""
    best, waited = None, 0
    for i, s in enumerate(scores, start=1):
        if best is None or s > best:
            best, waited = s, (0 if reset else waited)
        else:
            waited += 1
            if waited >= patience:
                return i
    return None


@exercise("number", "SCORES 与 patience=2：第几次评估后停止训练",
          solution=lambda: _stopping_evaluation(SCORES, patience=2),
          question="每轮的验证 F1 依次是 `ch04.SCORES`，"
                   "课程的 `callbacks.EarlyStopping` 监控 F1、`patience=2` 时，"
                   "在第几次评估之后停止训练（从 1 数起）？按第 4 节讲的规则手算；"
                   "把分数喂给 `callbacks.EarlyStopping` 跑出来的答案，成绩册记为“借用”。",
          targets=("course_lib.callbacks.EarlyStopping",))
def ex4(answer) -> bool:
    """Validation F1 after each epoch is SCORES; EarlyStopping('f1', patience=2): after
    which evaluation (1-based) does training stop?"""
    hint = recognised(answer, [
        ("计数在分数有进步之后没有清零：patience 数的是“连续”没有进步的次数。", _stopping_evaluation(SCORES, 2, reset=False)),
        ("按规则，训练在看到最后一个分数之前就停了：计数一达到 patience 就停（第 4 节）。", len(SCORES)),
        ("第一次没有进步时计数才是 1：patience=2 要连续两次没有进步。", _stopping_evaluation(SCORES, 1)),
    ], "按第 4 节 EarlyStopping 的规则把 SCORES 逐个走一遍：每次评估后记下此前的最好值和"
       "连续没有进步的次数。")
    return check_number(answer, _stopping_evaluation(SCORES, patience=2), integer=True,
                        name="ch04.ex4", hint=hint)


# --------------------------------------------------------------------------- code
HALVE_HINT = ("回到第 2 节：学习率是优化器里的一个 Parameter，哪种写法能让编译好的更新步骤读到新值？"
              "减半发生在第 every、2·every……步用完之后，并且从当前的学习率出发。")


REPLACED_HINT = ("你的回调把一个新的值赋给了 optimizer.learning_rate 这个属性：第 2 节常见误区讲过，"
                 "这样换上的值不一定被更新步骤用到（本章的探针在 PyNative 下量到的学习率不是设的值）。"
                 "学习率要写进原来那个 Parameter（题目里说了用什么）。")


def _dry_run(callback) -> bool:
    """Call the step hooks once outside Model.train, so a scaffold's NotImplementedError is
    reported as "not implemented yet" (other errors are left for the probe to report).
    Returns whether the hooks REPLACED ``optimizer.learning_rate`` (an attribute assignment:
    the chapter's pitfall: in PyNative its probe measures a learning rate other than the one
    set; why is a hypothesis, see the chapter)."""
    import mindspore as ms
    import numpy as np
    from mindspore import nn
    from mindspore.train import RunContext

    class Watched(nn.SGD):
        def __setattr__(self, name, value):
            if name == "learning_rate" and self.__dict__.get("_watching"):
                self.__dict__["_replaced"] = True
            super().__setattr__(name, value)
    w = ms.Parameter(ms.Tensor(np.zeros(1, np.float32)), name="w")
    opt = Watched([w], learning_rate=0.1)
    opt.__dict__["_watching"] = True
    context = RunContext(_Params(optimizer=opt, cur_step_num=1, cur_epoch_num=1,
                                 net_outputs=ms.Tensor(0.0)))
    for hook in (callback.on_train_step_begin, callback.on_train_step_end):
        try:
            hook(context)
        except NotImplementedError:
            raise
        except Exception:                              # noqa: BLE001 - the probe reports it
            break
    return bool(opt.__dict__.get("_replaced"))


def _build(cls, every):
    try:
        return cls(every)
    except TypeError as err:
        raise Mismatch(f"HalveLR({every}) 出错（{err}）：回调要像脚手架那样在构造时接收 every。") from None


def _probe_halving(cls, every: int, mode: str) -> None:
    """One probe run of ``cls(every)`` in ``mode``, compared with ``halved(every)``."""
    from ..callbacks import probe_lr
    want = [round(x, 6) for x in halved(every)]
    where = f"every={every}、{mode} 模式下探针实测"
    try:
        got = probe_lr(mode=mode, callbacks=[_build(cls, every)])
    except IndexError:                       # probe_lr formats an exception without a message
        observe(f"{where}的学习率", None, want)
        raise Mismatch(f"{mode} 模式下训练时你的回调抛出了一个没有说明的异常。{HALVE_HINT}") from None
    observe(f"{where}的学习率", got, want, atol=1e-7, rtol=1e-4)
    if isinstance(got, str):
        if got.startswith("NotImplementedError"):
            raise NotImplementedError
        raise Mismatch(f"{where}：训练时报错 {got}。{_error_hint(got)}")
    if close(got, want, rel=1e-4, abs_=1e-7):
        return
    slips = {                                # what a realistic slip measures -> what to say
        f"减半早了一步：第一次减半应在第 {every} 步用完之后（on_train_step_end；步数从 1 数），"
        "之后每 every 步一次。": halved(every, early=True),
        "学习率根本没有变：有没有用 ops.assign 写回 optimizer.learning_rate？": [0.1] * len(want),
        "只减半了一次：每次都要从优化器里当前的学习率出发再减半，而不是从初值。":
            halved(every, from_initial=True),
        f"每一步都减半了：every={every} 时只有第 {every}、{2 * every}……步之后才减半。": halved(1),
    }
    bug = next((text for text, value in slips.items() if close(got, value, rel=1e-4, abs_=1e-7)),
               HALVE_HINT)
    raise Mismatch(f"{where}的学习率是 {got}，应为 {want}。{bug}")


def _error_hint(error: str) -> str:
    """What a callback that raised inside ``Model.train`` got wrong, from the error text."""
    if error.startswith("TypeError") and ("64" in error or "data type" in error.lower()):
        return "写回的值的 dtype 和学习率 Parameter（float32）不一致：写进去的值的 dtype 要和它一样。"
    if error.startswith("TypeError"):
        return "learning_rate 是 Parameter：写回的值要是和它同 dtype、同形状的 Tensor（第 2 节）。"
    return HALVE_HINT


@exercise("code", "写一个每 every 步结束后把学习率减半的回调（用 probe_lr 量实际学习率）",
          solution=_sol("HalveLR"),
          wrong=((_sol("wrong_halve_attribute"), "这个属性"), (_sol("wrong_halve_attribute_tensor"), "这个属性"),
                 (_sol("wrong_halve_float64"), "dtype 和学习率"),
                 (_sol("wrong_halve_at_begin"), "早了一步"),
                 (_sol("wrong_halve_from_initial"), "只减半了一次"),
                 (_sol("wrong_halve_every_step"), "每一步都减半")),
          targets=("course_lib.callbacks.AssignLR",),
          # the API of section 2, shown there on purpose (NaiveLRSetter, AssignLR): how a
          # callback reaches the optimizer's lr Parameter and writes a float32 Tensor into it
          taught=("cb = run_context.original_args()", "lr = cb.optimizer.learning_rate",
                  "ops.assign(lr, Tensor(", "ms.float32))"),
          question="**学习率减半回调。** 写 `HalveLR(Callback)`：构造时接收 `every`（脚手架里已写好），"
                   "第 every、2·every、3·every……步**结束后**各把优化器的学习率减半，其余的步不改"
                   "（步数从 1 数，和第 2 节 `LearningRateScheduler` 交给 `fn` 的步数相同；"
                   "学习率是一个 `Parameter`，用 `ops.assign` 写回）。"
                   "检查器用第 2 节的探针 `probe_lr(callbacks=[HalveLR(every)])`，在 PyNative 和 GRAPH 两种模式下、"
                   "用两个不同的 `every` **量出**每一步真正用到的学习率（初始 0.1，4 步），而不是读你打印的数字。"
                   "不要继承或调用第 2 节的 `AssignLR`：自己写这个回调，成绩册把这样得到的答案记为“借用”。")
def halve_lr(cls) -> bool:
    """``cls(every)`` is a Callback; probe_lr(callbacks=[cls(every)]) in PyNative and GRAPH
    mode must measure ``halved(every)`` for every ``every`` of HALVE_EVERY."""
    def body():
        if _dry_run(_build(cls, 1)):                   # NotImplementedError surfaces here
            observe("回调是否替换了 optimizer.learning_rate 这个属性", True, False)
            raise Mismatch(REPLACED_HINT)
        for every in HALVE_EVERY:
            for mode in ("pynative", "graph"):
                _probe_halving(cls, every, mode)
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


STOP_HINT = ("把上面这组分数按题目的规则逐个走一遍：每次评估后的最好值和连续没有进步的次数各是多少，"
             "你的回调从哪一次开始和它不同？（第 4 节）")
# ex4's own case (SCORES, patience=2) is left out: a mismatch hint on it would state ex4's answer.
STOP_CASES = (((0.9, 0.8, 0.7, 0.6, 0.5), 2), ((0.30, 0.40, 0.35, 0.45, 0.44, 0.50, 0.49, 0.48), 2),
              (SCORES, 1), ((0.5, 0.5, 0.5, 0.5), 2), ((0.1, 0.2, 0.3, 0.4, 0.5), 1),
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
                   '与 `course_lib.callbacks.EarlyStopping(mode="max")` 的停止时机比较。'
                   "不要继承或调用这个 `EarlyStopping`：题目要你自己写它做的事，成绩册把这样得到的答案记为“借用”。")
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
                bug = "多等了一次：计数一达到 patience 就该停，不是等它超过 patience。"
            elif patience == 2 and scores[0] == scores[1] and (got is None or got > 3):
                bug = "分数持平被当成了进步：只有严格更高才算进步。"
            elif got and (want is None or got < want):
                bug = "有进步之后没有把计数清零：计数的是“连续”没有进步的次数。"
            raise Mismatch(f"{where}你的回调{said}，{should}。{bug}")
    return run_code_check("ch04.early_stopping", STOP_HINT, body)
