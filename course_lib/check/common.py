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

import inspect
import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np


# --------------------------------------------------------------------------- recording
@dataclass(frozen=True)
class Recorded:
    """One verdict as data: what :func:`verdict` printed (``course_lib.grade`` collects these)."""
    exercise: str                      # "ch06.rms_norm"
    passed: bool
    hint: str = ""                     # the printed hint (the first mismatch) when not passed
    attempted: bool = True             # False: the scaffold still raised NotImplementedError


_RECORDERS: list[list] = []


@contextmanager
def recording():
    """Collect every verdict given inside the block: ``with recording() as got: ...`` leaves a
    list of :class:`Recorded` in ``got`` (the checkers still print as usual)."""
    found: list[Recorded] = []
    _RECORDERS.append(found)
    try:
        yield found
    finally:
        _RECORDERS.remove(found)


def _record(name: str, passed: bool, hint: str, attempted: bool = True) -> None:
    for found in _RECORDERS:
        found.append(Recorded(name, bool(passed), "" if passed else hint, attempted))


def verdict(ok: bool, hint: str = "", name: str = "") -> bool:
    label = f"[{name}] " if name else ""
    print(f"{label}✅ 正确！" if ok else f"{label}❌ 还不对。提示：{hint}")
    _record(name, ok, hint)
    return bool(ok)


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
                 abs_: float = 0.0, integer: bool = False) -> bool:
    """Verdict for a number (or, if ``expected`` is a sequence, a sequence of numbers). Never raises."""
    try:
        if isinstance(expected, (list, tuple)):
            got = as_numbers(answer, integer=integer)
            ok = len(got) == len(expected) and all(
                math.isclose(g, e, rel_tol=rel, abs_tol=abs_) for g, e in zip(got, expected))
            if len(got) != len(expected):
                hint = f"需要 {len(expected)} 个数，你给了 {len(got)} 个。" + hint
        else:
            ok = math.isclose(as_number(answer, integer=integer), expected, rel_tol=rel, abs_tol=abs_)
    except BadAnswer as bad:
        return verdict(False, str(bad), name)
    return verdict(ok, hint, name)


# --------------------------------------------------------------------------- code
class Mismatch(AssertionError):
    """Raised by a code checker: the message names the first mismatch and the likely bug."""


def run_code_check(name: str, hint: str, body: Callable[[], None]) -> bool:
    """Run a checker body; print one verdict; never raise.

    ``NotImplementedError`` from the scaffold → "还没有实现"; :class:`Mismatch` → its diagnosis;
    any other exception from the learner's code → its type and message.
    The body runs in PyNative mode (restored afterwards): a learner's Cell is executed eagerly,
    so a notebook that set GRAPH mode does not compile the scaffold, and errors point at the
    learner's line. A checker that needs GRAPH mode switches to it explicitly."""
    try:
        _flush_pending_errors()
    except Exception:                                   # noqa: BLE001 - not this check's error
        pass
    try:
        with _eager():
            body()
            _flush_pending_errors()
    except NotImplementedError:
        print(f"[{name}] ⏳ 还没有实现：把脚手架里的 raise NotImplementedError 换成你的代码。提示：{hint}")
        _record(name, False, hint, attempted=False)
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


def compare(got, want, what: str, *, atol: float = 1e-5, rtol: float = 1e-4, bug: str = "") -> None:
    """Raise :class:`Mismatch` unless arrays/Tensors ``got`` and ``want`` agree (shape, then values)."""
    g, w = _to_numpy(got), _to_numpy(want)
    if g.shape != w.shape:
        raise Mismatch(f"{what} 的形状是 {tuple(g.shape)}，应为 {tuple(w.shape)}。{bug}")
    if not np.allclose(g.astype(np.float64), w.astype(np.float64), atol=atol, rtol=rtol, equal_nan=False):
        diff = np.abs(g.astype(np.float64) - w.astype(np.float64))
        idx = np.unravel_index(int(np.nanargmax(np.where(np.isnan(diff), np.inf, diff))), diff.shape)
        raise Mismatch(f"{what} 在位置 {tuple(int(i) for i in idx)} 上是 {g[idx]:.6g}，应为 {w[idx]:.6g}"
                       f"（最大误差 {np.nanmax(diff):.3g}）。{bug}")


# --------------------------------------------------------------------------- registry
@dataclass(frozen=True)
class Exercise:
    name: str                          # "ch06.rms_norm"
    kind: str                          # "code" | "number"
    task: str                          # one line, Chinese
    checker: Callable[[Any], bool]
    solution: Callable[[], Any] | None = None   # code: builds the reference object; number: the answer
    wrong: tuple = field(default_factory=tuple)  # code: ((factory, hint fragment the verdict must show), ...)


EXERCISES: dict[str, Exercise] = {}


def exercise(kind: str, task: str, solution: Callable[[], Any] | None = None, wrong=()):
    """Register a checker: ``@exercise("code", "写一个 RMSNorm Cell", solution=..., wrong=(...))``."""
    if kind not in ("code", "number"):
        raise ValueError(f"kind must be 'code' or 'number', not {kind!r}")

    def register(func):
        name = f"{func.__module__.rsplit('.', 1)[-1]}.{func.__name__}"
        EXERCISES[name] = Exercise(name, kind, task, func, solution, tuple(wrong))
        return func
    return register


def show_solution(name: str) -> None:
    """Print the reference solution of exercise ``name`` (after you have tried it yourself)."""
    from . import all_exercises
    ex = all_exercises().get(name)
    if ex is None or ex.solution is None:
        raise KeyError(f"No exercise {name!r} with a stored solution; see python -m course_lib.check --list")
    obj = ex.solution()
    target = obj if (inspect.isclass(obj) or inspect.isfunction(obj)) else ex.solution
    print(inspect.getsource(target))


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
