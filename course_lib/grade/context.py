"""What a learner's notebook defined before an exercise cell, and what of it the cell needs.

A learner writes an exercise the way the page invites: with the imports, functions, classes
and small data that the notebook's earlier cells made (``blocks`` imported in chapter 01's
section 4, ``math`` in chapter 06's first cell, ``probe_lr`` in chapter 04). The grader
judges the cell in that context, without re-running the whole notebook (which would train
for minutes): before the exercise cell it runs the *context*, the top-level statements of
the earlier code cells that the cell depends on, found from the code:

* every import, and the course's configuration calls (``cl.setup(...)``, ``ms.set_context``,
  seeds, ``os.environ[...] = ...``), in notebook order: what they do to the process (mindnlp's
  patches in chapter 11) is part of the context;
* each statement that binds a name the cell uses but does not define itself (a ``def``, a
  ``class``, an assignment, a ``for`` or ``with`` target, ...), then, in turn, the statements
  that bind the names those statements use, back to the top of the notebook.

A statement that also appears (same syntax tree) among the course notebook's statements
before that exercise is the course's own; any other is the learner's, read by the same
static reader as the exercise cell (``grade.audit``) and run as the learner's code. IPython
syntax (``%magic``, ``!shell``) is turned into Python first; a cell that still does not parse
contributes nothing (its names stay undefined, and the error says where they came from).
"""
from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass

CONFIGURATION_CALLS = {"setup", "set_context", "set_device", "set_seed", "seed_everything",
                       "seed", "filterwarnings", "set_printoptions", "keep_interrupt"}


@dataclass(frozen=True)
class Piece:
    """One statement of the context."""
    code: str            # its source, as the notebook has it
    cell: int            # the index of its code cell among the notebook's code cells (0-based)
    line: int            # its first line in that cell
    learner: bool        # not a statement of the course's own notebook


def python_source(source: str) -> str:
    """A cell's source as plain Python (IPython's ``%`` and ``!`` lines turned into calls)."""
    if "%" not in source and "!" not in source:
        return source
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:                                   # no IPython: take it as it is
        return source
    try:
        return TransformerManager().transform_cell(source)
    except Exception:                                     # noqa: BLE001 - odd input
        return source


def statements(source: str) -> list[ast.stmt] | None:
    """The top-level statements of a cell (None if it does not parse)."""
    try:
        return ast.parse(python_source(source)).body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None


