"""The grader's side of running learners' cells: one process per learner and chapter.

A learner's chapter runs as its notebook would, reduced to what its exercise cells need
(``grade.context``): the course's setup, then in notebook order the statements of earlier
cells that some exercise uses and the exercise cells themselves (``sandbox.run_chapter``),
one fresh process, at most ``jobs`` at a time with the reference runs. Each cell reports as
soon as it is done; if the process hangs past its limit or dies, the cell it was on is
"timeout" or "error" and the chapter goes on from the next cell in a new process (the cells
after it get their context again). A cell that loops is stopped after ``timeout`` seconds
inside the process (``sandbox._time_limit``) and the others still run.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass, field

from . import sandbox
from .judge import Result

SETUP_SECONDS = 120.0                  # the course's setup: MindSpore, course_lib, a checker module


@dataclass
class Attempt:
    """One exercise cell a learner changed, with its context in the learner's notebook."""
    who: str
    cell: object                       # notebooks.ExerciseCell
    code: str
    pieces: list                       # context.Piece
    index: int                         # the cell's position among the notebook's code cells
    key: int = 0
    refused: dict = field(default_factory=dict)   # exercise -> Result of a statement not run


@dataclass
class ChapterRun:
    """Cells of one learner's chapter still to run, in notebook order."""
    attempts: list
    progress: str = ""
    results: dict = field(default_factory=dict)    # key -> the cell's data, or a Result


def steps(attempts: list) -> list[dict]:
    """The chapter program: every attempt's context (each statement once) and the attempts
    themselves, in notebook order."""
    found: dict = {}
    for a in attempts:
        for p in a.pieces:
            found.setdefault((p.cell, p.line), {"kind": "context", "code": p.code, "cell": p.cell,
                                                "line": p.line, "learner": p.learner})
        found[(a.index, -1)] = {"kind": "cell", "key": a.key, "code": a.code,
                                "calls": a.cell.calls, "exercises": list(a.cell.exercises),
                                "context": [(p.cell, p.line) for p in a.pieces]}
    return [found[k] for k in sorted(found)]


def _spec(run: ChapterRun, timeout: float, folder: str) -> tuple:
    fd, run.progress = tempfile.mkstemp(prefix="progress_", suffix=".jsonl", dir=folder)
    os.close(fd)
    setup = run.attempts[0].cell.setup
    limit = SETUP_SECONDS + timeout * (len(run.attempts) + 1)
    return (sandbox.run_chapter, {"setup": setup, "steps": steps(run.attempts),
                                  "progress": run.progress, "seconds": timeout}, limit, run)


def _reported(run: ChapterRun) -> dict:
    """{key: the cell's data} from the progress file (the last line of a key counts)."""
    out = {}
    with contextlib.suppress(OSError):
        with open(run.progress, encoding="utf-8") as f:
            for line in f:
                try:
                    item = json.loads(line)
                except ValueError:
                    continue
                if isinstance(item, dict) and isinstance(item.get("key"), int):
                    out[item["key"]] = item
    return out


def _after(run: ChapterRun, status: str, value, timeout: float, folder: str) -> list:
    """Take what the process reported; the cell it stopped on gets its status; the cells
    after it run again in a new process (returned as a spec)."""
    reported = _reported(run)
    left = []
    for a in run.attempts:
        if a.key in reported:
            run.results[a.key] = reported[a.key]
        elif not left and status != "ok":
            run.results[a.key] = Result(status, value)
            left.append(None)                        # marks: the cells after this one run again
        elif status == "ok" and not left:
            run.results[a.key] = Result("error", "运行这个单元的进程提前结束了（os._exit？）")
            left.append(None)
        else:
            left.append(a)
    rest = [a for a in left if a is not None]
    if not rest:
        return []
    return [_spec(ChapterRun(rest, results=run.results), timeout, folder)]


def run(attempts: list, reference_specs: list, timeout: float, jobs, env: dict) -> tuple:
    """Run the reference specs and every attempt (grouped into one process per learner and
    chapter); returns (the reference outcomes, {(who, key): the cell's data or a Result})."""
    chapters: dict = {}
    for key, a in enumerate(attempts):
        a.key = key
        chapters.setdefault((a.who, a.cell.chapter), []).append(a)
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="course_grade_progress_") as folder:
        specs = list(reference_specs)
        for group in chapters.values():
            group.sort(key=lambda a: a.index)
            specs.append(_spec(ChapterRun(group, results=results), timeout, folder))

        def then(spec, outcome):
            if len(spec) < 4:
                return []
            return _after(spec[3], *outcome, timeout, folder)
        outcomes = sandbox.run_queue(specs, jobs, env, then)
    return outcomes[:len(reference_specs)], results
