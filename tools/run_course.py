"""Execute every notebook in order, headless, and report each one's wall time.

Instructors run `make course` on a class machine before the lesson. The notebooks are not
modified. The scale is COURSE_SCALE (default: full, what learners will run).
"""
import os
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from nbexec import execute  # noqa: E402


def main():
    root = Path(__file__).resolve().parents[1] / "notebooks"
    notebooks = sorted(root.glob("[0-9][0-9]_*.ipynb"))
    scale = os.environ.get("COURSE_SCALE", "full")
    print(f"Running {len(notebooks)} notebooks at COURSE_SCALE={scale}\n")
    rows, failed = [], 0
    for nb_path in notebooks:
        load = "%.2f %.2f %.2f" % os.getloadavg()
        try:
            _, seconds = execute(nb_path)
            status = "ok"
        except Exception as err:  # report and go on: the instructor wants the full list
            seconds, status, failed = float("nan"), f"FAILED: {type(err).__name__}", failed + 1
            traceback.print_exc(limit=1)
        rows.append((nb_path.name, seconds, status))
        print(f"{nb_path.name:<45} {seconds:8.1f} s  {status}  (load average before: {load})",
              flush=True)
    total = sum(s for _, s, st in rows if st == "ok")
    print(f"\n{'total':<45} {total:8.1f} s  ({failed} failed)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
