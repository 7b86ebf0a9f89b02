"""How long the gradebook takes for a class: N learners who answered every exercise right.

    .venv/bin/python benchmarks/bench_grading.py --learners 3

Each learner's folder holds all 17 notebooks with every exercise cell replaced by the right
answer of tests/learners/chNN.py (written the way the page invites). ``course_lib.grade.grade``
grades the class as an instructor would (at most 2 processes at a time, each chapter of each
learner in its own sandbox at COURSE_SCALE=ci). Prints the load average before and after, the
wall time, the time per learner and the count of each verdict (all "pass" expected).
"""
import argparse
import collections
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
import learners  # noqa: E402
from course_lib import grade as grading  # noqa: E402
from course_lib.grade import notebooks  # noqa: E402


def write_class(root: Path, n: int) -> None:
    """``root``/s01..sNN, each with every notebook answered right."""
    right = {(nn, key): learners.chapter(nn).RIGHT[key]
             for nn, groups in notebooks.EXERCISE_CELLS.items()
             for key in map(learners.key_of, groups)}
    learners.learner_folder(root / "s01", right)
    for i in range(2, n + 1):
        shutil.copytree(root / "s01", root / f"s{i:02d}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--learners", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="class_") as tmp:
        root = Path(tmp)
        write_class(root, args.learners)
        print("load average before: %.2f %.2f %.2f" % os.getloadavg(), flush=True)
        start = time.perf_counter()
        book = grading.grade(root, out_csv=root / "gradebook.csv")
        seconds = time.perf_counter() - start
        print("load average after:  %.2f %.2f %.2f" % os.getloadavg())
    verdicts = collections.Counter(r.verdict for who in book.results.values() for r in who.values())
    print(f"{args.learners} learners graded in {seconds:.1f} s, {seconds / args.learners:.1f} s "
          f"per learner; verdicts: {dict(verdicts)}")


if __name__ == "__main__":
    main()