def _targets(node: ast.AST) -> set[str]:
    """Names an assignment target binds (``a``, ``a, (b, *c)``; not ``a.x`` or ``a[i]``)."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def bound_names(stmt: ast.stmt) -> set[str]:
    """The module-level names a top-level statement binds (inside ``if``/``for``/``with``/
    ``try`` bodies too, never inside a ``def`` or ``class`` body)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {a.asname or a.name.split(".")[0] for a in stmt.names if a.name != "*"}
    names: set[str] = set()
    for node in _walk_module_level(stmt):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {a.asname or a.name.split(".")[0] for a in node.names if a.name != "*"}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def _walk_module_level(node: ast.AST):
    """``ast.walk`` that does not enter function or class bodies (nor lambdas and
    comprehensions, whose names are their own)."""
    todo = [node]
    while todo:
        current = todo.pop()
        yield current
        if current is not node and isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                        ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(current, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        todo.extend(ast.iter_child_nodes(current))


def free_names(nodes) -> set[str]:
    """Names the code reads that it never binds itself (at any depth) and that are not
    builtins: what it needs from the notebook."""
    loaded, bound = set(), set()
    for node in nodes:
        for n in ast.walk(node):
            if isinstance(n, ast.Name):
                (loaded if isinstance(n.ctx, ast.Load) else bound).add(n.id)
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(n.name)
            elif isinstance(n, ast.arg):
                bound.add(n.arg)
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                bound |= {a.asname or a.name.split(".")[0] for a in n.names}
            elif isinstance(n, ast.ExceptHandler) and n.name:
                bound.add(n.name)
    return loaded - bound - set(dir(builtins))


def is_configuration(stmt: ast.stmt) -> bool:
    """An import, a configuration call (``cl.setup(...)``, ``ms.set_context(...)``, a seed)
    or a write to ``os.environ``: run whatever the cell needs."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return True
    value = stmt.value if isinstance(stmt, (ast.Expr, ast.Assign)) else None
    if isinstance(value, ast.Call):
        func = value.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in CONFIGURATION_CALLS:
            return True
    if isinstance(stmt, ast.Assign):
        return any(isinstance(t, ast.Subscript) and ast.unparse(t.value) == "os.environ"
                   for t in stmt.targets)
    return False


def _course_statements(course_sources) -> set[str]:
    found = set()
    for source in course_sources:
        for stmt in statements(source) or []:
            found.add(ast.dump(stmt))
    return found


def _mutated(stmt: ast.stmt) -> set[str]:
    """Names whose object a statement changes in place: ``cfg["lr"] = ...``, ``net.x = ...``,
    ``x += ...`` (method calls such as ``trainer.train()`` are not followed: they may train)."""
    targets = stmt.targets if isinstance(stmt, ast.Assign) else \
        [stmt.target] if isinstance(stmt, (ast.AugAssign, ast.AnnAssign)) else []
    names = set()
    for target in targets:
        while isinstance(target, (ast.Attribute, ast.Subscript)):
            target = target.value
        if isinstance(target, ast.Name) and (target is not getattr(stmt, "target", None) or
                                             isinstance(stmt, ast.AugAssign)):
            names.add(target.id)
    return names


def _replaces(stmt: ast.stmt) -> set[str]:
    """Names a statement surely (re)binds without reading them first: earlier bindings of
    them are not needed for what follows."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef,
                         ast.ClassDef)):
        return bound_names(stmt)
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
        return bound_names(stmt) - free_names([stmt.value])
    return set()


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _now_and_later(stmt: ast.stmt) -> tuple[set[str], set[str]]:
    """(names a statement reads when it runs, names its functions read when called later).
    A ``def`` reads its decorators and defaults now, its body later; a ``class`` also runs
    its bases and its body (but not its methods' bodies) now."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = stmt.args
        now = [*stmt.decorator_list, *args.defaults, *[d for d in args.kw_defaults if d]]
        return free_names(now), free_names(stmt.body) - {stmt.name}
    if isinstance(stmt, ast.ClassDef):
        methods = [s for s in stmt.body if isinstance(s, _DEFS)]
        rest = [s for s in stmt.body if not isinstance(s, _DEFS)]
        now = free_names([*stmt.decorator_list, *stmt.bases, *stmt.keywords, *rest])
        for method in methods:
            now |= _now_and_later(method)[0]
        later = set().union(*[_now_and_later(m)[1] for m in methods]) if methods else set()
        return now, later - {stmt.name}
    return free_names([stmt]), set()


def _backward_pass(parsed, needed: set[str]) -> list[tuple[int, ast.stmt, str]]:
    """The statements to run, walking the earlier cells from the last statement back."""
    needed, chosen = set(needed), []
    for index, stmts, text in reversed(parsed):
        for stmt in reversed(stmts or []):
            if is_configuration(stmt) or (bound_names(stmt) | _mutated(stmt)) & needed:
                chosen.append((index, stmt, text))
                needed = (needed - _replaces(stmt)) | _now_and_later(stmt)[0]
    chosen.reverse()
    return chosen


def context(earlier: list[str], cell: str, course_earlier: list[str] = ()) -> list[Piece]:
    """The statements of the ``earlier`` code cells (sources, in order) that exercise cell
    ``cell`` needs, in notebook order. ``course_earlier``: the course notebook's code cells
    before the same exercise (a statement found there is the course's, not the learner's).

    A function looks its globals up when it is called (from the exercise cell, after every
    earlier cell ran), so the names that the chosen functions read are sought again from the
    last earlier statement back, until nothing new is needed."""
    parsed = [(i, statements(src), python_source(src)) for i, src in enumerate(earlier)]
    wanted = free_names(statements(cell) or [])
    while True:
        chosen = _backward_pass(parsed, wanted)
        late = set().union(*[_now_and_later(s)[1] for _, s, _ in chosen]) - wanted
        if not late:
            break
        wanted |= late
    course = _course_statements(course_earlier)
    return [Piece(ast.get_source_segment(text, stmt) or ast.unparse(stmt), index, stmt.lineno,
                  ast.dump(stmt) not in course) for index, stmt, text in chosen]


def code_cells(nb: dict) -> list[dict]:
    return [c for c in nb.get("cells", []) if isinstance(c, dict) and c.get("cell_type") == "code"]
