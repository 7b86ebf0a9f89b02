"""Run one learner's exercise cell in a fresh process; judge what it sends back here.

The grader never executes a learner's code itself: each cell runs through
``course_lib.runtime.run_isolated`` (a new interpreter, its own process group, no stdin, a
time limit) in an empty temporary working directory (``COURSE_SCALE=ci``), after the course's
setup code (:data:`notebooks.COMMON_SETUP`) and the statements of the learner's earlier cells
that it uses (``grade.context``), inside ``check.common.recording()``. What the learner prints is
kept up to :data:`MAX_OUTPUT` characters and dropped after that; no file the child writes
(its raw stderr included) grows past :data:`MAX_FILE_BYTES`. The child sends back what the
learner's code produced at every checker call, as data; :mod:`.judge` compares it here with
a reference run (:func:`reference_cell`, a process with no learner code) and gives
pass / fail / borrowed / not attempted / error / timeout. Nothing the child prints, writes
or exits with can make a pass.
"""
from __future__ import annotations

import builtins
import contextlib
import os
import tempfile
import time
import traceback

from ..runtime import Isolated, IsolatedError, IsolatedTimeout
from .audit import called
from .judge import VERDICTS, BadData, Result, decode_record, encode_record, judge  # noqa: F401

MAX_OUTPUT = 64_000                   # characters of a cell's stdout+stderr kept in the child
MAX_FILE_BYTES = 64 * 2**20            # the most a cell may write to any one file, fd 2 included
CHILD_ENV = {"COURSE_HEADLESS": "1", "COURSE_SCALE": "ci", "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg",
             "DIFFUSERS_VERBOSITY": "error", "PYTHONHASHSEED": "0",
             "COURSE_GRADING": "1"}        # checkers return no verdict there (check.common.exercise)


