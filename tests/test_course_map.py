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


def course_imports(path: Path, package: Path) -> set[str]:
    """The course_lib modules a module imports, at its top or inside a function."""
    here = path.relative_to(package.parent).with_suffix("").parts
    if here[-1] == "__init__":
        here = here[:-1] + ("",)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = here[:len(here) - node.level]
            module = base + tuple(node.module.split(".")) if node.module else base
            found |= {".".join(module + (a.name,)) for a in node.names}     # a module or a name in one
    return found


def import_circles(package: Path) -> list[list[str]]:
    """Every import circle among the package's modules (an imported name resolved to the
    longest existing module: ``from .check import ch06`` is ``course_lib.check.ch06``,
    ``from .layers import KVCache`` is ``course_lib.layers``)."""
    modules = {".".join(p.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__"): p
               for p in package.rglob("*.py")}

    def module_of(name):
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name
    graph = {m: {module_of(n) for n in course_imports(p, package)} - {m, ""}
             for m, p in modules.items()}
    circles = []
    for start in sorted(graph):
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph[node]):
                if nxt == start and min(path) == start:
                    circles.append(path)
                elif nxt not in path and nxt > start:
                    stack.append((nxt, path + [nxt]))
    return circles


def test_the_package_has_no_import_circle(tmp_path):
    """One direction between any two course modules (a late import counts too): the reader
    of a module never has to know which of two importers runs first. The search finds a
    circle when there is one (a planted two-module package)."""
    package = Path(course_lib.__file__).parent
    assert import_circles(package) == []
    planted = tmp_path / "pkg"
    (planted / "sub").mkdir(parents=True)
    (planted / "__init__.py").write_text("")
    (planted / "a.py").write_text("from .sub import b\n")
    (planted / "sub" / "__init__.py").write_text("")
    (planted / "sub" / "b.py").write_text("def f():\n    from ..a import g\n")
    (planted / "c.py").write_text("from . import a\n")
    assert import_circles(planted) == [["pkg.a", "pkg.sub.b"]]


def test_chapter_00_map_lists_exactly_the_notebooks_in_order():
    """Chapter 00's course map (a markdown table) names every notebook of the folder, in order."""
    nb = json.loads((NOTEBOOKS / "00_setup_and_tour.ipynb").read_text(encoding="utf-8"))
    text = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    listed = re.findall(r"`(\d\d_\w+\.ipynb)`", text)
    assert listed == sorted(p.name for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
