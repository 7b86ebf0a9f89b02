"""The chapter -> module table in course_lib's docstring is what the notebooks import."""
import ast
import importlib.util
import json
import re
from pathlib import Path

import course_lib

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
ROW = re.compile(r"^    (\d\d) .+? \.+ (.+)$")
MORE = re.compile(r"^ {20,}(\S.*)$")


def documented() -> dict[str, set[str]]:
    table, chapter = {}, None
    for line in course_lib.__doc__.splitlines():
        row, more = ROW.match(line), MORE.match(line)
        if row:
            chapter = row.group(1)
            table[chapter] = set()
            text = row.group(2)
        elif more and chapter is not None:
            text = more.group(1)
        else:
            chapter = None
            continue
        table[chapter] |= {m.strip() for m in text.split(",") if m.strip()}
    return table


def imported(path: Path) -> set[str]:
    """Top-level course_lib modules a notebook's code cells import (``check`` aside)."""
    mods = set()
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        lines = "".join(cell["source"]).splitlines()
        source = "\n".join("" if l.lstrip().startswith(("%", "!")) else l for l in lines)
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = ([f"course_lib.{a.name}" for a in node.names]
                         if node.module == "course_lib" else [node.module])
            else:
                continue
            for name in names:
                parts = name.split(".")
                if (parts[0] == "course_lib" and len(parts) > 1
                        and importlib.util.find_spec(f"course_lib.{parts[1]}")):
                    mods.add(parts[1])
    return mods - {"check"}


def test_table_lists_exactly_what_each_notebook_imports():
    table = documented()
    notebooks = {p.name[:2]: p for p in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))}
    assert sorted(table) == sorted(notebooks), "one row per notebook"
    for chapter, path in notebooks.items():
        got = imported(path)
        assert table[chapter] == got, (
            f"chapter {chapter}: the table in course_lib/__init__.py says {sorted(table[chapter])}, "
            f"{path.name} imports {sorted(got)}")


def test_every_listed_module_exists():
    for chapter, mods in documented().items():
        for mod in mods:
            assert importlib.util.find_spec(f"course_lib.{mod}"), (chapter, mod)


def test_the_parser_sees_continuation_lines():
    assert {"training", "tokenizer"} <= documented()["04"]
