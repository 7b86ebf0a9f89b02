"""Read a learner's exercise cell before it runs: is it the learner's own code?

The grader runs no cell that (1) reaches the answer instead of writing it — imports or uses
``course_lib.solutions``, ``show_solution``, or the very library object the exercise asks
for (its ``targets`` in the exercise registry) — verdict "borrowed"; or (2) reaches for the
grading machinery or the interpreter's insides — the checkers' modules other than calling an
exercise, ``course_lib.grade`` / ``runtime``, ``sys``, ``gc``, ``ctypes``, ``importlib``,
``exec`` / ``eval`` / ``compile`` / ``__import__``, dunder attributes, assigning to another
module's attributes, ``os._exit`` and friends — verdict "error" with the reason. Neither is
needed to write any exercise of the course. Names are resolved through the cell's own
imports and the course's setup code, never by textual similarity of the learner's code to
the reference: an honest RMSNorm that looks like the reference is the learner's own.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

BLOCKED_MODULES = ("sys", "gc", "ctypes", "importlib", "builtins", "inspect", "subprocess",
                   "signal", "resource", "multiprocessing", "runpy", "code", "codeop", "marshal",
                   "pickle", "dill", "cloudpickle", "socket", "threading", "_thread", "types",
                   "course_lib.grade", "course_lib.runtime", "course_lib.check.common",
                   "course_lib.check.cellcheck", "course_lib.check.__main__")
BLOCKED_CALLS = {"exec", "eval", "compile", "__import__", "globals", "locals", "vars",
                 "breakpoint"}
ATTRIBUTE_CALLS = {"getattr", "setattr", "delattr"}    # fine on the learner's objects, not modules
OS_BLOCKED = {"_exit", "abort", "kill", "killpg", "system", "popen", "fork", "forkpty",
              "execv", "execve", "execl", "execle", "execlp", "execlpe", "execvp", "execvpe",
              "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp",
              "spawnvpe", "posix_spawn", "posix_spawnp", "setsid", "environ", "putenv"}
SAFE_IN_BLOCKED = {"inspect.signature", "inspect.Parameter", "inspect.getsource", "inspect.getdoc",
                   "inspect.isclass", "inspect.isfunction", "inspect.ismethod"}   # read, not reach in
ALLOWED_DUNDERS = {"__init__", "__call__", "__len__", "__getitem__", "__setitem__", "__iter__",
                   "__next__", "__contains__", "__enter__", "__exit__", "__repr__", "__str__",
                   "__eq__", "__hash__", "__name__"}
SOLUTIONS = "course_lib.solutions"


@dataclass(frozen=True)
class Finding:
    verdict: str                       # "borrowed" | "error"
    reason: str


def _imports(tree: ast.AST):
    """(node, local name, what the name is bound to, the imported path) for every import in
    ``tree`` (at any depth): ``import a.b`` binds ``a`` and imports ``a.b``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                bound = a.name if a.asname else a.name.split(".")[0]
                yield node, a.asname or a.name.split(".")[0], bound, a.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                path = f"{node.module}.{a.name}"
                yield node, a.asname or a.name, path, path


def _aliases(tree: ast.AST) -> dict[str, str]:
    """{local name: dotted path} from the imports in ``tree``."""
    return {local: bound for _, local, bound, _ in _imports(tree)}


def _final_aliases(tree: ast.Module) -> dict[str, str]:
    """{name: dotted path} that the imports of ``tree`` leave bound at its end: a later def,
    class or assignment of the same name (the learner's own, in an earlier cell) replaces it."""
    names: dict[str, str] = {}
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            names.update(_aliases(stmt))
        else:
            for name in _own_bindings(ast.Module(body=[stmt], type_ignores=[])):
                names.pop(name, None)
    return names


