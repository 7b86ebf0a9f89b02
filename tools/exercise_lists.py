"""Write each notebook's 练习 list from the exercise registry (``course_lib/check``).

    python tools/exercise_lists.py                    every notebook in notebooks/
    python tools/exercise_lists.py notebooks/07_*.ipynb
    python tools/exercise_lists.py --check            exit 1 listing the notebooks whose list
                                                      differs from the registry (or is missing)

The list lives in the notebook's final markdown cell (the one with "## 练习"), between the lines
:data:`BEGIN` and :data:`END`: code exercises first ("写代码：<question>用 `chNN.name(...)` 检查。",
in the order of their cells), then the number exercises, numbered, each with its question and
the call ``chNN.exK(你的答案)``. The questions are edited in the ``@exercise(question=...)`` of
the checkers, never here. The rest of the cell is left as it is.

A cell without the markers is migrated once: the hand-typed list under "## 练习" (numbered
items, "**代码 N：…**" paragraphs, a "**计算题**" line, and a paragraph just before them whose
text the registry's questions now carry) becomes the block; a numbered item that asks no
registered exercise (a question without a checker) is kept, renumbered, after the block.

Idempotent; changes markdown cells only, and writes a notebook only when its list changes, in
the JSON layout nbformat writes (as tools/mark_exercises.py does).
"""
import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
from course_lib.grade.notebooks import (cell_source, chapter_of, order_groups,  # noqa: E402
                                        registry_groups)
from mark_exercises import dumps  # noqa: E402

BEGIN = "<!-- exercises -->"      # the block is generated: edit the questions in course_lib/check
END = "<!-- /exercises -->"
HEADING = re.compile(r"^##\s*练习\s*$")
ITEM = re.compile(r"^(\d+)\.\s")
GRADING = ("**怎样评分：** 检查器判定每个练习：{kinds}。成绩册（`python -m course_lib.grade`）在你自己的笔记本里评分："
           "先运行前面的单元里这个练习用到的导入和定义，再逐句运行练习单元，所以可以直接用本章前面定义的名字；"
           "一句答案出错不影响同一单元里的其他答案；没改过的{untouched}记为“未作答”。")
CODE_CALL = "用 `{name}(...)` 检查。"
NUMBER_CALL = "用 `{name}(你的答案)` 检查。"


class ListError(ValueError):
    """A notebook whose 练习 list cannot be placed (no "## 练习" cell, broken markers)."""


# --------------------------------------------------------------------------- the block
def chapter_exercises(chapter: str, nb: dict) -> list:
    """The registry's exercises of ``chapter``, in the order of their cells in ``nb``."""
    from course_lib.check import all_exercises
    registry = all_exercises()
    groups = registry_groups().get(chapter)
    if not groups:
        raise ListError(f"chapter {chapter} registers no exercise in course_lib/check")
    return [registry[name] for group in order_groups(groups, nb) for name in group]


def _item(marker: str, text: str) -> str:
    """A Markdown list item; continuation lines indented under the item's text."""
    pad = "\n" + " " * len(marker)
    return marker + pad.join(text.strip().splitlines())


def render_block(exercises) -> str:
    """The generated list, markers included."""
    code = [ex for ex in exercises if ex.kind == "code"]
    numbers = [ex for ex in exercises if ex.kind == "number"]
    kinds = (["代码题运行你的代码，在同样的输入上与参考实现比较"] if code else []) + \
        (["计算题按题目写明的精度比较"] if numbers else [])
    parts = [BEGIN, GRADING.format(kinds="，".join(kinds), untouched="脚手架" if code else "练习单元")]
    if code:
        parts.append("\n".join(_item("- ", "写代码：" + ex.question + CODE_CALL.format(name=ex.name))
                               for ex in code))
    if code and numbers:
        parts.append("**计算题**")
    if numbers:
        parts.append("\n".join(_item(f"{i}. ", ex.question + NUMBER_CALL.format(name=ex.name))
                               for i, ex in enumerate(numbers, 1)))
    parts.append(END)
    return "\n\n".join(parts)


# --------------------------------------------------------------------------- the cell
def list_cell(nb: dict) -> dict | None:
    """The cell holding the list: the markdown cell with the markers, else the final
    markdown cell if it has a "## 练习" heading."""
    markdown = [c for c in nb["cells"] if isinstance(c, dict) and c.get("cell_type") == "markdown"]
    marked = [c for c in markdown if BEGIN in cell_source(c)]
    if len(marked) > 1:
        raise ListError("the exercise markers appear in more than one cell")
    if marked:
        return marked[0]
    last = markdown[-1] if markdown else None
    if last is not None and any(HEADING.match(line) for line in cell_source(last).splitlines()):
        return last
    return None


def current_block(text: str) -> str | None:
    """The block between the markers (markers included), None when there is none."""
    begin, end = text.find(BEGIN), text.find(END)
    if begin < 0 and end < 0:
        return None
    if begin < 0 or end < begin or text.count(BEGIN) != 1 or text.count(END) != 1:
        raise ListError("the exercise markers are broken (one of them missing, doubled or reversed)")
    return text[begin:end + len(END)]


def _join(*chunks: str) -> str:
    """Text chunks separated by one blank line (empty chunks dropped)."""
    return "\n\n".join(c.strip("\n") for c in chunks if c.strip())


