"""Run one learner's exercise cell in a fresh process and turn what happened into verdicts.

The grader never executes a learner's code itself: each cell runs through
``course_lib.runtime.run_isolated`` (a new interpreter, its own process group, no stdin, a
time limit) in an empty temporary working directory, after the course's setup code
(:data:`notebooks.SETUP`), inside ``check.common.recording()``. What the learner prints is
kept up to :data:`MAX_OUTPUT` characters and dropped after that; no file the child writes
(its raw stderr included) grows past :data:`MAX_FILE_BYTES`. The child returns the
verdicts the checkers recorded; the grader maps them, an exception or a timeout to
pass / fail / not attempted / error / timeout.
"""
from __future__ import annotations

import builtins
import contextlib
import os
import tempfile
import time
import traceback
from dataclasses import dataclass

from ..runtime import Isolated, IsolatedError, IsolatedTimeout

MAX_OUTPUT = 64_000                   # characters of a cell's stdout+stderr kept in the child
MAX_FILE_BYTES = 64 * 2**20            # the most a cell may write to any one file, fd 2 included
CHILD_ENV = {"COURSE_HEADLESS": "1", "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg",
             "DIFFUSERS_VERBOSITY": "error", "PYTHONHASHSEED": "0"}
VERDICTS = ("pass", "fail", "not attempted", "error", "timeout")


@dataclass(frozen=True)
class Result:
    verdict: str                       # one of VERDICTS
    hint: str = ""                     # the checker's first-mismatch message, the error, ...


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
    code exercise the cell did not check itself (``calls``). Returns the recorded verdicts."""
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
    records = [[r.exercise, r.passed, r.hint, r.attempted] for r in found]
    return {"records": records, "error": error, "dropped": sink.dropped}


def verdicts_from(exercises, child: dict) -> dict[str, Result]:
    """Each exercise's verdict from the child's records: pass if any call passed, else the
    first failing call's hint; no record: error (the cell raised) or not attempted."""
    out = {}
    for name in exercises:
        mine = [r for r in child["records"] if r[0] == name]
        if any(r[1] for r in mine):
            out[name] = Result("pass")
        elif any(r[3] for r in mine):
            out[name] = Result("fail", next(r[2] for r in mine if r[3]))
        elif mine:
            out[name] = Result("not attempted", "还没有实现（脚手架仍然 raise NotImplementedError）")
        elif child["error"]:
            out[name] = Result("error", child["error"])
        else:
            out[name] = Result("not attempted", f"单元运行了，但没有调用 {name}(...)")
    return out


class Job:
    """One cell started in a fresh process (in its own empty temporary directory)."""

    def __init__(self, cell, code: str, timeout: float):
        self.exercises, self.timeout = cell.exercises, timeout
        self._cwd = tempfile.TemporaryDirectory(prefix="course_grade_")
        self._job = Isolated(run_cell, {"setup": cell.setup, "code": code, "calls": cell.calls},
                             timeout, dict(CHILD_ENV), cwd=self._cwd.name)

    def done(self) -> bool:
        return self._job.done()

    def cancel(self) -> None:
        """Kill the child (and what it started) now and clean up."""
        self._job._kill()
        with contextlib.suppress(Exception):
            self.results()

    def results(self) -> dict[str, Result]:
        try:
            child = self._job.result()
        except IsolatedTimeout:
            return {n: Result("timeout", f"超过 {self.timeout:g} 秒没有结束，进程已被终止"
                                         "（死循环？或者把训练步数调小）") for n in self.exercises}
        except (IsolatedError, OSError, ValueError) as err:
            last = [line for line in str(err).splitlines() if line.strip()][-1:]
            return {n: Result("error", f"运行这个单元的进程异常退出：{''.join(last)[:500]}")
                    for n in self.exercises}
        finally:
            with contextlib.suppress(OSError):
                self._cwd.cleanup()
        return verdicts_from(self.exercises, child)


def run_all(tasks: list, timeout: float, jobs: int | None = None) -> list[dict[str, Result]]:
    """Results of ``tasks`` (each ``(ExerciseCell, code)``), in order, at most ``jobs``
    processes at a time (default: 2, or 1 on a one-core machine)."""
    jobs = max(1, jobs or min(2, os.cpu_count() or 1))
    waiting, running = list(enumerate(tasks)), {}
    results: list = [None] * len(tasks)
    try:
        while waiting or running:
            while waiting and len(running) < jobs:
                i, (cell, code) = waiting.pop(0)
                running[i] = Job(cell, code, timeout)
            finished = [i for i, job in running.items() if job.done()]
            for i in finished:
                results[i] = running.pop(i).results()
            if not finished:
                time.sleep(0.05)
    finally:
        for job in running.values():          # interrupted: no child outlives the grader
            job.cancel()
    return results
