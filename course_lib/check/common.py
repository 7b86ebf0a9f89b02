"""The one place that formats a verdict and runs a learner's code, so every chapter's
checkers read alike and never raise.

Two kinds of exercise (both registered with :func:`exercise`):

* **number** — the learner computes a value; ``check_number`` accepts Python/NumPy scalars,
  0-d arrays and 0-d Tensors, and rejects None/NaN/strings with a hint instead of raising.
* **code** — the learner writes a Cell, a function, a callback or a transform in a scaffold
  cell; the checker runs it next to the reference in ``course_lib.solutions`` on hidden inputs
  and raises :class:`Mismatch` naming the first difference and the likely bug.
  ``run_code_check`` turns that into a printed verdict (``NotImplementedError`` → "还没有实现").
"""
from __future__ import annotations

import functools
import inspect
import math
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .borrowing import example_beside_answer, in_notebook, provenance, running_cell


# --------------------------------------------------------------------------- recording
# A checker call is one *run*: what the learner's code produced, as data (observations), and
# the verdict the checker printed. ``course_lib.grade`` collects runs in the learner's process
# and judges them in its own, against a run of the reference solution (grade/judge.py): the
# verdict printed in the learner's process is never trusted there.
@dataclass(frozen=True)
class Observation:
    """One value the learner's code produced, and what it must equal.

    ``want`` is the library's value it was compared with (None: judged against the value the
    reference solution produces at the same point); ``atol``/``rtol`` the tolerance."""
    what: str
    got: Any
    want: Any = None
    atol: float = 0.0
    rtol: float = 0.0


@dataclass(frozen=True)
class Recorded:
    """One checker call as data: its printed verdict, and what it observed on the way."""
    exercise: str                      # "ch06.rms_norm"
    passed: bool
    hint: str = ""                     # the printed hint (the first mismatch) when not passed
    attempted: bool = True             # False: the scaffold still raised NotImplementedError
    observations: tuple = ()           # Observation, in the order the checker made them
    provenance: Any = None             # code exercises: where the learner's object was defined


_RECORDERS: list[list] = []
_OPEN: list[dict] = []                 # the checker calls under way: {"name", "obs", "provenance"}


@contextmanager
def recording():
    """Collect every checker call made inside the block: ``with recording() as got: ...``
    leaves a list of :class:`Recorded` in ``got`` (the checkers still print as usual)."""
    found: list[Recorded] = []
    _RECORDERS.append(found)
    try:
        yield found
    finally:
        _RECORDERS.remove(found)


def observe(what: str, got, want=None, *, atol: float = 0.0, rtol: float = 0.0) -> None:
    """Note a value the learner's code produced (and the library's value it must equal) in
    the checker call under way, for the grader to judge outside the learner's process.
    Checkers call it for every learner-derived value a verdict depends on (``compare`` and
    ``check_number`` do it themselves). Free when nothing is recording."""
    if _RECORDERS and _OPEN:
        _OPEN[-1]["obs"].append(Observation(str(what), plain(got),
                                            None if want is None else plain(want),
                                            float(atol), float(rtol)))


def plain(value):
    """A learner's value as plain data: NumPy arrays, numbers, strings, None and lists of
    them (Tensors become arrays, dicts sorted ``[key, value]`` pairs, other objects their
    type name)."""
    if hasattr(value, "asnumpy"):
        try:
            return np.array(value.asnumpy())
        except Exception:                               # noqa: BLE001 - a broken Tensor
            return f"<{type(value).__name__}>"
    if isinstance(value, np.ndarray):
        return np.array(value)
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        try:
            return [[str(k), plain(v)] for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))]
        except Exception:                               # noqa: BLE001
            return f"<{type(value).__name__}>"
    return f"<{type(value).__name__}>"


def grading() -> bool:
    """True in the gradebook's learner process (``COURSE_GRADING=1``), where code must not learn a verdict."""
    return os.environ.get("COURSE_GRADING") == "1"


