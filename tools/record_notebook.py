"""Re-execute notebooks and store ALL their outputs, stamped for the staleness test.

    make record                                   every notebook, COURSE_SCALE=full (the default)
    make record NB=notebooks/06_baichuan_build.ipynb SCALE=ci

The committed notebooks carry the outputs of a full-scale run (what learners run); checked
cells print facts that hold at both scales, so nbval at CI scale still passes against them.
Each notebook's line gives its wall time and the load average before it (the same execution
as ``make course``, which does not save); the run ends with the total.
"""
import os
import argparse
import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).parent))
from nbexec import execute, stamp_record  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--scale", default="full", choices=("full", "ci"))
    args = parser.parse_args(argv)
    total = 0.0
    for p in args.notebooks:
        load = "%.2f %.2f %.2f" % os.getloadavg()
        nb, seconds = execute(p.resolve(), scale=args.scale)
        nbformat.write(stamp_record(nb, args.scale), p)
        size = p.stat().st_size / 1e6
        total += seconds
        print(f"{p}: recorded at {args.scale} scale in {seconds:.1f} s ({size:.2f} MB; "
              f"load average before: {load})", flush=True)
    print(f"total: {total:.1f} s for {len(args.notebooks)} notebooks; load average after: "
          + "%.2f %.2f %.2f" % os.getloadavg(), flush=True)


if __name__ == "__main__":
    main()
