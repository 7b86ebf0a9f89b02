"""python -m course_lib.check --list | --self-test [NAME ...]"""
from __future__ import annotations

import argparse
import contextlib
import io
import sys

from . import all_exercises

BAD_NUMBERS = (None, "42", float("nan"), [1, "a"])


def _quiet(func, arg):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ok = func(arg)
    return ok, out.getvalue()


def self_test_one(ex) -> list[str]:
    """Surprises for one exercise (empty list: all as expected)."""
    problems = []
    if ex.solution is None:
        return [f"{ex.name}: no reference solution registered"]
    try:
        ok, out = _quiet(ex.checker, ex.solution())
    except Exception as err:                      # noqa: BLE001
        return [f"{ex.name}: checker raised {type(err).__name__}: {err}"]
    if not ok:
        problems.append(f"{ex.name}: reference rejected: {out.strip()}")
    if ex.kind == "code":
        if len(ex.wrong) < 2:
            problems.append(f"{ex.name}: only {len(ex.wrong)} wrong variants (need >= 2)")
        for factory, hint in ex.wrong:
            ok, out = _quiet(ex.checker, factory())
            if ok or hint not in out:
                problems.append(f"{ex.name}: wrong variant {getattr(factory, '__name__', factory)} "
                                f"{'accepted' if ok else 'rejected without the hint ' + repr(hint)}: "
                                f"{out.strip()}")
    else:
        for bad in BAD_NUMBERS:
            try:
                ok, _ = _quiet(ex.checker, bad)
            except Exception as err:              # noqa: BLE001
                problems.append(f"{ex.name}: raised {type(err).__name__} on {bad!r}")
                continue
            if ok:
                problems.append(f"{ex.name}: accepted {bad!r}")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m course_lib.check")
    ap.add_argument("--list", action="store_true", help="one line per exercise: name, kind, task")
    ap.add_argument("--self-test", action="store_true",
                    help="every checker accepts its reference and rejects wrong solutions")
    ap.add_argument("names", nargs="*", help="restrict --self-test to these exercises (or chNN)")
    args = ap.parse_args(argv)
    exercises = all_exercises()
    if args.list:
        for ex in exercises.values():
            print(f"{ex.name}\t{ex.kind}\t{ex.task}")
    if args.self_test:
        chosen = [e for n, e in exercises.items()
                  if not args.names or n in args.names or n.split(".")[0] in args.names]
        problems = []
        for ex in chosen:
            found = self_test_one(ex)
            print(f"{'ok  ' if not found else 'FAIL'} {ex.name}", flush=True)
            problems += found
        print("\n".join(problems) if problems else f"self-test: {len(chosen)} exercises as expected")
        return 1 if problems else 0
    if not (args.list or args.self_test):
        ap.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