ATTEMPTED: set[str] = set()          # exercises whose checker ran a learner's attempt in this process
PASSED: set[str] = set()             # ... whose latest checked attempt in this process passed


def _record(name: str, passed: bool, hint: str, attempted: bool = True) -> None:
    if attempted and name:
        ATTEMPTED.add(name)
    if name:
        (PASSED.add if passed and attempted else PASSED.discard)(name)
    run = next((r for r in reversed(_OPEN) if r["name"] == name), None)
    obs, prov = (tuple(run["obs"]), run["provenance"]) if run else ((), None)
    for found in _RECORDERS:
        found.append(Recorded(name, bool(passed), "" if passed else hint, attempted, obs, prov))


class Verdict:
    """What a checker returns: true or false like a bool, but nothing as a cell's value in
    Jupyter (the printed ✅/❌ line is the verdict; a bare ``False`` under every scaffold
    would read like a second, contradicting one)."""
    __slots__ = ("ok",)

    def __init__(self, ok):
        self.ok = bool(ok)

    def __bool__(self) -> bool:
        return self.ok

    def __eq__(self, other):
        return self.ok == bool(other) if isinstance(other, (bool, Verdict)) else NotImplemented

    def __hash__(self) -> int:
        return hash(self.ok)

    def __repr__(self) -> str:
        return repr(self.ok)

    def _ipython_display_(self) -> None:
        """Shown as nothing: see the class docstring."""


def verdict(ok: bool, hint: str = "", name: str = "") -> bool:
    label = f"[{name}] " if name else ""
    print(f"{label}✅ 正确！" if ok else f"{label}❌ 还不对。提示：{hint}")
    _record(name, ok, hint)
    return bool(ok)


def hidden_rng(seed: int) -> np.random.Generator:
    """The random generator of a checker's hidden inputs. In a notebook it is
    ``default_rng(seed)``; the grader sets ``COURSE_CHECK_SALT`` for a grading session, so the
    hidden inputs there are new ones no learner has seen (the same in the learner's process
    and in the reference run)."""
    salt = os.environ.get("COURSE_CHECK_SALT", "")
    return np.random.default_rng([seed, int(salt)] if salt.isdigit() else seed)


def close(a, b, rel: float = 1e-6, abs_: float = 0.0) -> bool:
    """Numbers (or equal-length sequences of numbers) equal within tolerance."""
    try:
        if _is_sequence(a) or _is_sequence(b):
            a, b = list(_to_numpy(a).ravel()), list(_to_numpy(b).ravel())
            return len(a) == len(b) and all(close(x, y, rel, abs_) for x, y in zip(a, b))
        x, y = float(_to_numpy(a)), float(_to_numpy(b))
        return math.isfinite(x) and math.isclose(x, y, rel_tol=rel, abs_tol=abs_)
    except (TypeError, ValueError):
        return False


# --------------------------------------------------------------------------- numbers
class BadAnswer(ValueError):
    """The answer is not of the right kind (None, NaN, a string, a float where an int is due)."""


def _to_numpy(x):
    if hasattr(x, "asnumpy"):          # mindspore.Tensor
        return x.asnumpy()
    return np.asarray(x)


def _is_sequence(x) -> bool:
    return isinstance(x, (list, tuple)) or (hasattr(x, "shape") and len(getattr(x, "shape")) > 0)


