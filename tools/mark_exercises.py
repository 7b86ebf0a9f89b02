"""Write ``cell.metadata["course"]["exercise"]`` into the exercise cells of the notebooks.

    python tools/mark_exercises.py                    every notebook in notebooks/
    python tools/mark_exercises.py notebooks/07_*.ipynb
    python tools/mark_exercises.py --check            exit 1 if a notebook is not marked

The exercise cells come from ``course_lib.grade.notebooks.EXERCISE_CELLS``; a cell is found by
the mark it already has, else as the code cell that calls every checker of its group
(``ch03.shift_for_lm(``). Idempotent; changes metadata only (``source_sha1`` stamped by
``make record`` stays; sources and outputs are untouched) and writes a notebook only when
its marks change, in the JSON layout nbformat writes.
"""
import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from course_lib.grade.notebooks import (EXERCISE_CELLS, META_KEY, chapter_of,  # noqa: E402
                                        find_cell, metadata_value)


def _target(nb: dict, group: tuple) -> dict:
    found = find_cell(nb, group, trust_marks=False)
    if found is None:
        raise LookupError(f"no code cell calls every checker of {group}")
    return found


def mark(nb: dict, chapter: str) -> dict:
    """The notebook with exactly the table's marks (others removed); changes nothing else."""
    targets = {id(_target(nb, g)): metadata_value(g) for g in EXERCISE_CELLS[chapter]}
    for cell in nb["cells"]:
        meta = cell.setdefault("metadata", {})
        if id(cell) in targets:
            meta.setdefault(META_KEY, {})["exercise"] = targets[id(cell)]
        elif isinstance(meta.get(META_KEY), dict) and "exercise" in meta[META_KEY]:
            del meta[META_KEY]["exercise"]
            if not meta[META_KEY]:
                del meta[META_KEY]
    return nb


def dumps(nb: dict) -> str:
    """nbformat's layout (indent 1, sorted keys, UTF-8 text, final newline)."""
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if unmarked")
    args = ap.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    stale = []
    for path in paths:
        chapter = chapter_of(path)
        if chapter not in EXERCISE_CELLS:
            print(f"{path}: not a course notebook (no entry in EXERCISE_CELLS)", file=sys.stderr)
            return 2
        before = path.read_text(encoding="utf-8")
        after = dumps(mark(json.loads(before), chapter))
        if after != before:
            stale.append(path)
            if not args.check:
                path.write_text(after, encoding="utf-8")
        print(f"{path}: {'marked' if after != before and not args.check else 'unmarked' if after != before else 'up to date'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
