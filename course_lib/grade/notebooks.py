"""Learners' notebooks: who handed in what, and the exercise cells in them.

The exercise cells of the course are :data:`EXERCISE_CELLS`, derived from the exercise
registry (``course_lib.check``: each exercise's ``cell`` key groups the exercises answered in
one cell), in the order of those cells in the course's notebooks. In the course's
notebooks each such cell carries ``cell.metadata["course"]["exercise"]`` — the exercise id
(``"ch06.rms_norm"``), or a list of ids for a cell that holds several (the cell of number
exercises at the end of a chapter) — written by ``tools/mark_exercises.py``. Learners' copies
keep that metadata, so a cell is found by it wherever the learner moved it; never by position.
A copy made before the metadata existed falls back to the cell that calls every checker of
the group (``chNN.name(`` in its source).

Before a learner's cell the grader runs :data:`COMMON_SETUP` (the first cell of every
chapter: device, seeds, the checker module), then the *context* of the cell in the learner's
own notebook: what the earlier cells defined that the cell uses (``grade.context``).
"""
from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

COURSE_NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOK_NAME = re.compile(r"^(\d\d)_.*\.ipynb$")
META_KEY = "course"                    # the same key tools/nbexec.py stamps source_sha1 under

COMMON_SETUP = """\
import os
import numpy as np
import mindspore as ms
from mindspore import nn, ops, Tensor, Parameter
import course_lib as cl
cl.setup(quiet=True)
"""


class NotebookError(ValueError):
    """A file that is not a readable notebook (invalid JSON, no cell list)."""


@dataclass(frozen=True)
class ExerciseCell:
    """One exercise cell of the course: where it is and what its untouched scaffold says."""
    chapter: str                       # "03"
    exercises: tuple[str, ...]         # ("ch03.shift_for_lm",)
    scaffold: str                      # the course notebook's source of this cell
    calls: dict = field(default_factory=dict)  # code exercise -> the course's checker call
    examples: tuple[str, ...] = ()     # the course's example calls of number exercises
    earlier: tuple[str, ...] = ()      # the course notebook's code cells before this one

    @property
    def setup(self) -> str:
        return setup_for(self.chapter)


def setup_for(chapter: str) -> str:
    """What the grader runs before a cell of ``chapter`` (and before its reference run),
    ahead of the cell's context: the course's first cell, and the chapter's checkers."""
    return COMMON_SETUP + f"from course_lib.check import ch{chapter}, show_solution\n"


def earlier_code(nb: dict, cell: dict) -> tuple[str, ...]:
    """The sources of the code cells of ``nb`` before ``cell``, in order."""
    code = [c for c in nb["cells"] if isinstance(c, dict) and c.get("cell_type") == "code"]
    where = next(i for i, c in enumerate(code) if c is cell)
    return tuple(cell_source(c) for c in code[:where])


def chapter_of(path: Path) -> str | None:
    match = NOTEBOOK_NAME.match(Path(path).name)
    return match.group(1) if match else None


def read_notebook(path: Path) -> dict:
    """The notebook as a dict; :class:`NotebookError` for anything that is not one."""
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise NotebookError(f"{Path(path).name} 不是有效的笔记本（无法读取或不是 JSON：{err}）") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise NotebookError(f"{Path(path).name} 不是有效的笔记本（没有 cells 列表）")
    return nb


def cell_source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(map(str, src)) if isinstance(src, list) else str(src)


def cell_exercises(cell: dict) -> tuple[str, ...]:
    """The exercise ids in a cell's metadata (a string or a list), () if none."""
    meta = cell.get("metadata")
    value = meta.get(META_KEY, {}).get("exercise") if isinstance(meta, dict) and \
        isinstance(meta.get(META_KEY), dict) else None
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return ()


def metadata_value(group: tuple[str, ...]):
    return group[0] if len(group) == 1 else list(group)


def _calls_all(source: str, group: tuple[str, ...]) -> bool:
    return all(re.search(rf"(?<![\w.]){re.escape(ex)}\(", source) for ex in group)