def as_number(answer, integer: bool = False):
    """A Python int/float from an int, float, NumPy scalar, 0-d array or 0-d Tensor."""
    if answer is None:
        raise BadAnswer("答案是 None：是不是忘了写 return，或者把 print(...) 的结果当成了答案？")
    if isinstance(answer, (str, bytes)):
        raise BadAnswer(f"答案是字符串 {answer!r}：请给出数字，而不是文字。")
    if isinstance(answer, bool):
        raise BadAnswer("答案是 True/False：这里需要一个数字。")
    try:
        arr = _to_numpy(answer)
    except Exception:                                   # noqa: BLE001 - any odd object
        raise BadAnswer(f"看不懂类型为 {type(answer).__name__} 的答案：请给出一个数字。") from None
    if arr.ndim != 0 and arr.size != 1:
        raise BadAnswer(f"答案的形状是 {arr.shape}：这里需要一个数字，不是数组。")
    value = arr.reshape(()).item()
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise BadAnswer(f"答案 {value!r} 不是数字。")
    if isinstance(value, float) and not math.isfinite(value):
        raise BadAnswer(f"答案是 {value}：计算里出现了 NaN/inf，检查一下除以 0 或 log(0)。")
    if integer:
        if isinstance(value, float) and not value.is_integer():
            raise BadAnswer(f"答案 {value} 不是整数：这里要数“个数”，不要小数。")
        return int(value)
    return value


def as_numbers(answer, integer: bool = False) -> list:
    """A list of numbers from a list/tuple/array/Tensor (each element as in :func:`as_number`)."""
    if answer is None or isinstance(answer, (str, bytes)):
        raise BadAnswer("这里需要一串数字（list 或数组）。")
    try:
        arr = _to_numpy(answer) if not isinstance(answer, (list, tuple)) else answer
        items = list(arr.ravel()) if hasattr(arr, "ravel") else list(arr)
    except Exception:                                   # noqa: BLE001
        raise BadAnswer(f"看不懂类型为 {type(answer).__name__} 的答案：请给出一串数字。") from None
    return [as_number(x, integer=integer) for x in items]


def check_number(answer, expected, *, name: str, hint: str, rel: float = 1e-6,
                 abs_: float = 0.0, integer: bool = False, say_length: bool = True) -> bool:
    """Verdict for a number (or, if ``expected`` is a sequence, a sequence of numbers). Never raises.
    ``say_length=False``: when the length is part of what the question asks, a wrong length is
    reported without the expected one."""
    observe("答案", answer, list(expected) if isinstance(expected, tuple) else expected,
            atol=abs_, rtol=rel)
    try:
        if isinstance(expected, (list, tuple)):
            got = as_numbers(answer, integer=integer)
            ok = len(got) == len(expected) and all(
                math.isclose(g, e, rel_tol=rel, abs_tol=abs_) for g, e in zip(got, expected))
            if len(got) != len(expected):
                hint = (f"需要 {len(expected)} 个数，你给了 {len(got)} 个。" if say_length
                        else f"你给了 {len(got)} 个数，个数就不对。") + hint
        else:
            ok = math.isclose(as_number(answer, integer=integer), expected, rel_tol=rel, abs_tol=abs_)
    except BadAnswer as bad:
        return verdict(False, str(bad), name)
    return verdict(ok, hint, name)


def recognised(answer, slips, default: str, *, rel: float = 1e-9, abs_: float = 0.0) -> str:
    """The hint for a wrong number: the text of the first ``(text, value)`` of ``slips`` (the
    result of a known wrong path: a number or a list of numbers) that ``answer`` equals
    within ``rel`` / ``abs_`` (``close``), else ``default``. Never raises."""
    for text, value in slips:
        if close(answer, value, rel, abs_):
            return text
    return default


# --------------------------------------------------------------------------- code
NOT_ATTEMPTED = "⏳ 还没有实现：把脚手架里的 raise NotImplementedError 换成你的代码。"


class Mismatch(AssertionError):
    """Raised by a code checker: the message names the first mismatch and the likely bug."""


