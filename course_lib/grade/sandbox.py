"""Run one learner's exercise cell in a fresh process; judge what it sends back here.

The grader never executes a learner's code itself: each cell runs through
``course_lib.runtime.run_isolated`` (a new interpreter, its own process group, no stdin, a
time limit) in an empty temporary working directory, after the course's setup code
(:data:`notebooks.SETUP`), inside ``check.common.recording()``. What the learner prints is
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
from .judge import VERDICTS, BadData, Result, decode_record, encode_record, judge  # noqa: F401

MAX_OUTPUT = 64_000                   # characters of a cell's stdout+stderr kept in the child
MAX_FILE_BYTES = 64 * 2**20            # the most a cell may write to any one file, fd 2 included
CHILD_ENV = {"COURSE_HEADLESS": "1", "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg",
             "DIFFUSERS_VERBOSITY": "error", "PYTHONHASHSEED": "0"}


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


def _run(source: str, filename: str, namespace: dict) -> str | None:
    """Execute ``source``; None, or the description of what it raised (anything at all)."""
    try:
        exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - in the sandbox child
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


def run_cell(setup: str, code: str, calls: dict, max_output: int = MAX_OUTPUT) -> dict:
    """Child side: setup, the learner's ``code``, then the course's checker call of every
    code exercise the cell did not check itself (``calls``). Returns every checker call as
    data (what the learner's code produced); the grader judges it (``judge``)."""
    from ..check.common import recording
    limit_file_size()
    sink = _Capped(max_output)
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    error = None
    with recording() as found, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        setup_error = _run(setup, "<course setup>", namespace)
        if setup_error:
            error = f"课程的准备代码出错（不是你的代码）：{setup_error}"
        else:
            error = _run(code, "<learner cell>", namespace)
        for name, call in calls.items():
            if error is None and name not in {r.exercise for r in found}:
                error = _run(call, "<checker call>", namespace)
    return {"records": [encode_record(r) for r in found], "error": error, "dropped": sink.dropped}


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


def verdicts_from(exercises, child, references: dict) -> dict[str, Result]:
    """Each exercise's verdict, judged here from the data the learner's process sent back
    (``judge.judge``): what it printed or claimed counts for nothing."""
    try:
        if not isinstance(child, dict) or not isinstance(child.get("records"), list):
            raise BadData("no record list")
        runs = [decode_record(item) for item in child["records"]]
        error = child.get("error")
        error = error[:2000] if isinstance(error, str) else None
    except (BadData, TypeError, ValueError, KeyError, AttributeError, RecursionError) as err:
        return {n: Result("error", f"运行这个单元的进程交回的评分数据无效（{err}）") for n in exercises}
    return {name: judge(name, runs, references.get(name), error) for name in exercises}


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


def run_all(specs: list, timeout: float, jobs: int | None = None,
            env: dict | None = None) -> list[tuple[str, object]]:
    """Outcomes (``Job.outcome``) of ``specs`` (each ``(func, kwargs)`` or ``(func, kwargs,
    timeout)``), in order, at most ``jobs`` processes at a time (default: 2, or 1 on a
    one-core machine)."""
    jobs = max(1, jobs or min(2, os.cpu_count() or 1))
    waiting, running = list(enumerate(specs)), {}
    results: list = [None] * len(specs)
    try:
        while waiting or running:
            while waiting and len(running) < jobs:
                i, (func, kwargs, *limit) = waiting.pop(0)
                running[i] = Job(func, kwargs, limit[0] if limit else timeout, env or {})
            finished = [i for i, job in running.items() if job.done()]
            for i in finished:
                results[i] = running.pop(i).outcome()
            if not finished:
                time.sleep(0.05)
    finally:
        for job in running.values():          # interrupted: no child outlives the grader
            job.cancel()
    return results