def find_cell(nb: dict, group: tuple[str, ...], trust_marks: bool = True) -> dict | None:
    """The code cell of exercise group ``group``: by metadata, else by the checker calls.
    In a marked notebook the metadata is the truth, unless ``trust_marks=False`` (how
    tools/mark_exercises.py finds a cell whose mark is still missing)."""
    code = [c for c in nb["cells"] if isinstance(c, dict) and c.get("cell_type") == "code"]
    marked = next((c for c in code if cell_exercises(c) == tuple(group)), None)
    if marked is not None or (trust_marks and any(cell_exercises(c) for c in code)):
        return marked
    return next((c for c in code if _calls_all(cell_source(c), group)), None)


def registry_groups() -> dict[str, list[tuple[str, ...]]]:
    """{chapter: the registry's exercise groups} — the exercises sharing a ``cell`` key, in
    registration order (no notebook read)."""
    from ..check import EXERCISES, all_exercises
    all_exercises()                                    # import every chapter's checkers
    keys: dict[str, dict[str, list[str]]] = {}
    for name, ex in EXERCISES.items():                 # in registration order
        keys.setdefault(ex.chapter, {}).setdefault(ex.cell, []).append(name)
    return {ch: [tuple(g) for g in keys[ch].values()] for ch in sorted(keys)}


def order_groups(groups, nb: dict) -> tuple[tuple[str, ...], ...]:
    """``groups`` in the order of their cells in notebook ``nb`` (the marked cell, else the
    cell calling every checker of the group); a group with no cell goes last."""
    cells = nb["cells"]
    where = {id(c): i for i, c in enumerate(cells)}

    def position(group):
        cell = find_cell(nb, group, trust_marks=False)
        return where[id(cell)] if cell is not None else len(cells)
    return tuple(sorted(groups, key=position))     # stable: unfound groups keep registry order


def _notebook_order(chapter: str, groups: list, course_dir: Path) -> tuple[tuple[str, ...], ...]:
    path = next(Path(course_dir).glob(f"{chapter}_*.ipynb"), None)
    return tuple(groups) if path is None else order_groups(groups, read_notebook(path))


def exercise_cells(course_dir: Path = COURSE_NOTEBOOKS) -> dict[str, tuple[tuple[str, ...], ...]]:
    """{chapter: the exercise cells of its notebook, each a tuple of the exercise ids it
    checks}, from the registry, the cells in notebook order."""
    return {ch: _notebook_order(ch, groups, course_dir) for ch, groups in registry_groups().items()}


class _ExerciseCells(Mapping):
    """:func:`exercise_cells` of the course, computed on first use (importing this module
    imports no checker and reads no notebook)."""

    def __init__(self):
        self._table: dict | None = None

    def _get(self) -> dict:
        if self._table is None:
            self._table = exercise_cells()
        return self._table

    def __getitem__(self, chapter):
        return self._get()[chapter]

    def __iter__(self):
        return iter(self._get())

    def __len__(self):
        return len(self._get())

    def __repr__(self):
        return repr(self._get())


# chapter -> the exercise cells of its notebook, each a tuple of the exercise ids it checks
EXERCISE_CELLS: Mapping[str, tuple[tuple[str, ...], ...]] = _ExerciseCells()


def checker_statements(source: str, exercises) -> dict[str, str]:
    """{exercise: source of the top-level statement ``chNN.name(...)``} found in ``source``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    found = {}
    for node in tree.body:
        call = node.value if isinstance(node, ast.Expr) else None
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and \
                isinstance(call.func.value, ast.Name):
            name = f"{call.func.value.id}.{call.func.attr}"
            if name in exercises:
                found.setdefault(name, ast.get_source_segment(source, node))
    return found


def _kinds() -> dict[str, str]:
    from ..check import all_exercises
    return {name: ex.kind for name, ex in all_exercises().items()}


def course_cells(course_dir: Path = COURSE_NOTEBOOKS) -> dict[str, list[ExerciseCell]]:
    """Every exercise cell of the course's own notebooks, by chapter."""
    books = {chapter_of(p): p for p in Path(course_dir).glob("[0-9][0-9]_*.ipynb")}
    kinds, cells = _kinds(), {}
    for chapter, groups in EXERCISE_CELLS.items():
        if chapter not in books:
            raise FileNotFoundError(f"The course has no notebook {chapter}_*.ipynb in {course_dir}")
        nb = read_notebook(books[chapter])
        cells[chapter] = []
        for group in groups:
            cell = find_cell(nb, group)
            if cell is None:
                raise LookupError(f"{books[chapter].name}: no exercise cell for {group}")
            source = cell_source(cell)
            stmts = checker_statements(source, group)
            cells[chapter].append(ExerciseCell(
                chapter, tuple(group), source,
                calls={ex: s for ex, s in stmts.items() if kinds.get(ex) == "code"},
                examples=tuple(s for ex, s in stmts.items() if kinds.get(ex) == "number"),
                earlier=earlier_code(nb, cell)))
    return cells