def run_code_check(name: str, hint: str, body: Callable[[], None]) -> bool:
    """Run a checker body; print one verdict; never raise.

    ``NotImplementedError`` from the scaffold → "还没有实现" and nothing else (``hint`` is for
    a wrong attempt, never shown before one); :class:`Mismatch` → its diagnosis; any other
    exception from the learner's code → its type and message, then ``hint``.
    The body runs in PyNative mode (restored afterwards): a learner's Cell is executed eagerly,
    so a notebook that set GRAPH mode does not compile the scaffold, and errors point at the
    learner's line. A checker that needs GRAPH mode switches to it explicitly."""
    try:
        _flush_pending_errors()
    except Exception:                                   # noqa: BLE001 - not this check's error
        pass
    try:
        with _eager():
            _run_to_the_end(body)
    except NotImplementedError:
        print(f"[{name}] {NOT_ATTEMPTED}")             # nothing more: no hint before a try
        _record(name, False, NOT_ATTEMPTED, attempted=False)
        return False
    except Mismatch as m:
        return verdict(False, str(m), name)
    except KeyboardInterrupt:
        raise
    except Exception as err:                            # noqa: BLE001 - report, never raise
        return verdict(False, f"你的代码运行时抛出 {type(err).__name__}: {err}。{hint}", name)
    return verdict(True, name=name)


def _eager():
    from ..runtime import execution_mode
    return execution_mode("pynative")


def _flush_pending_errors() -> None:
    """Raise now any error MindSpore's asynchronous PyNative dispatch still holds: a failing
    operator whose result was never read reports only at a later synchronisation, which
    would otherwise land inside the *next* check and blame the learner's corrected code."""
    from mindspore.common.api import _pynative_executor
    _pynative_executor.sync()


def _run_to_the_end(body: Callable[[], None]) -> None:
    """``body()``, then every operator it dispatched finished: its pending error is raised
    here if the body returned, and dropped if the body raised (a wrong answer that fails on
    its first Tensor may have dispatched a second failing one that nobody reads)."""
    try:
        body()
    except BaseException:
        try:
            _flush_pending_errors()
        except Exception:                               # noqa: BLE001 - the body's error wins
            pass
        raise
    _flush_pending_errors()


def compare(got, want, what: str, *, atol: float = 1e-5, rtol: float = 1e-4, bug: str = "") -> None:
    """Raise :class:`Mismatch` unless arrays/Tensors ``got`` and ``want`` agree (shape, then values)."""
    observe(what, got, want, atol=atol, rtol=rtol)
    g, w = _to_numpy(got), _to_numpy(want)
    if g.shape != w.shape:
        raise Mismatch(f"{what} 的形状是 {tuple(g.shape)}，应为 {tuple(w.shape)}。{bug}")
    if not np.allclose(g.astype(np.float64), w.astype(np.float64), atol=atol, rtol=rtol, equal_nan=False):
        diff = np.abs(g.astype(np.float64) - w.astype(np.float64))
        idx = np.unravel_index(int(np.nanargmax(np.where(np.isnan(diff), np.inf, diff))), diff.shape)
        raise Mismatch(f"{what} 在位置 {tuple(int(i) for i in idx)} 上是 {g[idx]:.6g}，应为 {w[idx]:.6g}"
                       f"（最大误差 {np.nanmax(diff):.3g}）。{bug}")


# --------------------------------------------------------------------------- registry
# Each exercise is declared once, here: its id, kind, the question as the learner reads it and
# the notebook cell it is answered in. The chapter's 练习 list (tools/exercise_lists.py), the
# grader's cell table (grade/notebooks.py EXERCISE_CELLS) and the counts in tests derive from it.
NUMBER_CELL = "answers"                # the cell key all number exercises of a chapter share


@dataclass(frozen=True)
class Exercise:
    name: str                          # "ch06.rms_norm"
    kind: str                          # "code" | "number"
    task: str                          # one line, Chinese
    checker: Callable[[Any], bool]
    solution: Callable[[], Any] | None = None   # code: builds the reference object; number: the answer
    wrong: tuple = field(default_factory=tuple)  # code: ((factory, hint fragment the verdict must show), ...)
    targets: tuple = field(default_factory=tuple)  # code: dotted names of the library objects it asks for
    question: str = ""                 # the question as the learner reads it in the 练习 list (Markdown)
    cell: str = ""                     # exercises answered in one notebook cell share this key
    taught: tuple = field(default_factory=tuple)  # code: API the chapter shows before it on purpose

    @property
    def chapter(self) -> str:
        """The notebook's number: "06" for ``ch06.rms_norm``."""
        return self.name[2:4]


