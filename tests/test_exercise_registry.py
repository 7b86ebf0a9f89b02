"""Each exercise is declared once: the ``@exercise`` registry (``course_lib/check``) holds its
id, chapter, kind, question and notebook cell. From it derive the chapter's 练习 list
(``tools/exercise_lists.py`` writes it between two marker lines; ``--check`` runs here), the
grader's cell table (``course_lib.grade.notebooks.EXERCISE_CELLS``) and the counts in tests.

(a) every ``chNN.name`` a notebook mentions (a call in a code cell, a name in the prose) is a
registered exercise, or one of the few data/helper attributes listed below; (b) every
registered exercise is asked in its chapter: its item is in the notebook's generated list and
its cell is marked; (c) ``tools/exercise_lists.py --check`` passes; (d) each of these fails on
a planted defect (on copies of the notebooks in a temporary folder).
"""
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COURSE = ROOT / "notebooks"
sys.path.insert(0, str(ROOT / "tools"))
import exercise_lists  # noqa: E402

from course_lib.check import all_exercises  # noqa: E402
from course_lib.check import common  # noqa: E402
from course_lib.grade import notebooks  # noqa: E402

REFERENCE = re.compile(r"(?<![\w.])(ch\d\d)\.([A-Za-z_]\w*)")
# chNN.<name> in a notebook that is not an exercise, and why it is there
NOT_EXERCISES = {
    "ch04.SCORES": "data of ch04.ex4: the validation F1 after each epoch",
    "ch07.PROBS": "data of ch07.ex2: the sorted next-token probabilities to filter",
    "ch13.torch_block": "the PyTorch module ch13.translate_block asks to translate (its source is printed)",
}


def _books(folder: Path) -> dict[str, Path]:
    return {p.name[:2]: p for p in sorted(Path(folder).glob("[0-9][0-9]_*.ipynb"))}


def _read(path: Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def unresolved(folder: Path) -> list[str]:
    """Every ``chNN.name`` in a cell of a notebook in ``folder`` that is neither a registered
    exercise nor listed in NOT_EXERCISES."""
    registry, found = all_exercises(), []
    for path in _books(folder).values():
        for i, cell in enumerate(_read(path)["cells"]):
            for m in REFERENCE.finditer(notebooks.cell_source(cell)):
                name = m.group(0)
                if name not in registry and name not in NOT_EXERCISES:
                    found.append(f"{path.name} cell {i} ({cell.get('cell_type')}): {name}")
    return found


def unasked(folder: Path) -> list[str]:
    """Every registered exercise whose item is not in its notebook's generated list, or whose
    cell is not marked."""
    books, problems = _books(folder), []
    groups = {ex: g for gs in notebooks.registry_groups().values() for g in gs for ex in g}
    for name, ex in all_exercises().items():
        path = books.get(ex.chapter)
        if path is None:
            problems.append(f"{name}: no notebook {ex.chapter}_*.ipynb")
            continue
        nb = _read(path)
        cell = exercise_lists.list_cell(nb)
        block = exercise_lists.current_block(notebooks.cell_source(cell)) if cell else None
        call = (exercise_lists.CODE_CALL if ex.kind == "code" else exercise_lists.NUMBER_CALL)
        if block is None or _normal(ex.question + call.format(name=name)) not in _normal(block):
            problems.append(f"{name}: not asked in the 练习 list of {path.name}")
        found = notebooks.find_cell(nb, groups[name])
        if found is None or notebooks.cell_exercises(found) != groups[name]:
            problems.append(f"{name}: no cell of {path.name} is marked {list(groups[name])}")
    return problems


# --------------------------------------------------------------------------- the course
def test_every_reference_in_a_notebook_is_a_registered_exercise():
    assert not unresolved(COURSE), "not registered exercises:\n" + "\n".join(unresolved(COURSE))
    import importlib
    for name in NOT_EXERCISES:                             # the exceptions exist
        module, attr = name.split(".")
        assert hasattr(importlib.import_module(f"course_lib.check.{module}"), attr), name


def test_every_registered_exercise_is_asked_in_its_chapter():
    problems = unasked(COURSE)
    assert not problems, ("\n".join(problems) + "\nrun: python tools/exercise_lists.py && "
                          "python tools/mark_exercises.py")


def test_the_exercise_lists_are_generated_from_the_registry():
    """What CI runs: ``python tools/exercise_lists.py --check``."""
    env = dict(os.environ, GLOG_v="3", COURSE_SCALE="ci", COURSE_HEADLESS="1", PYTHONHASHSEED="0")
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "exercise_lists.py"), "--check"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def test_every_exercise_declares_its_question_once():
    """A question is there, without its own checker call (the tool appends that)."""
    for name, ex in all_exercises().items():
        assert ex.question.strip() and ex.chapter == name[2:4], name
        assert not re.search(rf"`{re.escape(name)}\(", ex.question), f"{name}: its call is appended"
    with pytest.raises(TypeError, match="question"):
        common.exercise("number", "no question")                 # noqa - it is required
    with pytest.raises(ValueError, match="question"):
        common.exercise("number", "an empty question", question=" ")


