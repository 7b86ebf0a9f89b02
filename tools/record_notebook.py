"""Re-execute notebooks and store ALL their outputs, stamped for the staleness test.

    make record                                   every notebook, COURSE_SCALE=full (the default)
    make record NB=notebooks/06_baichuan_build.ipynb SCALE=ci

The committed notebooks carry the outputs of a full-scale run (what learners run); checked
cells print facts that hold at both scales, so nbval at CI scale still passes against them.
"""
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
    for p in args.notebooks:
        nb, seconds = execute(p.resolve(), scale=args.scale)
        nbformat.write(stamp_record(nb, args.scale), p)
        size = p.stat().st_size / 1e6
        print(f"{p}: recorded at {args.scale} scale in {seconds:.1f} s ({size:.2f} MB)", flush=True)


if __name__ == "__main__":
    main()