EXERCISES: dict[str, Exercise] = {}


def exercise(kind: str, task: str, solution: Callable[[], Any] | None = None, wrong=(),
             targets=(), *, question: str, cell: str | None = None, taught=()):
    """Register a checker: ``@exercise("code", "写一个 RMSNorm Cell", solution=..., wrong=(...),
    targets=("course_lib.layers.RMSNorm",), question="...")``. ``targets``: the library objects
    the exercise asks the learner to write (a graded cell that imports or uses one is
    "borrowed"). ``question``: the full question of the chapter's 练习 list, Markdown, without
    the checker call (tools/exercise_lists.py appends it). ``cell``: exercises answered in one
    notebook cell share a key; by default a code exercise has its own cell and the number
    exercises of a chapter share :data:`NUMBER_CELL`. ``taught``: code snippets of the
    solution that the chapter shows before the exercise on purpose, because it is the API
    the exercise is about (``"cb = run_context.original_args()"``): the scans for solution
    code shown too early (``leaks``) do not count them. Keep it to such calls, never logic."""
    if kind not in ("code", "number"):
        raise ValueError(f"kind must be 'code' or 'number', not {kind!r}")
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"exercise {task!r}: question= (the learner's question) is required")

    def register(func):
        name = f"{func.__module__.rsplit('.', 1)[-1]}.{func.__name__}"

        @functools.wraps(func)
        def checker(answer, *args, **kwargs):
            """In the gradebook's learner process (``COURSE_GRADING=1``) the call returns None:
            the verdict is computed in the grader's own process, and code in the graded cell
            cannot learn it (no loop that stops at the answer that passes)."""
            run = {"name": name, "obs": [],
                   "provenance": provenance(answer) if kind == "code" and _RECORDERS else None}
            if not grading():
                stop, value = _in_notebook(name, answer, kind, inspect.currentframe().f_back)
                if stop:
                    return value
            _OPEN.append(run)
            try:
                result = Verdict(func(answer, *args, **kwargs))
            finally:
                _OPEN.remove(run)
            return None if grading() else result
        key = cell or (func.__name__ if kind == "code" else NUMBER_CELL)
        EXERCISES[name] = Exercise(name, kind, task, checker, solution, tuple(wrong), tuple(targets),
                                   question.strip(), key, tuple(taught))
        return checker
    return register


def _in_notebook(name: str, answer, kind: str, caller) -> tuple[bool, Any]:
    """In a Jupyter kernel (the running cell read once): the course's example call beside the
    learner's answer is skipped (the gradebook drops it); a borrowed answer gets ❌ as in the
    gradebook (``borrowing.in_notebook``); a cell the gradebook would not run gets a warning
    line before its verdict. Returns (stop here, what the call returns); (False, None): check
    the answer as usual."""
    cell = running_cell()
    if cell is None:
        return False, None
    if kind == "number" and example_beside_answer(name, caller, cell):
        print(f"[{name}] ⏭ {name}(0) 是课程的示例调用：这个单元里已经有你的答案，它不计入（可以删掉这一行）。")
        return True, None
    borrowed, refused = in_notebook(name, answer, kind, EXERCISES, cell)
    if borrowed:
        print(f"[{name}] ❌ 这不是你自己写的答案（成绩册记为“借用”）：{borrowed}")
        _record(name, False, borrowed)
        return True, Verdict(False)
    if refused:
        print(f"[{name}] ⚠️ 成绩册不会运行这个单元：它{refused}。练习单元里只写题目要的代码，再调用检查函数。")
    return False, None