def test_the_graders_cell_table_derives_from_the_registry():
    registry, table = all_exercises(), dict(notebooks.EXERCISE_CELLS)
    listed = [ex for groups in table.values() for g in groups for ex in g]
    assert sorted(listed) == sorted(registry) and len(listed) == len(set(listed))
    for chapter, groups in table.items():
        assert {registry[ex].chapter for g in groups for ex in g} == {chapter}
        for group in groups:
            assert len({registry[ex].cell for ex in group}) == 1, group
        keys = [registry[g[0]].cell for g in groups]
        assert len(keys) == len(set(keys)), f"{chapter}: one cell key, two cells"
    assert table == notebooks.exercise_cells()


# --------------------------------------------------------------------------- planted defects
@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    """Copies of the course's notebooks with the lists written by the tool."""
    folder = tmp_path_factory.mktemp("generated")
    for path in _books(COURSE).values():
        shutil.copy(path, folder)
    assert exercise_lists.main([str(p) for p in _books(folder).values()]) == 0
    return folder


@pytest.fixture
def copies(generated, tmp_path) -> Path:
    folder = tmp_path / "notebooks"
    shutil.copytree(generated, folder)
    return folder


def _check(folder: Path) -> int:
    return exercise_lists.main(["--check", *map(str, _books(folder).values())])


def test_the_tool_is_idempotent_and_changes_markdown_cells_only(copies):
    assert _check(copies) == 0 and not unasked(copies) and not unresolved(copies)
    before = {p: p.read_bytes() for p in _books(copies).values()}
    assert exercise_lists.main([str(p) for p in before]) == 0
    assert {p: p.read_bytes() for p in before} == before              # a second run: no change
    for chapter, path in _books(copies).items():
        old, new = _read(_books(COURSE)[chapter]), _read(path)
        assert len(old["cells"]) == len(new["cells"]) and old["metadata"] == new["metadata"]
        for a, b in zip(old["cells"], new["cells"]):
            assert a == b or (a["cell_type"] == b["cell_type"] == "markdown" and
                              {k: v for k, v in a.items() if k != "source"} ==
                              {k: v for k, v in b.items() if k != "source"}), path.name


def test_a_changed_question_fails_the_check(copies, monkeypatch):
    ex = all_exercises()["ch03.ex2"]
    monkeypatch.setitem(common.EXERCISES, ex.name,
                        dataclasses.replace(ex, question=ex.question + "（改过）"))
    assert _check(copies) == 1
    stale = {ch for ch, path in _books(copies).items() if exercise_lists.problem(path)}
    assert stale == {"03"} and [p for p in unasked(copies) if "ch03.ex2" in p]
    assert exercise_lists.main([str(_books(copies)["03"])]) == 0 and _check(copies) == 0


def test_an_unregistered_call_fails(copies):
    path = _books(copies)["09"]
    nb = _read(path)
    nb["cells"].append({"cell_type": "code", "execution_count": None, "metadata": {},
                        "outputs": [], "source": ["ch09.ex9(3)\n"]})
    nb["cells"][0]["source"].append("\n见 `ch09.ex9(你的答案)`。")
    path.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    found = unresolved(copies)
    assert len(found) == 2 and all("ch09.ex9" in f for f in found), found


def test_an_exercise_missing_from_the_list_or_unmarked_fails(copies):
    path = _books(copies)["05"]
    nb = _read(path)
    cell = exercise_lists.list_cell(nb)
    cell["source"] = [line for line in cell["source"] if "`ch05.ex3(" not in line]
    code = notebooks.find_cell(nb, ("ch05.warmup_cosine",))
    del code["metadata"]["course"]["exercise"]
    path.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    problems = unasked(copies)
    assert any(p.startswith("ch05.ex3: not asked") for p in problems), problems
    assert any(p.startswith("ch05.warmup_cosine: no cell") for p in problems), problems
    assert _check(copies) == 1


def test_a_missing_or_broken_block_fails_the_check(copies):
    path = _books(copies)["12"]
    nb = _read(path)
    cell = exercise_lists.list_cell(nb)
    cell["source"] = [line for line in cell["source"] if exercise_lists.END not in line]
    path.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    assert "broken" in exercise_lists.problem(path) and _check(copies) == 1
    cell["source"] = [line for line in cell["source"] if exercise_lists.BEGIN not in line]
    path.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    assert "no generated" in exercise_lists.problem(path)


def test_migration_replaces_the_hand_typed_list_and_keeps_the_rest():
    """A cell without the markers: intro and closing text stay, the list becomes the block,
    an item without a checker moves after it (renumbered)."""
    ex = all_exercises()
    peak, prompt = ex["ch15.peak_gib"], ex["ch15.internlm_prompt"]
    text = ("## 小结\n\n- 总结\n\n## 练习\n\n先读这一段。\n\n"
            f"1. {peak.question}用 `ch15.peak_gib(答案)` 检查。\n"
            "2. 在下面写 `ch15.internlm_prompt(internlm_prompt)`。\n"
            "3. 思考题，\n   没有检查函数。\n\n收尾的一段。")
    out = exercise_lists.migrate(text, [prompt, peak])
    block = exercise_lists.render_block([prompt, peak])
    assert out == ("## 小结\n\n- 总结\n\n## 练习\n\n先读这一段。\n\n" + block +
                   "\n\n2. 思考题，\n   没有检查函数。\n\n收尾的一段。")
    assert exercise_lists.current_block(out) == block
    assert block.index("写代码：" + prompt.question) < block.index("1. " + peak.question)
