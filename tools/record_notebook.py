"""Re-execute notebooks at CI settings and store only the outputs nbval checks.

    make record NB=notebooks/06_baichuan_build.ipynb      (or several paths)
"""
import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).parent))
from nbexec import execute, keep_checked_outputs  # noqa: E402


def main(paths):
    if not paths:
        sys.exit("usage: record_notebook.py NOTEBOOK.ipynb [...]")
    for p in map(Path, paths):
        nb, seconds = execute(p.resolve())
        nbformat.write(keep_checked_outputs(nb), p)
        print(f"{p}: recorded in {seconds:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
