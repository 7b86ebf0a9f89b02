"""Copies of the course's notebooks with a learner's right answer after every exercise cell.

    python tools/learner_notebooks.py OUT_DIR        (``make test`` runs them under nbval)

Every course notebook is copied to OUT_DIR unchanged, except that after each exercise cell
(found by its ``course.exercise`` mark) comes one more code cell: the RIGHT answer of
tests/learners/chNN.py for that cell, tagged ``nbval-check-output``, whose stored output is
what a passing answer prints: one "✅ 正确！" line per checker call, in order. Run under
nbval, the copy proves both halves of a learner's path in the notebook itself: the untouched
scaffold prints "not attempted" (the course's own stored output), and the answer written as
the page invites, run after everything the notebook ran before it, passes.
"""
import ast
import contextlib
import importlib
import io
import json
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from course_lib.grade.notebooks import cell_exercises  # noqa: E402
import learners  # noqa: E402

PASSED = "✅ 正确！"


def checker_calls(source: str, exercises) -> list[str]:
    """The exercises whose checker a top-level statement of ``source`` calls, in order."""
    calls = []
    for stmt in ast.parse(source).body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    isinstance(node.func.value, ast.Name):
                name = f"{node.func.value.id}.{node.func.attr}"
                if name in exercises:
                    calls.append(name)
    return calls


def chapter_print(stmt) -> str | None:
    """What a top-level ``print(...)`` of the chapter's own data prints (the scaffolds of number
    cells print e.g. ``ch04.SCORES``), or None if ``stmt`` is not one: it may use no other name."""
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Name) and stmt.value.func.id == "print"):
        return None
    names = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)} - {"print"}
    if not all(re.fullmatch(r"ch\d\d", n) for n in names):
        return None
    out = io.StringIO()
    scope = {n: importlib.import_module(f"course_lib.check.{n}") for n in names}
    with contextlib.redirect_stdout(out):
        exec(compile(ast.Module([stmt], []), "<answer>", "exec"), scope)
    return out.getvalue()


def expected_output(source: str, exercises) -> str:
    """What the RIGHT answer prints when it passes, statement by statement: the chapter's data
    it prints, then one "✅ 正确！" line per checker call."""
    text = ""
    for stmt in ast.parse(source).body:
        printed = chapter_print(stmt)
        if printed is not None:
            text += printed
        else:
            text += "".join(f"[{name}] {PASSED}\n" for name in checker_calls(ast.unparse(stmt), exercises))
    return text


def answer_cell(source: str, key) -> dict:
    exercises = (key,) if isinstance(key, str) else tuple(key)
    text = expected_output(source, exercises)
    # nbval compares only cells that carry an execution count (an unrun cell with outputs fails).
    ident = "learner-" + "-".join(e.replace(".", "-") for e in exercises)[:48]   # nbformat 4.5 cell id
    return {"cell_type": "code", "id": ident, "execution_count": 1, "source": source.strip("\n"),
            "metadata": {"tags": ["nbval-check-output"], "course": {"learner_answer": list(exercises)}},
            "outputs": [{"name": "stdout", "output_type": "stream", "text": text}] if text else []}


def learner_copy(path: Path) -> dict:
    nb = json.loads(path.read_text(encoding="utf-8"))
    answers = learners.chapter(path.name[:2])
    if answers is None:
        return nb
    cells = []
    for cell in nb["cells"]:
        cells.append(cell)
        group = cell_exercises(cell)
        if group:
            key = learners.key_of(group)
            if key not in answers.RIGHT:
                raise KeyError(f"tests/learners/ch{path.name[:2]}.py has no RIGHT answer for {key}")
            cells.append(answer_cell(answers.RIGHT[key], key))
    nb["cells"] = cells
    return nb


def main(out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        (out / path.name).write_text(json.dumps(learner_copy(path), ensure_ascii=False, indent=1),
                                     encoding="utf-8")
    print(f"learner notebooks: {out}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