def _own_bindings(tree: ast.Module) -> dict[str, int]:
    """{name: the line of the first top-level statement that binds it without importing
    it}: a def, a class or an assignment of the cell's own."""
    own: dict[str, int] = {}
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.setdefault(stmt.name, stmt.end_lineno or stmt.lineno)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                        own.setdefault(n.id, stmt.end_lineno or stmt.lineno)
    return own


def _dotted(node: ast.AST) -> list[str] | None:
    """``a.b.c`` as ["a", "b", "c"] (None when the chain does not start at a name)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id] + parts[::-1]
    return None


class _Reader:
    """One cell, its names resolved; :meth:`findings` lists what it reaches."""

    def __init__(self, source: str, setup: str, exercises, targets, registered):
        self.tree = ast.parse(source)
        self.names = {**_final_aliases(ast.parse(setup)), **_aliases(self.tree)}
        self.exercises, self.registered = set(exercises), set(registered)
        self.targets = tuple(targets)
        self.found: list[tuple[int, Finding]] = []
        self.own = _own_bindings(self.tree)
        self.deferred = {id(n) for f in ast.walk(self.tree) if isinstance(
            f, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) for n in ast.walk(f)}
        self.after_check = self._after_last_check()

    def _after_last_check(self) -> set:
        """The nodes of the top-level statements after the cell's last checker call: they run
        once the verdict is printed (a scaffold's ``# show_solution(...)`` uncommented where
        it stands shows the reference after the learner's attempt, not before it)."""
        def checks(stmt):
            return any(isinstance(n, ast.Call) and (parts := _dotted(n.func)) and
                       parts[0] in self.names and self.resolve(parts) in self.registered
                       for n in ast.walk(stmt))
        body = self.tree.body
        last = max((i for i, stmt in enumerate(body) if checks(stmt)), default=None)
        return set() if last is None else {id(n) for stmt in body[last + 1:] for n in ast.walk(stmt)}

    def shadowed(self, node) -> bool:
        """``node`` (a Name) reads the cell's own definition of its name, not an imported one
        of the same name: inside a function (run when the checker calls it, after the whole
        cell) or after the top-level statement that (re)defines it."""
        line = self.own.get(node.id)
        return line is not None and (id(node) in self.deferred or node.lineno > line)

    def flag(self, node, verdict: str, reason: str) -> None:
        self.found.append((getattr(node, "lineno", 0), Finding(verdict, f"{reason}（第 {getattr(node, 'lineno', '?')} 行）")))

    def resolve(self, parts: list[str]) -> str | None:
        head = self.names.get(parts[0])
        return ".".join([head, *parts[1:]]) if head else None

    def judge_path(self, node, path: str, called: bool = False, importing: bool = False) -> None:
        if called and path in self.registered:
            return None                          # chNN.name(...): the checker call itself
        if path == SOLUTIONS or path.startswith(SOLUTIONS + "."):
            return self.flag(node, "borrowed", f"用到了课程的参考答案 {path}")
        if path.split(".")[-1] == "show_solution":
            if importing or (called and id(node) in self.after_check):
                return None                      # imported, or called after the last check
            return self.flag(node, "borrowed", "在检查之前用到了 show_solution（参考答案）")
        for target in self.targets:
            tail = target.split(".")[-1]
            if path == target or path.startswith(target + ".") or \
                    (path.startswith("course_lib.") and path.split(".")[-1] == tail):
                why = "课程库里现成的 {}（检查器拿它当参考答案）" if path.startswith("course_lib.") \
                    else "现成的 {}（它算的正是题目要的东西）"
                return self.flag(node, "borrowed", "用到了" + why.format(path) + "：题目要你自己写它")
        if path.startswith("course_lib.check.") or path == "course_lib.check":
            chapter_module = path.count(".") == 2 and path.split(".")[2][:2] == "ch"
            if importing and (chapter_module or path == "course_lib.check"):
                return None
            if not called and path.count(".") == 3 and path.split(".")[2][:2] == "ch" and \
                    path.split(".")[3].isupper():
                return None                      # a chapter's data, e.g. ch07.PROBS
            return self.flag(node, "error", f"动了评分用的检查代码 {path}")
        if path in SAFE_IN_BLOCKED or any(path.startswith(p + ".") for p in SAFE_IN_BLOCKED):
            return None                          # e.g. inspect.signature(nn.LayerNorm)
        if importing and any(p.startswith(path + ".") for p in SAFE_IN_BLOCKED):
            return None                          # `import inspect`: each use is judged where it is
        for blocked in BLOCKED_MODULES:
            if path == blocked or path.startswith(blocked + "."):
                return self.flag(node, "error", f"用到了 {blocked}（练习单元里不需要，评分器不运行它）")
        if path.startswith("os.") and path.split(".")[1] in OS_BLOCKED:
            return self.flag(node, "error", f"调用了 {path}（会结束或改动评分进程）")
        return None

    def findings(self) -> list[Finding]:
        nodes = list(ast.walk(self.tree))
        calls = {id(n.func) for n in nodes if isinstance(n, ast.Call)}
        inner = {id(n.value) for n in nodes if isinstance(n, ast.Attribute)}
        for node, _, _, path in _imports(self.tree):
            self.judge_path(node, path, importing=True)
        for node in nodes:
            if isinstance(node, ast.Attribute):
                self._attribute(node, id(node) in calls, id(node) in inner)
            elif isinstance(node, ast.Name):
                self._name(node, id(node) in calls, id(node) in inner)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                    node.func.id in ATTRIBUTE_CALLS and node.args and \
                    isinstance(node.args[0], ast.Name) and node.args[0].id in self.names:
                self.flag(node, "error", f"用 {node.func.id} 动了模块 {node.args[0].id} 的属性")
        return [f for _, f in sorted(self.found, key=lambda item: item[0])]

    def _attribute(self, node, called: bool, inner: bool) -> None:
        if node.attr.startswith("__") and node.attr not in ALLOWED_DUNDERS:
            self.flag(node, "error", f"访问了解释器内部的属性 {node.attr}")
        if isinstance(node.value, ast.Call) and _dotted(node.value.func) == ["super"] and \
                any(t.split(".")[-1] == node.attr and t.count(".") >= 3 for t in self.targets) and \
                not self._skips_target(node.value, node.attr):
            self.flag(node, "borrowed", f"调用了父类现成的 {node.attr}：题目要你自己写它")
        parts = _dotted(node)
        if not parts or parts[0] not in self.names:
            return
        head = node
        while isinstance(head, ast.Attribute):
            head = head.value
        if self.shadowed(head):
            return
        if not isinstance(node.ctx, ast.Load):
            self.flag(node, "error", f"改写了别的模块的属性 {'.'.join(parts)}")
        elif not inner:                          # judge the whole chain once, at its end
            self.judge_path(node, self.resolve(parts), called=called)

    def _skips_target(self, call: ast.Call, attr: str) -> bool:
        """``super(lora.LoRADense, self).construct``: the method of the class ABOVE the
        reference (nn.Dense's), not the reference's own."""
        parts = _dotted(call.args[0]) if call.args else None
        if not parts or parts[0] not in self.names:
            return False
        return f"{self.resolve(parts)}.{attr}" in self.targets

    def _name(self, node, called: bool, inner: bool) -> None:
        if node.id.startswith("__") and node.id not in ALLOWED_DUNDERS:
            self.flag(node, "error", f"用到了解释器内部的名字 {node.id}")
        elif node.id in BLOCKED_CALLS and node.id not in self.names:
            self.flag(node, "error", f"用到了 {node.id}()（动态执行代码，评分器不运行它）")
        elif node.id in self.names and not inner and isinstance(node.ctx, ast.Load) and \
                not self.shadowed(node):
            self.judge_path(node, self.names[node.id], called=called)


def audit(source: str, setup: str, exercises, targets=(), registered=()) -> Finding | None:
    """The first reason not to run this cell (borrowed before error), or None. A cell that
    does not parse is left to the sandbox, which reports the SyntaxError with its line."""
    try:
        found = _Reader(source, setup, exercises, targets, registered).findings()
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    borrowed = [f for f in found if f.verdict == "borrowed"]
    return (borrowed or found or [None])[0]


def called(stmt: ast.AST, exercises) -> list[str]:
    """The exercises whose checker a statement calls (``chNN.name(...)`` anywhere in it)."""
    found = []
    for node in ast.walk(stmt):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                isinstance(node.func.value, ast.Name):
            name = f"{node.func.value.id}.{node.func.attr}"
            if name in exercises and name not in found:
                found.append(name)
    return found


@dataclass(frozen=True)
class Reading:
    """What the reader decided about one exercise cell."""
    finding: Finding | None            # the whole cell is not run (a code exercise's cell)
    refused: dict                      # exercise -> the Finding of the statement(s) answering it
    code: str                          # the code to run: refused statements raise instead


def _bound(stmt: ast.stmt) -> set[str]:
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)} | \
        {a.asname or a.name.split(".")[0] for n in ast.walk(stmt)
         if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}