def untouched(source: str, scaffold: str) -> bool:
    """The learner's cell is the course's scaffold (trailing whitespace aside)."""
    def norm(text):
        return "\n".join(line.rstrip() for line in text.strip().splitlines())
    return norm(source) == norm(scaffold)


def without_examples(source: str, examples) -> str:
    """``source`` without the top-level statements that are the course's own example calls
    (``ch01.ex1(0)``: what a wrong answer looks like), left in place by a learner. They
    become blank lines, so line numbers in error messages stay the learner's."""
    if not examples:
        return source
    try:
        tree = ast.parse(source)       # parsed here, never run here
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return source                  # the sandbox reports what is wrong with it
    wanted = {ast.unparse(ast.parse(e)) for e in examples}
    lines = source.splitlines(keepends=True)
    body = tree.body
    for i in reversed(range(len(body))):
        node, after = body[i], body[i + 1] if i + 1 < len(body) else None
        alone = node.col_offset == 0 and (after is None or after.lineno > node.end_lineno) \
            and (i == 0 or body[i - 1].end_lineno < node.lineno)
        if alone and isinstance(node, ast.Expr) and ast.unparse(node) in wanted:
            lines[node.lineno - 1:node.end_lineno] = ["\n"] * (node.end_lineno - node.lineno + 1)
    return "".join(lines)


# --------------------------------------------------------------------------- learners
def _notebooks_in(folder: Path) -> list[Path]:
    """``NN_*.ipynb`` files under ``folder`` (any depth), not in hidden folders such as
    ``.ipynb_checkpoints``."""
    return sorted(p for p in folder.rglob("[0-9][0-9]_*.ipynb") if p.is_file() and
                  chapter_of(p) and not any(part.startswith(".") for part in
                                            p.relative_to(folder).parts[:-1]))


def _by_chapter(paths: list[Path], course_names: dict[str, str]) -> dict[str, Path]:
    """One notebook per chapter: the one named like the course's, else the first by name."""
    chosen: dict[str, Path] = {}
    for p in paths:
        chapter = chapter_of(p)
        if chapter not in chosen or p.name == course_names.get(chapter):
            chosen[chapter] = p
    return dict(sorted(chosen.items()))


def find_learners(submissions: Path, course_dir: Path = COURSE_NOTEBOOKS
                  ) -> dict[str, dict[str, Path]]:
    """{learner: {chapter: notebook}}. ``submissions`` is either one learner's folder (it
    holds ``NN_*.ipynb`` itself; the learner is named after the folder) or a folder with one
    sub-folder per learner."""
    root = Path(submissions)
    if not root.exists():
        raise FileNotFoundError(f"Submissions folder {str(root)!r} does not exist.")
    if not root.is_dir():
        raise NotADirectoryError(f"{str(root)!r} is a file: give the folder that holds the "
                                 "notebooks (or one sub-folder per learner).")
    names = {chapter_of(p): p.name for p in Path(course_dir).glob("[0-9][0-9]_*.ipynb")}
    own = [p for p in root.iterdir() if p.is_file() and chapter_of(p)]
    if own:
        return {root.resolve().name: _by_chapter(sorted(own), names)}
    learners = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        found = _notebooks_in(folder)
        if found:
            learners[folder.name] = _by_chapter(found, names)
    if not learners:
        raise ValueError(f"No notebooks found in {str(root)!r}: expected files named NN_*.ipynb "
                         "(e.g. 03_dataset.ipynb) there, or one folder per learner holding them.")
    return learners