class _Capped:
    """A text stream that keeps the first ``limit`` characters and counts the rest."""

    def __init__(self, limit: int):
        self.limit, self.kept, self.dropped = limit, [], 0
        self._size = 0

    def write(self, text) -> int:
        text = str(text)
        room = max(0, self.limit - self._size)
        self.kept.append(text[:room])
        self._size += min(room, len(text))
        self.dropped += max(0, len(text) - room)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def _describe(err: BaseException) -> str:
    """``Type: message`` and the learner's line it came from (the last frame in their cell)."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename == "<learner cell>"]
    where = f"（第 {frames[-1].lineno} 行）" if frames else ""
    if isinstance(err, SyntaxError) and err.filename == "<learner cell>":
        where = f"（第 {err.lineno} 行）"
    return f"{type(err).__name__}: {err}{where}"[:2000]


def _run(source, filename: str, namespace: dict) -> str | None:
    """Execute ``source`` (text or an ``ast.Module``); None, or the description of what it
    raised (anything at all)."""
    try:
        exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - in the sandbox child
    except StepTimeout:
        raise                                                # the step's time is up
    except BaseException as err:                             # noqa: BLE001 - SystemExit too
        return _describe(err)
    return None


def limit_file_size(limit: int = MAX_FILE_BYTES) -> None:
    """In the child: no file it writes grows past ``limit`` bytes -- also the stderr file that
    output written below Python (``os.write(2, ...)``, C++ logs) goes to. A write past it
    fails with ``OSError: File too large`` (SIGXFSZ ignored) instead of filling the disk."""
    import resource
    import signal
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def _run_context(context: list, namespace: dict, seconds: float | None = None,
                 max_output: int = MAX_OUTPUT) -> list[dict]:
    """Run the earlier cells' statements an exercise needs (``grade.context``), each on its
    own (and within ``seconds``); what fails is recorded and the rest still runs."""
    import ast
    failed = []
    for piece in context:
        name = f"<learner cell {piece['cell']}>" if piece["learner"] else f"<course cell {piece['cell']}>"
        sink = _Capped(max_output)
        try:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), \
                    _time_limit(seconds):
                tree = ast.parse(piece["code"])
                ast.increment_lineno(tree, piece["line"] - 1)
                exec(compile(tree, name, "exec"), namespace)  # noqa: S102 - in the sandbox child
        except BaseException as err:                       # noqa: BLE001 - SystemExit too
            failed.append({"cell": piece["cell"], "line": piece["line"],
                           "error": f"{type(err).__name__}: {err}"[:500]})
    return failed


def _run_statements(code: str, namespace: dict, exercises) -> list[dict]:
    """Run the learner's cell one top-level statement at a time: a statement that raises is
    recorded (line, error, the checkers it calls) and the next one still runs, so one broken
    answer of a number cell does not take the others with it."""
    import ast
    from .context import python_source
    try:
        tree = ast.parse(python_source(code))
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        error = _run(code, "<learner cell>", namespace)      # reports the SyntaxError's line
        return [{"line": 0, "error": error, "calls": list(exercises)}] if error else []
    errors = []
    for stmt in tree.body:
        try:
            exec(compile(ast.Module(body=[stmt], type_ignores=[]), "<learner cell>", "exec"),
                 namespace)  # noqa: S102 - in the sandbox child
        except StepTimeout:
            raise                                            # the cell's time is up
        except BaseException as err:                         # noqa: BLE001 - SystemExit too
            errors.append({"line": stmt.lineno, "error": _describe(err),
                           "calls": called(stmt, exercises)})
    return errors


class StepTimeout(BaseException):
    """A cell (or a statement of its context) ran past its time (``run_chapter``)."""


@contextlib.contextmanager
def _time_limit(seconds: float | None):
    """Raise :class:`StepTimeout` in the block after ``seconds``, and again every quarter
    second until the block ends (a learner's ``except BaseException`` does not stop it for
    long; the grader's hard limit on the whole process is the last resort)."""
    import signal
    if not seconds:
        yield
        return

    def expire(signum, frame):
        raise StepTimeout(f"超过 {seconds:g} 秒")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.25)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _one_cell(step: dict, namespace: dict, context_errors: list, found: list,
              seconds: float | None, max_output: int) -> dict:
    """Run one exercise cell (statement by statement, then the course's checker calls of its
    code exercises it did not make); what it produced, as data for ``verdicts_from``."""
    sink = _Capped(max_output)
    first = len(found)
    exercises, timed_out, errors = list(step["exercises"]), False, []
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        try:
            with _time_limit(seconds):
                errors = _run_statements(step["code"], namespace, exercises)
                for name, call in step["calls"].items():
                    if name not in {r.exercise for r in found[first:]} and \
                            not any(name in e["calls"] for e in errors):
                        error = _run(call, "<checker call>", namespace)
                        if error:
                            errors.append({"line": 0, "error": error, "calls": [name]})
        except StepTimeout:
            timed_out = True
    needed = {(c, l) for c, l in step.get("context", [])}
    return {"records": [encode_record(r) for r in found[first:]], "errors": errors,
            "context_errors": [e for e in context_errors if (e["cell"], e["line"]) in needed],
            "timeout": timed_out, "dropped": sink.dropped}


def run_chapter(setup: str, steps: list, progress: str, seconds: float | None = None,
                max_output: int = MAX_OUTPUT) -> dict:
    """Child side: one learner's chapter, reduced to what its exercise cells need, top to
    bottom in one process: the course's setup, then ``steps`` in notebook order -- the
    statements of earlier cells that some exercise cell uses (``{"kind": "context", ...}``,
    see ``grade.context``) and the exercise cells (``{"kind": "cell", "key", "code", "calls",
    "exercises", "context"}``). Each step has ``seconds``; what a cell produced is appended to
    the file ``progress`` as one JSON line as soon as the cell is done, so a process that
    dies or hangs later loses nothing before it (the grader goes on from the next cell)."""
    import json
    from ..check.common import recording
    limit_file_size()
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    context_errors: list = []
    with recording() as found:
        with contextlib.redirect_stdout(_Capped(max_output)), contextlib.redirect_stderr(_Capped(max_output)):
            setup_error = _run(setup, "<course setup>", namespace)
        for step in steps:
            if setup_error and step["kind"] == "cell":
                result = {"records": [], "context_errors": [], "timeout": False, "dropped": 0,
                          "errors": [{"line": 0, "calls": step["exercises"],
                                      "error": f"课程的准备代码出错（不是你的代码）：{setup_error}"}]}
            elif step["kind"] == "cell":
                result = _one_cell(step, namespace, context_errors, found, seconds, max_output)
            else:
                context_errors += _run_context([step], namespace, seconds, max_output)
                continue
            with open(progress, "a", encoding="utf-8") as f:
                f.write(json.dumps({"key": step["key"], **result}) + "\n")
    return {"finished": len(steps)}


