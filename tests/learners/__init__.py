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

tests/test_learner_path.py grades them (and the untouched scaffolds) through the gradebook;
tools/learner_notebooks.py puts each RIGHT answer after its exercise cell in copies of the
notebooks that ``make test`` runs under nbval.
"""
from __future__ import annotations

import importlib
from pathlib import Path

HERE = Path(__file__).resolve().parent


def key_of(group) -> str | tuple:
    """The key of an exercise group in RIGHT / WRONG: the id of a one-exercise cell, else the tuple."""
    group = tuple(group)
    return group[0] if len(group) == 1 else group


def chapter(nn: str):
    """The answers module of notebook ``nn`` ("03"), or None if there is none yet."""
    if not (HERE / f"ch{nn}.py").exists():
        return None
    return importlib.import_module(f"{__name__}.ch{nn}")