def _shifted(finding: Finding | None, offset: int) -> Finding | None:
    """A statement's finding with its line numbers counted in the whole cell."""
    if finding is None or not offset:
        return finding
    import re
    return Finding(finding.verdict, re.sub(r"（第 (\d+) 行）",
                                           lambda m: f"（第 {int(m.group(1)) + offset} 行）", finding.reason))


def feeds(body: list, exercises) -> list[set]:
    """For each top-level statement, the exercises it answers: those whose checker it calls,
    and those fed by the names it binds through the statements after it."""
    out, needed = [set() for _ in body], {}      # needed: name -> exercises later statements feed
    for i in range(len(body) - 1, -1, -1):
        mine = set(called(body[i], exercises))
        for name in _bound(body[i]):
            mine |= needed.pop(name, set())
        out[i] = mine
        for n in ast.walk(body[i]):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                needed.setdefault(n.id, set()).update(mine)
    return out


def _flat(targets) -> tuple:
    return tuple(t for ts in targets.values() for t in ts) if isinstance(targets, dict) \
        else tuple(targets)


def read_cell(source: str, setup: str, exercises, targets=(), registered=()) -> Reading:
    """:func:`audit` for a cell. A cell of several answers (the number exercises) is read one
    top-level statement at a time: a statement the reader refuses does not run (it raises the
    reason instead) and decides only the answers that call it or use what it defines; the
    other answers of the cell are judged as usual. ``targets``: a sequence for every answer,
    or ``{exercise: targets}``, then a statement is held only to the targets of the answers
    it feeds (ex1's library function may compute ex4). A code exercise's cell is all or
    nothing."""
    whole = audit(source, setup, exercises, _flat(targets), registered)
    if whole is None or len(tuple(exercises)) < 2:
        return Reading(whole, {}, source)
    try:
        body = ast.parse(source).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return Reading(whole, {}, source)
    lines, refused, tainted, names = source.splitlines(keepends=True), {}, {}, setup
    answers = feeds(body, exercises)
    for stmt, fed in zip(body, answers):
        text = ast.get_source_segment(source, stmt) or ""
        mine = _flat({ex: targets[ex] for ex in fed}) if isinstance(targets, dict) else targets
        found = _shifted(audit(text, names, exercises, mine, registered), stmt.lineno - 1)
        used = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
        found = found or next((tainted[n] for n in sorted(used & set(tainted))), None)
        if found is not None:
            refused.update({ex: found for ex in called(stmt, exercises)})
            tainted.update({n: found for n in _bound(stmt)})
            first, last = stmt.lineno - 1, (stmt.end_lineno or stmt.lineno) - 1
            lines[first:last + 1] = [f"raise RuntimeError({('评分器没有运行这一句：它' + found.reason)!r})\n"] + \
                ["\n"] * (last - first)
        names += text + "\n"
    return Reading(None, refused, "".join(lines))