def run_cell(setup: str, code: str, calls: dict, context: list = (), exercises=(),
             max_output: int = MAX_OUTPUT) -> dict:
    """Child side of one cell alone (``run_chapter`` with a single cell): what it produced."""
    import json
    import os
    import tempfile
    steps = [{"kind": "context", **piece} for piece in context]
    steps.append({"kind": "cell", "key": 0, "code": code, "calls": calls,
                  "exercises": list(exercises or calls),
                  "context": [(p["cell"], p["line"]) for p in context]})
    fd, progress = tempfile.mkstemp(prefix="course_cell_", suffix=".jsonl")
    os.close(fd)
    try:
        run_chapter(setup, steps, progress, None, max_output)
        with open(progress, encoding="utf-8") as f:
            return json.loads(f.read().splitlines()[-1])
    finally:
        os.remove(progress)


def reference_cell(setup: str, names: list) -> dict:
    """Child side of a reference run, in a process that runs no learner code: setup, then
    each exercise's checker on its reference solution. What it observed is what a learner's
    code must produce (under the same ``COURSE_CHECK_SALT``)."""
    from ..check import all_exercises
    from ..check.common import recording
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    exercises = all_exercises()
    sink = _Capped(MAX_OUTPUT)
    with recording() as found, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        exec(compile(setup, "<course setup>", "exec"), namespace)  # noqa: S102 - the course's own
        for name in names:
            exercises[name].checker(exercises[name].solution())
    return {"records": [encode_record(r) for r in found]}


def references_from(names, child) -> dict:
    """{exercise: the reference run's Recorded} from a reference child's JSON (trusted code,
    decoded as strictly as a learner's); an exercise without a passing run is missing."""
    runs = {}
    for item in child["records"]:
        rec = decode_record(item)
        if rec.exercise in names and rec.passed:
            runs.setdefault(rec.exercise, rec)
    return runs


def _errors(value) -> list[dict]:
    """The ``errors`` list of untrusted child data, kept to well-formed entries."""
    if not isinstance(value, list):
        raise BadData("no error list")
    out = []
    for e in value[:1000]:
        if not isinstance(e, dict) or not isinstance(e.get("error"), str):
            raise BadData("malformed error")
        calls = e.get("calls") if isinstance(e.get("calls"), list) else []
        out.append({"error": e["error"][:2000], "calls": [c for c in calls if isinstance(c, str)],
                    "cell": e.get("cell") if isinstance(e.get("cell"), int) else None,
                    "line": e.get("line") if isinstance(e.get("line"), int) else 0})
    return out


def error_of(name: str, errors: list[dict], context_errors: list[dict]) -> str | None:
    """What stopped exercise ``name``: the error of a statement that calls its checker, else
    of a statement that calls no checker (shared code before the answers); another answer's
    error is not its own. An earlier cell's statement that failed is named with it."""
    own = [e for e in errors if name in e["calls"]] or [e for e in errors if not e["calls"]]
    if not own:
        return None
    message = own[0]["error"]
    if context_errors:
        first = context_errors[0]
        message += (f"（前面第 {first['cell'] + 1} 个代码单元第 {first['line']} 行没有运行成功："
                    f"{first['error']}；你的单元用到它定义的名字）")
    return message[:2000]


