"""Learners' answers to every exercise of the course: one module per chapter, ``chNN.py``.

Each module holds, for every exercise cell of notebook NN (the key: the exercise id, or the
tuple of ids of a cell that holds several, as ``course_lib.grade.notebooks.EXERCISE_CELLS``):

* ``RIGHT[key]``: the cell's source as a learner writes a correct answer the way the page
  invites: with the names the notebook's earlier cells defined (``blocks``, ``math``,
  ``tok``, helper functions...), no import the notebook did not make, calling the checker
  as the scaffold does, printing nothing else;
* ``WRONG[key]``: ``(source, {exercise: text its hint must contain})``: a realistic wrong
  answer; the exercises named fail with a hint that contains the text, every other
  exercise of the cell is answered right and passes.

``learner_folder`` writes a learner's folder of notebooks with chosen answers typed in:
tests/test_learner_path.py grades such folders (and the untouched scaffolds) through the gradebook,
benchmarks/bench_grading.py times the gradebook on them;
tools/learner_notebooks.py puts each RIGHT answer after its exercise cell in copies of the
notebooks that ``make test`` runs under nbval.
"""
from __future__ import annotations

import importlib
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
COURSE = HERE.parents[1] / "notebooks"


def key_of(group) -> str | tuple:
    """The key of an exercise group in RIGHT / WRONG: the id of a one-exercise cell, else the tuple."""
    group = tuple(group)
    return group[0] if len(group) == 1 else group


def chapter(nn: str):
    """The answers module of notebook ``nn`` ("03"), or None if there is none yet."""
    if not (HERE / f"ch{nn}.py").exists():
        return None
    return importlib.import_module(f"{__name__}.ch{nn}")


def learner_folder(folder: Path, sources: dict) -> None:
    """The course's notebooks in ``folder``, each exercise cell's source replaced by
    ``sources[(chapter, key)]`` where given."""
    from course_lib.grade import notebooks
    folder.mkdir(parents=True)
    for path in sorted(COURSE.glob("[0-9][0-9]_*.ipynb")):
        nb = notebooks.read_notebook(path)
        for cell in nb["cells"]:
            group = notebooks.cell_exercises(cell)
            if group and (path.name[:2], key_of(group)) in sources:
                cell["source"] = sources[(path.name[:2], key_of(group))]
        (folder / path.name).write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