# --------------------------------------------------------------------------- Cell helpers
# Shared by the code checkers that take an nn.Cell class (imports are lazy: listing the
# exercises must not need MindSpore).
def parameter_shapes(cell) -> dict:
    """{parameter name: shape} of a Cell, in registration order."""
    return {name: tuple(p.shape) for name, p in cell.parameters_and_names()}


def expect_parameters(cell, expected: dict, bug: str = "") -> None:
    """Raise :class:`Mismatch` unless ``cell`` has exactly the parameters ``expected``
    ({name: shape}); the message names the first missing, unexpected or misshaped one."""
    got = parameter_shapes(cell)
    for name, shape in expected.items():
        if name not in got:
            raise Mismatch(f"缺少参数 {name}（形状 {shape}）；你的参数是 {sorted(got)}。"
                           f"子模块的属性名要和题目一致。{bug}")
        if tuple(got[name]) != tuple(shape):
            raise Mismatch(f"参数 {name} 的形状是 {got[name]}，应为 {tuple(shape)}。{bug}")
    extra = [n for n in got if n not in expected]
    if extra:
        raise Mismatch(f"多出了参数 {extra}：题目要求的参数只有 {sorted(expected)}。{bug}")


def randomize_parameters(cell, seed: int = 0, scale: float = 0.5) -> None:
    """Give every parameter of ``cell`` hidden random values (so LayerNorm gains are not 1,
    biases not 0, and a bug cannot hide behind an initial value)."""
    import mindspore as ms
    rng = np.random.default_rng(seed)
    for _, p in cell.parameters_and_names():
        value = rng.normal(0.0, scale, p.shape) + (1.0 if p.name.endswith(("gamma", "weight")) and
                                                   len(p.shape) == 1 else 0.0)
        p.set_data(ms.Tensor(value.astype(np.float32), p.dtype))


def copy_parameters(src, dst, rename: Callable[[str], str] = lambda n: n) -> None:
    """Copy every parameter of ``src`` into the parameter ``rename(name)`` of ``dst``."""
    import mindspore as ms
    target = dict(dst.parameters_and_names())
    for name, p in src.parameters_and_names():
        if rename(name) not in target:
            raise Mismatch(f"参数 {name} 在参考实现里没有对应的 {rename(name)}。")
        target[rename(name)].set_data(ms.Tensor(p.asnumpy(), target[rename(name)].dtype))


def grads_by_name(cell, inputs: tuple, weight) -> dict:
    """Gradients of ``sum(cell(*inputs) * weight)`` w.r.t. every trainable parameter, by name."""
    import mindspore as ms
    params = cell.trainable_params()
    w = ms.Tensor(np.asarray(weight, np.float32))

    def forward(*args):
        return (cell(*args) * w).sum()
    _, grads = ms.value_and_grad(forward, None, params)(*inputs)
    return {p.name: g.asnumpy() for p, g in zip(params, grads)}


def matches(got, want, atol: float = 1e-5, rtol: float = 1e-4) -> bool:
    """True if arrays/Tensors ``got`` and ``want`` have the same shape and values."""
    g, w = _to_numpy(got), _to_numpy(want)
    return g.shape == w.shape and bool(np.allclose(g.astype(np.float64), w.astype(np.float64),
                                                   atol=atol, rtol=rtol))


def diagnose(got, suspects: dict, atol: float = 1e-5, rtol: float = 1e-4) -> str:
    """The likely bug: the key of the first ``suspects`` entry ({bug text: what that bug
    would output}) that ``got`` matches, or "" if none does. Values may be callables."""
    for bug, value in suspects.items():
        try:
            if matches(got, value() if callable(value) else value, atol, rtol):
                return bug
        except Exception:                                # noqa: BLE001 - a suspect that cannot run
            continue
    return ""
