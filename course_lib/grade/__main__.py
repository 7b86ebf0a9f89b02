"""python -m course_lib.grade SUBMISSIONS_DIR [--out gradebook.csv] [--html report.html]
[--feedback DIR] [--timeout S]"""
from __future__ import annotations

import argparse
import sys

from . import DEFAULT_TIMEOUT, grade


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m course_lib.grade",
        description="Grade learners' notebooks: one folder of NN_*.ipynb (one learner) or one "
                    "sub-folder per learner. Each changed exercise cell runs in a fresh process.")
    ap.add_argument("submissions", help="folder of notebooks, or of one folder per learner")
    ap.add_argument("--out", metavar="CSV", help="write the gradebook (learner x exercise) here")
    ap.add_argument("--html", metavar="HTML", help="write a self-contained HTML report here")
    ap.add_argument("--feedback", metavar="DIR",
                    help="one feedback page per learner here (default: feedback/ next to --out/--html)")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                    help=f"seconds per exercise cell (default {DEFAULT_TIMEOUT:g})")
    ap.add_argument("--jobs", type=int, default=None, help="processes at a time (default 2)")
    args = ap.parse_args(argv)
    try:
        book = grade(args.submissions, out_csv=args.out, html=args.html,
                     timeout=args.timeout, jobs=args.jobs, feedback=args.feedback)
    except (FileNotFoundError, NotADirectoryError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print("\n".join(book.summary_lines()))
    for what, path in (("gradebook", args.out), ("report", args.html), ("feedback", args.feedback)):
        if path:
            print(f"{what}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