# --------------------------------------------------------------------------- migration
def _units(lines: list[str]) -> list[tuple[int, int, str]]:
    """(first line, end line, kind) of each paragraph or numbered item of ``lines``; kind is
    "item", "code" ("**代码 N：…**"), "calc" ("**计算题**") or "other"."""
    units, start = [], None
    for i, line in enumerate(lines + [""]):
        if start is not None and (not line.strip() or ITEM.match(line)):
            first = lines[start]
            kind = ("item" if ITEM.match(first) else "code" if first.startswith("**代码")
                    else "calc" if first.strip() == "**计算题**" else "other")
            units.append((start, i, kind))
            start = None
        if line.strip() and start is None:
            start = i
    return units


def _normal(text: str) -> str:
    return re.sub(r"[\s`*]", "", ITEM.sub("", text))


def _asks_registered(text: str, exercises) -> bool:
    """The hand-typed text asks one of ``exercises``: it names its checker, or it begins
    like the exercise's question (or the question begins like it)."""
    flat = _normal(text)
    for ex in exercises:
        question = _normal(ex.question)
        if re.search(rf"(?<![\w.]){re.escape(ex.name)}\b", text) or \
                flat[:12] in question or question[:12] in flat:
            return True
    return False


def _list_region(lines: list[str], exercises) -> tuple[int, int, list[tuple[int, int]]]:
    """(first, end) lines of the hand-typed list in ``lines`` (the text after "## 练习"), and
    the numbered items inside it that ask no registered exercise."""
    units = _units(lines)
    first = next((k for k, u in enumerate(units) if u[2] != "other"), None)
    if first is None:
        raise ListError('no hand-typed list under "## 练习" to replace')
    last = first
    while last + 1 < len(units) and units[last + 1][2] != "other":
        last += 1
    lead = _normal(_unit_text(lines, units[first - 1])) if first > 0 else ""
    if lead and any(lead in _normal(ex.question) for ex in exercises):
        first -= 1                                     # a lead-in the questions now carry
    kept = [(u[0], u[1]) for u in units[first:last + 1]
            if u[2] == "item" and not _asks_registered(_unit_text(lines, u), exercises)]
    return units[first][0], units[last][1], kept


def _unit_text(lines, unit) -> str:
    return "\n".join(lines[unit[0]:unit[1]])


def migrate(text: str, exercises) -> str:
    """The cell's text with its hand-typed list under "## 练习" replaced by the block."""
    lines = text.split("\n")
    head = next((i for i, line in enumerate(lines) if HEADING.match(line)), None)
    if head is None:
        raise ListError('the final markdown cell has no "## 练习" heading')
    body = lines[head + 1:]
    first, end, kept = _list_region(body, exercises)
    numbered = sum(ex.kind == "number" for ex in exercises)
    moved = []
    for k, (a, b) in enumerate(kept, numbered + 1):
        moved.append(ITEM.sub(f"{k}. ", body[a], count=1) + "".join("\n" + x for x in body[a + 1:b]))
    before = "\n".join(lines[:head + 1] + body[:first])
    after = "\n".join(body[end:])
    return _join(before, render_block(exercises), "\n".join(moved), after)


# --------------------------------------------------------------------------- notebooks
def updated(nb: dict, chapter: str) -> str | None:
    """The new source of the list cell (None: no cell to hold the list)."""
    cell = list_cell(nb)
    if cell is None:
        return None
    exercises = chapter_exercises(chapter, nb)
    text = cell_source(cell)
    block = current_block(text)
    if block is None:
        return migrate(text, exercises)
    return text.replace(block, render_block(exercises))


def problem(path: Path) -> str | None:
    """Why ``path``'s list is not the registry's (None: it is)."""
    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    try:
        cell = list_cell(nb)
        if cell is None or current_block(cell_source(cell)) is None:
            return "no generated 练习 list (run tools/exercise_lists.py)"
        if current_block(cell_source(cell)) != render_block(chapter_exercises(chapter_of(path), nb)):
            return "the 练习 list differs from the registry (run tools/exercise_lists.py)"
    except ListError as err:
        return str(err)
    return None


def write(path: Path) -> bool:
    """Write the registry's list into ``path``; True if the file changed."""
    before = Path(path).read_text(encoding="utf-8")
    nb = json.loads(before)
    source = updated(nb, chapter_of(path))
    if source is None:
        raise ListError(f'{Path(path).name}: no markdown cell with "## 练习" to hold the list')
    list_cell(nb)["source"] = source.splitlines(keepends=True)
    after = dumps(nb)
    if after != before:
        Path(path).write_text(after, encoding="utf-8")
    return after != before


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument("--check", action="store_true",
                    help="change nothing; exit 1 if a notebook's list differs from the registry")
    args = ap.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if not paths or any(chapter_of(p) is None for p in paths):
        print("give notebooks named NN_*.ipynb", file=sys.stderr)
        return 2
    stale = []
    for path in paths:
        try:
            found = problem(path) if args.check else ("written" if write(path) else None)
        except ListError as err:
            print(f"{path}: {err}", file=sys.stderr)
            return 2
        if args.check and found:
            stale.append(path)
        print(f"{path}: {found or 'up to date'}")
    if stale:
        print(f"{len(stale)} notebook(s) whose 练习 list is not the registry's: "
              "python tools/exercise_lists.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
