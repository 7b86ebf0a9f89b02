"""Exercise checkers: ``from course_lib.check import ch06; ch06.rms_norm(MyRMSNorm)``.

Each checker prints a verdict (with a hint when wrong) and returns True/False; it never
raises. Code checkers run the learner's code next to the reference in
``course_lib.solutions`` on hidden inputs. ``python -m course_lib.check --list`` lists every
exercise; ``--self-test`` proves each checker accepts its reference and rejects realistic
wrong solutions with their hint.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil

from .common import EXERCISES, PASSED, Exercise  # noqa: F401


def all_exercises() -> dict[str, Exercise]:
    """Import every chapter's checker module (registering its exercises) and return the registry."""
    for mod in pkgutil.iter_modules(__path__):
        if mod.name.startswith("ch"):
            importlib.import_module(f"{__name__}.{mod.name}")
    return dict(sorted(EXERCISES.items()))


def show_solution(name: str) -> None:
    """Print the reference solution of exercise ``name`` (after you have tried it yourself)."""
    ex = all_exercises().get(name)
    if ex is None or ex.solution is None:
        raise KeyError(f"No exercise {name!r} with a stored solution; see python -m course_lib.check --list")
    obj = ex.solution()
    target = obj if (inspect.isclass(obj) or inspect.isfunction(obj)) else ex.solution
    print(inspect.getsource(target))


def _registered(name: str) -> None:
    """Raise KeyError unless ``name`` is a registered exercise."""
    if name not in all_exercises():
        raise KeyError(f"No exercise {name!r}; see python -m course_lib.check --list")


def after_pass(name: str, show, what: str = "这一格的输出") -> None:
    """Call ``show()`` once the learner's latest checked attempt at exercise ``name`` passed in
    this kernel; before that, print only when ``what`` will appear (and how to see the
    reference solution instead). A notebook stored with untouched scaffolds thus shows nothing
    of the answer below its exercise, and a wrong attempt does not unlock it either."""
    _registered(name)
    if name not in PASSED:
        print(f"⏳ {what}在 {name} 通过之后显示在这里：先做练习，通过后再运行这一格。"
              f"想先看参考答案，用 show_solution(\"{name}\")（成绩册把用到它的答案记为“借用”）。")
        return
    show()


def yours_or_reference(name: str, yours, reference):
    """What the cells below exercise ``name`` build with: the learner's ``yours`` once its
    latest checked attempt in this kernel passed, else the library's ``reference``; prints
    which one. In the gradebook's learner process (``COURSE_GRADING=1``) always ``reference``:
    code there must not learn a verdict."""
    from .common import grading           # not a package attribute: graded code must not ask it
    _registered(name)
    mine = name in PASSED and not grading()
    label = getattr(yours if mine else reference, "__name__", "?")
    print(f"下面用你的 {label}（{name} 已通过）" if mine else
          f"下面用课程库的 {reference.__module__}.{label}：{name} 通过之后，重新运行这一格就换成你的 "
          f"{getattr(yours, '__name__', '答案')}")
    return yours if mine else reference


def source_after(name: str, *objects) -> None:
    """Print the source of ``objects`` (the library's own version of what exercise ``name``
    asks for) once the learner's answer to that exercise passed (``after_pass``)."""
    def show():
        for obj in objects:
            print(inspect.getsource(obj))
    after_pass(name, show, "课程库的实现")