def verdicts_from(exercises, child, references: dict, timeout: float = 0) -> dict[str, Result]:
    """Each exercise's verdict, judged here from the data the learner's process sent back
    (``judge.judge``): what it printed or claimed counts for nothing. A cell stopped after
    ``timeout`` seconds is "timeout" for the exercises it had not checked yet."""
    try:
        if not isinstance(child, dict) or not isinstance(child.get("records"), list):
            raise BadData("no record list")
        runs = [decode_record(item) for item in child["records"]]
        errors = _errors(child.get("errors", []))
        context_errors = [e for e in _errors(child.get("context_errors", [])) if e["cell"] is not None]
    except (BadData, TypeError, ValueError, KeyError, AttributeError, RecursionError) as err:
        return {n: Result("error", f"运行这个单元的进程交回的评分数据无效（{err}）") for n in exercises}
    out = {name: judge(name, runs, references.get(name), error_of(name, errors, context_errors))
           for name in exercises}
    if child.get("timeout") is True:
        late = Result("timeout", f"超过 {timeout:g} 秒没有结束，单元被停止了（死循环？或者把训练步数调小）")
        out.update({name: late for name in exercises if not any(r.exercise == name for r in runs)})
    return out


class Job:
    """``func(**kwargs)`` started in a fresh process, in its own empty temporary directory."""

    def __init__(self, func, kwargs: dict, timeout: float, env: dict):
        self.timeout = timeout
        self._cwd = tempfile.TemporaryDirectory(prefix="course_grade_")
        self._job = Isolated(func, kwargs, timeout, dict(CHILD_ENV, **env), cwd=self._cwd.name)

    def done(self) -> bool:
        return self._job.done()

    def cancel(self) -> None:
        """Kill the child (and what it started) now and clean up."""
        self._job._kill()
        with contextlib.suppress(Exception):
            self.outcome()

    def outcome(self) -> tuple[str, object]:
        """("ok", the child's JSON value) / ("timeout", message) / ("error", message)."""
        try:
            return "ok", self._job.result()
        except IsolatedTimeout:
            return "timeout", (f"超过 {self.timeout:g} 秒没有结束，进程已被终止"
                               "（死循环？或者把训练步数调小）")
        except (IsolatedError, OSError, ValueError) as err:
            last = [line for line in str(err).splitlines() if line.strip()][-1:]
            return "error", f"运行这个单元的进程异常退出：{''.join(last)[:500]}"
        finally:
            with contextlib.suppress(OSError):
                self._cwd.cleanup()


def run_queue(specs: list, jobs: int | None = None, env: dict | None = None,
              then=None) -> list[tuple[str, object]]:
    """Run ``specs`` (each ``(func, kwargs, timeout, ...)``) at most ``jobs`` processes at a
    time (default: 2, or 1 on a one-core machine); when one ends, ``then(spec, outcome)`` may
    return more specs to run. Returns the outcomes (``Job.outcome``) of ``specs``, in order
    (those of the specs ``then`` added are its own business)."""
    jobs = max(1, jobs or min(2, os.cpu_count() or 1))
    waiting, running = list(enumerate(specs)), {}
    results: list = [None] * len(specs)
    extra = len(specs)
    try:
        while waiting or running:
            while waiting and len(running) < jobs:
                i, spec = waiting.pop(0)
                running[i] = (spec, Job(spec[0], spec[1], spec[2], env or {}))
            finished = [i for i, (_, job) in running.items() if job.done()]
            for i in finished:
                spec, job = running.pop(i)
                outcome = job.outcome()
                if i < len(specs):
                    results[i] = outcome
                for more in (then(spec, outcome) if then else []):
                    waiting.append((extra, more))
                    extra += 1
            if not finished:
                time.sleep(0.05)
    finally:
        for _, job in running.values():       # interrupted: no child outlives the grader
            job.cancel()
    return results


def run_all(specs: list, timeout: float, jobs: int | None = None,
            env: dict | None = None) -> list[tuple[str, object]]:
    """Outcomes (``Job.outcome``) of ``specs`` (each ``(func, kwargs)`` or ``(func, kwargs,
    timeout)``), in order, at most ``jobs`` processes at a time (default: 2, or 1 on a
    one-core machine)."""
    return run_queue([(func, kwargs, limit[0] if limit else timeout)
                      for func, kwargs, *limit in specs], jobs, env)
