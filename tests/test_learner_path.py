"""A learner's path through every chapter, through the gradebook.

Four learners hand in the whole course (tests/learners/chNN.py holds their answers):

* ``untouched``: the course's notebooks as shipped: every exercise "not attempted";
* ``tried``: the same, but each exercise cell run as it is (a comment added, so the grader
  runs it): every exercise "not attempted" again, never "error" -- a scaffold that needs a
  name its cell does not define fails here;
* ``right``: each exercise cell holds the RIGHT answer, written the way the page invites
  (names from earlier cells): every exercise "pass";
* ``wrong``: each cell holds the WRONG answer: the exercises it names "fail" with a hint
  containing the expected text, the cell's other answers "pass".

The grader draws new hidden inputs for each grading session (a random ``COURSE_CHECK_SALT``);
here the salt is fixed, so that a run repeats. That every declared wrong answer fails with its
hint under other salts too is tested in-process (tests/test_check_salts.py).

The RIGHT answers also pass in the notebooks themselves: ``make test`` runs copies of the
notebooks with each answer after its exercise cell under nbval (tools/learner_notebooks.py).
"""
import ast
import sys
from pathlib import Path

import pytest

from course_lib import grade as grading
from course_lib.check import all_exercises
from course_lib.grade import notebooks

ROOT = Path(__file__).resolve().parents[1]
COURSE = ROOT / "notebooks"
sys.path.insert(0, str(ROOT / "tests"))
import learners  # noqa: E402

CHAPTERS = sorted(notebooks.EXERCISE_CELLS)
LEARNER_SALT = 20261207


def _answers(nn: str):
    module = learners.chapter(nn)
    assert module is not None, f"tests/learners/ch{nn}.py is missing"
    return module


def _cells():
    for nn in CHAPTERS:
        for group in notebooks.EXERCISE_CELLS[nn]:
            yield nn, learners.key_of(group), tuple(group)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("learners")
    course = notebooks.course_cells()
    scaffolds = {(nn, learners.key_of(c.exercises)): c.scaffold for nn in course for c in course[nn]}
    learners.learner_folder(root / "untouched", {})
    learners.learner_folder(root / "tried", {k: s + "\n# 运行过一次\n" for k, s in scaffolds.items()})
    learners.learner_folder(root / "right", {(nn, k): _answers(nn).RIGHT[k] for nn, k, _ in _cells()})
    learners.learner_folder(root / "wrong", {(nn, k): _answers(nn).WRONG[k][0] for nn, k, _ in _cells()})
    return grading.grade(root, out_csv=root / "gradebook.csv", salt=LEARNER_SALT)


def test_every_exercise_has_a_right_and_a_wrong_answer():
    for nn, key, group in _cells():
        module = _answers(nn)
        assert key in module.RIGHT, f"ch{nn}: no RIGHT answer for {key}"
        source, expected = module.WRONG.get(key, (None, None))
        assert source, f"ch{nn}: no WRONG answer for {key}"
        assert expected and set(expected) <= set(group), (key, expected)
        assert set(module.RIGHT) == set(module.WRONG), f"ch{nn}: RIGHT and WRONG name other cells"


def _imported(node) -> set[tuple[str, str]]:
    """(name bound, what it is bound to) for one import statement."""
    if isinstance(node, ast.Import):
        return {(a.asname or a.name.split(".")[0], a.name if a.asname else a.name.split(".")[0])
                for a in node.names}
    return {(a.asname or a.name, f"{node.module}.{a.name}") for a in node.names}


def _notebook_imports(nn: str, group) -> set[tuple[str, str]]:
    """What the course notebook's imports before the group's cell bound, and the scaffold's
    own (``from course_lib.check import ch00`` sits in a chapter's first exercise cell)."""
    nb = notebooks.read_notebook(next(COURSE.glob(f"{nn}_*.ipynb")))
    cell = notebooks.find_cell(nb, group)
    found = set()
    for source in (*notebooks.earlier_code(nb, cell), notebooks.cell_source(cell)):
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found |= _imported(node)
    return found


def test_right_answers_use_what_the_notebook_defined():
    """No import the notebook did not make before the cell: the learner writes with what the
    page has defined (importing again a name the notebook imported is allowed)."""
    for nn, key, group in _cells():
        made = _notebook_imports(nn, group)
        for node in ast.walk(ast.parse(_answers(nn).RIGHT[key])):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                assert _imported(node) <= made, f"ch{nn} {key}: imports {ast.unparse(node)!r}"


def test_untouched_and_tried_scaffolds_are_not_attempted(graded):
    for who in ("untouched", "tried"):
        got = {ex: (r.verdict, r.hint) for ex, r in graded.results[who].items()
               if r.verdict != "not attempted"}
        assert not got, f"{who}: {got}"


def test_right_answers_pass(graded):
    got = {ex: (r.verdict, r.hint) for ex, r in graded.results["right"].items() if r.verdict != "pass"}
    assert not got, got
    assert sorted(graded.results["right"]) == sorted(all_exercises())


def test_wrong_answers_fail_with_their_hint_and_the_others_pass(graded):
    problems = []
    for nn, key, group in _cells():
        _, expected = _answers(nn).WRONG[key]
        for name in group:
            r = graded.results["wrong"][name]
            if name in expected and (r.verdict != "fail" or expected[name] not in r.hint):
                problems.append((name, "want fail with " + repr(expected[name]), r.verdict, r.hint))
            elif name not in expected and r.verdict != "pass":
                problems.append((name, "want pass", r.verdict, r.hint))
    assert not problems, "\n".join(map(str, problems))
