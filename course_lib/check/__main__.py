"""python -m course_lib.check --list | --self-test [--salts K] [NAME ...]"""
from __future__ import annotations

import argparse
import os
import dataclasses
import contextlib
import io
import sys

from . import all_exercises
from .common import recording

BAD_NUMBERS = (None, "42", float("nan"), [1, "a"])
DEMO_NUMBER = 0                   # the neutral value of the notebooks' example calls


def _quiet(func, arg):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ok = func(arg)
    return ok, out.getvalue()


def _recorded(func, arg):
    """(verdict, printed text, the call's Recorded run) of one checker call."""
    with recording() as runs:
        ok, out = _quiet(func, arg)
    return ok, out, (runs[-1] if runs else None)


def judged_problems(ex, ref_run, wrong_runs) -> list[str]:
    """What the grader's judge (grade/judge.py) would get wrong for this exercise: the
    reference's own run must pass against itself, and each wrong variant must show the bug
    in its OBSERVED data (not only in the verdict the learner's process prints)."""
    from ..grade.judge import first_difference, judge_run
    if ref_run is None or not ref_run.observations:
        return [f"{ex.name}: the reference run observed nothing (observe() / compare() missing)"]
    problems = []
    ref_run = dataclasses.replace(ref_run, provenance=None)      # the solution is not borrowed
    if judge_run(ref_run, ref_run).verdict != "pass":
        problems.append(f"{ex.name}: the judge does not pass the reference against itself")
    for label, run in wrong_runs:
        if run is None or first_difference(run, ref_run) is None:
            problems.append(f"{ex.name}: wrong variant {label}: no observed value differs from the "
                            "reference's (the bug shows only in the printed verdict: observe it)")
    return problems


def _scaffold(ex) -> str:
    """The source of the exercise's scaffold cell in the course's notebook ("" if none)."""
    from ..grade.notebooks import course_cells
    try:
        cells = course_cells()
    except (OSError, LookupError, ValueError):
        return ""
    return next((c.scaffold for c in cells.get(ex.chapter, []) if ex.name in c.exercises), "")


def leaked(ex, printed: list[tuple[str, str]]) -> list[str]:
    """Hints that give the answer away: a line of the reference solution's code (a code
    exercise) or the answer itself (a number exercise), in what the checker printed for a
    wrong attempt (``printed``: (label, text) pairs)."""
    import inspect
    from . import leaks
    problems = []
    if ex.kind == "code":
        obj = ex.solution()
        target = obj if (inspect.isclass(obj) or inspect.isfunction(obj)) else ex.solution
        runs = leaks.solution_runs(inspect.getsource(target), _scaffold(ex), ex.taught)
        for label, text in printed:
            found = leaks.shows_code(text, runs)
            if found:
                problems.append(f"{ex.name}: the hint for {label} shows the solution's code "
                                f"({found!r}): {text.strip()[:300]}")
    else:
        answer = ex.solution()
        values = answer if isinstance(answer, (list, tuple)) else [answer]
        for label, text in printed:
            for value in values:
                found = leaks.shows_number(text, value) if isinstance(value, (int, float)) else \
                    (str(value) if isinstance(value, str) and len(value) > 1 and value in text else None)
                if found:
                    problems.append(f"{ex.name}: the hint for {label} shows the answer ({found}): "
                                    f"{text.strip()[:300]}")
    return problems


def _crashing_attempt(*args, **kwargs):
    """A learner's code that raises: the checker then prints its general hint."""
    raise RuntimeError("an attempt that raises")


def self_test_one(ex) -> list[str]:
    """Surprises for one exercise (empty list: all as expected)."""
    problems = []
    if ex.solution is None:
        return [f"{ex.name}: no reference solution registered"]
    try:
        ok, out, ref_run = _recorded(ex.checker, ex.solution())
    except Exception as err:                      # noqa: BLE001
        return [f"{ex.name}: checker raised {type(err).__name__}: {err}"]
    if not ok:
        problems.append(f"{ex.name}: reference rejected: {out.strip()}")
    wrong_runs, printed = [], []
    if ex.kind == "code":
        if len(ex.wrong) < 2:
            problems.append(f"{ex.name}: only {len(ex.wrong)} wrong variants (need >= 2)")
        if not ex.targets:
            problems.append(f"{ex.name}: no targets (the library objects the exercise asks for)")
        for factory, hint in ex.wrong:
            ok, out, run = _recorded(ex.checker, factory())
            wrong_runs.append((getattr(factory, "__name__", str(factory)), run))
            printed.append((getattr(factory, "__name__", str(factory)), out))
            if ok or hint not in out:
                problems.append(f"{ex.name}: wrong variant {getattr(factory, '__name__', factory)} "
                                f"{'accepted' if ok else 'rejected without the hint ' + repr(hint)}: "
                                f"{out.strip()}")
        ok, out = _quiet(ex.checker, _crashing_attempt)   # its general hint is scanned too
        printed.append(("an attempt that raises", out))
        if ok:
            problems.append(f"{ex.name}: accepted an attempt that raises")
    else:
        for bad in (*BAD_NUMBERS, DEMO_NUMBER):
            try:
                ok, out = _quiet(ex.checker, bad)
            except Exception as err:              # noqa: BLE001
                problems.append(f"{ex.name}: raised {type(err).__name__} on {bad!r}")
                continue
            if ok:
                problems.append(f"{ex.name}: accepted {bad!r}")
            else:
                wrong_runs.append((repr(bad), _recorded(ex.checker, bad)[2]))
                printed.append((repr(bad), out))
    return problems + leaked(ex, printed) + judged_problems(ex, ref_run, wrong_runs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m course_lib.check")
    ap.add_argument("--list", action="store_true", help="one line per exercise: name, kind, task")
    ap.add_argument("--self-test", action="store_true",
                    help="every checker accepts its reference and rejects wrong solutions")
    ap.add_argument("--salts", type=int, default=0, metavar="K",
                    help="--self-test again under each grading salt 1..K (the gradebook draws a "
                         "random one per session: the hidden inputs change with it)")
    ap.add_argument("names", nargs="*", help="restrict --self-test to these exercises (or chNN)")
    args = ap.parse_args(argv)
    exercises = all_exercises()
    if args.list:
        for ex in exercises.values():
            print(f"{ex.name}\t{ex.kind}\t{ex.task}")
    if args.self_test:
        chosen = [e for n, e in exercises.items()
                  if not args.names or n in args.names or n.split(".")[0] in args.names]
        problems, before = [], os.environ.get("COURSE_CHECK_SALT")
        for salt in [before, *map(str, range(1, args.salts + 1))]:
            os.environ.pop("COURSE_CHECK_SALT", None)
            os.environ.update({} if salt is None else {"COURSE_CHECK_SALT": salt})
            label = "" if salt is None else f"salt {salt}: "
            for ex in chosen:
                found = [label + p for p in self_test_one(ex)]
                print(f"{'ok  ' if not found else 'FAIL'} {label}{ex.name}", flush=True)
                problems += found
        os.environ.pop("COURSE_CHECK_SALT", None)
        os.environ.update({} if before is None else {"COURSE_CHECK_SALT": before})
        salts = f" under {args.salts + 1} salts" if args.salts else ""
        print("\n".join(problems) if problems else
              f"self-test: {len(chosen)} exercises as expected{salts}")
        return 1 if problems else 0
    if not (args.list or args.self_test):
        ap.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
