"""Is an answer the learner's own? One set of rules for the gradebook and the notebook.

The gradebook (``grade/judge.py``) applies :func:`library_origin` to where the learner's object
was defined, and ``grade/audit.py`` reads the exercise cell for uses of the course's answers.
In a Jupyter kernel, a checker applies both to the answer and to the running cell
(:func:`in_notebook`): the notebook prints ❌ for what the gradebook would mark "borrowed", and
warns when the gradebook would refuse to run the cell. Outside a kernel (tests, the self-test,
the gradebook's own processes) nothing here runs.
"""
from __future__ import annotations

import ast
import inspect
import os
import sysconfig
from typing import Callable

COURSE_LIB = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def provenance(obj) -> dict:
    """Where a learner's object was defined: its module and qualified name, the files its
    functions' code came from, and the classes it derives from (the grader flags an object
    taken or derived from the course library as borrowed)."""
    def where(o):
        code = getattr(o, "__code__", None)
        return {"module": str(getattr(o, "__module__", "") or ""),
                "name": str(getattr(o, "__qualname__", type(o).__name__)),
                "file": str(code.co_filename) if code is not None else ""}
    target = obj if (inspect.isclass(obj) or callable(obj)) else type(obj)
    info = where(inspect.unwrap(target) if inspect.isfunction(target) else target)
    info["bases"] = [where(c) for c in getattr(target, "__mro__", ())[1:]
                     if c.__module__.split(".")[0] == "course_lib"]
    info["methods"] = sorted({str(f.__code__.co_filename) for f in vars(target).values()
                              if inspect.isfunction(f)}) if inspect.isclass(target) else []
    return info


def library_origin(mine: dict | None, theirs: dict | None, own_file: Callable[[str], bool]) -> str:
    """Why the learner's object (``mine``: :func:`provenance`) is the library's rather than
    the learner's own, "" if it is their own: defined in the course library, its code from a
    file that is not the learner's (``own_file``), or derived from a course-library class that
    the reference solution (``theirs``) does not derive from."""
    if not mine:
        return ""
    allowed = {(b["module"], b["name"]) for b in (theirs or {}).get("bases", [])
               if not b["module"].startswith("course_lib.solutions")}
    origin = f"{mine['module']}.{mine['name']}"
    if mine["module"].startswith("course_lib"):
        return f"交上来的 {origin} 是课程库里现成的实现，不是你写的。"
    if mine["file"] and not own_file(mine["file"]):
        return f"交上来的函数的代码来自 {mine['file']}，不是你的练习单元。"
    outside = [m for m in mine["methods"] if not own_file(m)]
    if outside:
        return f"交上来的类的方法来自 {outside[0]}，不是你的练习单元。"
    for base in mine["bases"]:
        if (base["module"], base["name"]) not in allowed:
            return f"交上来的类继承了课程库的 {base['module']}.{base['name']}：题目要你自己写它。"
    return ""


def _library_dirs() -> tuple:
    paths = sysconfig.get_paths()
    return (COURSE_LIB,) + tuple(os.path.abspath(paths[k]) + os.sep
                                 for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths)


def written_in_notebook(path: str) -> bool:
    """Code from the learner's notebook cells (or the learner's own files), not from the
    course library, the standard library or an installed package."""
    return not os.path.abspath(path).startswith(_library_dirs()) if path else True


def running_cell():
    """(the source of the running Jupyter cell, the sources of the earlier cells), or None
    outside an IPython kernel."""
    import sys
    getipython = sys.modules.get("IPython.core.getipython")
    shell = getipython.get_ipython() if getipython else None
    history = list(getattr(shell, "user_ns", {}).get("In", ()) or ())
    if shell is None or not history:
        return None
    return history[-1], history[:-1]


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
        return True
    except (SyntaxError, ValueError):
        return False


def example_beside_answer(name: str, caller, cell) -> bool:
    """True when the statement running in the Jupyter cell (``caller``: its frame; ``cell``:
    :func:`running_cell`) is the course's example call ``name(0)`` and the cell calls ``name``
    elsewhere too: the learner's answer sits beside the example, which the gradebook drops
    (``grade.notebooks.without_examples``)."""
    if cell is None or caller is None or caller.f_code.co_name != "<module>":
        return False
    lines = cell[0].splitlines()
    if not 0 < caller.f_lineno <= len(lines):
        return False
    try:
        statement = ast.unparse(ast.parse(lines[caller.f_lineno - 1].strip()))
        calls = [n for n in ast.walk(ast.parse(cell[0]))
                 if isinstance(n, ast.Call) and ast.unparse(n.func) == name]
    except (SyntaxError, ValueError):
        return False
    return statement == f"{name}(0)" and len(calls) > 1


def in_notebook(name: str, answer, kind: str, registry: dict, cell) -> tuple[str, str]:
    """(why the answer is borrowed, why the gradebook would not run the cell) for exercise
    ``name`` answered in the running Jupyter cell (``cell``: :func:`running_cell`); ("", "")
    outside a kernel."""
    if cell is None:
        return "", ""
    from ..grade import audit                   # the gradebook's reader (imports nothing of ours)
    ex = registry[name]
    if kind == "code" and ex.solution is not None:
        reason = library_origin(provenance(answer), provenance(ex.solution()), written_in_notebook)
        if reason:
            return reason, ""
    source, earlier = cell
    setup = "\n".join(t for t in earlier if t and _parses(t))
    try:
        answered = audit.called(ast.parse(source), registry) or [name]
    except (SyntaxError, ValueError):
        return "", ""
    reading = audit.read_cell(source, setup, answered, {n: tuple(registry[n].targets) for n in answered},
                              {f"course_lib.check.{n}" for n in registry})
    found = reading.finding or reading.refused.get(name)
    if found is None:
        return "", ""
    return (found.reason, "") if found.verdict == "borrowed" else ("", found.reason)
