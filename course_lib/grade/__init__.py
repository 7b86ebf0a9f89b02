"""Grade a class: a folder of learners' notebooks -> a gradebook (CSV, HTML, a summary).

    from course_lib.grade import grade
    book = grade("submissions/", out_csv="gradebook.csv", html="report.html")
    book.verdicts()        # {"alice": {"ch03.shift_for_lm": "pass", ...}, ...}

or ``python -m course_lib.grade SUBMISSIONS_DIR [--out gradebook.csv] [--html report.html]``.
Every exercise cell a learner changed is first read (``grade.audit``): one that reaches
the answer (the reference solutions, ``show_solution``, the library object the exercise
asks for) is "borrowed", one that reaches for the grading machinery is an "error"; neither
runs. The others run in their own fresh process (``grade.sandbox``) against the checker the
notebook calls, which sends back what the learner's code produced; the verdict is computed
here (``grade.judge``) against a reference run of each chapter's checkers in a process that
runs no learner code, on hidden inputs drawn anew for each grading session. An untouched
scaffold, a missing cell or a missing notebook is "not attempted" without running anything.
Verdicts: pass / fail / borrowed / not attempted / error / timeout, each with a hint; each
learner also gets a feedback page (``report.write_feedback``; see docs/instructors.md).
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from . import audit, context, notebooks, report, runner, sandbox
from .judge import VERDICTS, Result

DEFAULT_TIMEOUT = 120.0               # seconds per exercise cell, MindSpore's import included

__all__ = ["grade", "Gradebook", "Result", "VERDICTS", "DEFAULT_TIMEOUT"]


@dataclass
class Gradebook:
    """Learner × exercise results, with the course's chapters to summarise them by."""
    chapters: dict[str, tuple[str, ...]]          # "03" -> its exercise ids, in notebook order
    results: dict[str, dict[str, Result]]         # learner -> exercise -> Result

    @property
    def learners(self) -> list[str]:
        return list(self.results)

    @property
    def exercises(self) -> list[str]:
        return [ex for group in self.chapters.values() for ex in group]

    def verdicts(self) -> dict[str, dict[str, str]]:
        return {who: {ex: r.verdict for ex, r in res.items()} for who, res in self.results.items()}

    def passed(self, learner: str, chapter: str | None = None) -> int:
        names = self.chapters[chapter] if chapter else self.exercises
        return sum(self.results[learner][ex].verdict == "pass" for ex in names)

    def chapters_complete(self, learner: str) -> list[str]:
        """Chapters whose every exercise this learner passed."""
        return [ch for ch, names in self.chapters.items()
                if self.passed(learner, ch) == len(names)]

    def summary_lines(self) -> list[str]:
        total = len(self.exercises)
        lines = []
        for who in self.learners:
            done = self.chapters_complete(who)
            lines.append(f"{who}: 通过 {self.passed(who)}/{total} 个练习；完成的章节 "
                         f"{len(done)}/{len(self.chapters)}" + (f"（{', '.join(done)}）" if done else ""))
        return lines


def _plan(learners: dict, cells: dict) -> tuple[dict, list]:
    """Verdicts that need no process (missing, unreadable, untouched), and the cells to run
    (``runner.Attempt``: the learner's code and its context in the learner's notebook)."""
    decided: dict[str, dict[str, Result]] = {}
    tasks: list = []                              # runner.Attempt
    for who, books in learners.items():
        decided[who] = {}
        for chapter, groups in cells.items():
            nb, problem = None, None
            if chapter not in books:
                problem = Result("not attempted", f"没有交第 {chapter} 章的笔记本")
            else:
                try:
                    nb = notebooks.read_notebook(books[chapter])
                except notebooks.NotebookError as err:
                    problem = Result("error", str(err))
            for cell in groups:
                found = notebooks.find_cell(nb, cell.exercises) if nb else None
                if problem is None and found is None:
                    outcome = Result("not attempted", "笔记本里找不到这个练习单元")
                elif found is not None and notebooks.untouched(notebooks.cell_source(found),
                                                               cell.scaffold):
                    outcome = Result("not attempted", "练习单元还是原来的脚手架")
                elif found is not None:
                    code = notebooks.without_examples(notebooks.cell_source(found), cell.examples)
                    earlier = list(notebooks.earlier_code(nb, found))
                    tasks.append(runner.Attempt(who, cell, code, context.context(
                        earlier, code, cell.earlier), len(earlier)))
                    continue
                else:
                    outcome = problem
                decided[who].update({ex: outcome for ex in cell.exercises})
    return decided, tasks


def _answered(task) -> list:
    """[(statement of the exercise cell, the answers it feeds)], read once per cell."""
    body = context.statements(task.code) or []
    return list(zip(body, audit.feeds(body, task.cell.exercises)))


def _piece_targets(piece, answered: list, targets: dict) -> tuple:
    """The targets an earlier cell's statement is held to: those of the answers that use the
    names it binds (all of the cell's when it feeds none directly); ``answered``: _answered."""
    bound = context.bound_names(context.statements(piece.code)[0])
    fed = set()
    for stmt, answers in answered:
        if bound & context.free_names([stmt]):
            fed |= answers
    return tuple(t for ex in (fed or targets) for t in targets[ex])


def _read(task, registry, registered) -> audit.Reading:
    """The static reader's verdict on the cell (``audit.read_cell``: a number cell statement
    by statement) and on the learner's statements of its context (the names of the whole
    context resolve the cell's). A learner's import or configuration call that the cell does
    not need is dropped from the context instead (an ``import sys`` left in an earlier cell
    does not make the exercise an error)."""
    cell, pieces = task.cell, task.pieces
    targets = {ex: tuple(registry[ex].targets) for ex in cell.exercises}
    names = cell.setup + "".join(p.code + "\n" for p in pieces)
    answered = _answered(task)
    for p in [p for p in pieces if p.learner]:
        found = audit.audit(p.code, names, cell.exercises, _piece_targets(p, answered, targets),
                            registered)
        if found is None:
            continue
        needed = context.bound_names(context.statements(p.code)[0]) & \
            context.free_names(context.statements(task.code) or [])
        if needed or not context.is_configuration(context.statements(p.code)[0]):
            return audit.Reading(audit.Finding(found.verdict, f"前面第 {p.cell + 1} 个代码单元（第 "
                                               f"{p.line} 行起）{found.reason}"), {}, task.code)
        pieces.remove(p)
    return audit.read_cell(task.code, names, cell.exercises, targets, registered)


def _refusal(finding: audit.Finding, what: str) -> Result:
    if finding.verdict == "borrowed":
        return Result("borrowed", finding.reason)
    return Result("error", f"评分器没有运行{what}：它{finding.reason}。练习单元里只写题目要的代码，再调用检查函数。")


def _audited(tasks: list, decided: dict) -> list:
    """The tasks whose cell may run (refused statements replaced); the others decided here
    (borrowed / error), and so are the answers of a number cell that a refused statement gave."""
    from ..check import all_exercises
    registry = all_exercises()
    registered = {f"course_lib.check.{name}" for name in registry}
    runnable = []
    for task in tasks:
        reading = _read(task, registry, registered)
        if reading.finding is not None:
            decided[task.who].update({ex: _refusal(reading.finding, "这个单元") for ex in task.cell.exercises})
            continue
        task.code = reading.code
        task.refused = {ex: _refusal(f, "这一句") for ex, f in reading.refused.items()}
        runnable.append(task)
    return runnable


def _reference_specs(tasks: list, timeout: float) -> dict:
    """{chapter: (reference_cell, kwargs, timeout)} for the exercises some learner ran."""
    wanted: dict[str, set] = {}
    for task in tasks:
        wanted.setdefault(task.cell.chapter, set()).update(task.cell.exercises)
    return {ch: (sandbox.reference_cell, {"setup": notebooks.setup_for(ch), "names": sorted(names)},
                 max(4 * timeout, 300.0)) for ch, names in wanted.items()}


def _run_and_judge(tasks: list, decided: dict, timeout: float, jobs, salt: int | None) -> None:
    """Run the reference checks and the learners' chapters; judge every cell's data here."""
    refs = _reference_specs(tasks, timeout)
    salt = {"COURSE_CHECK_SALT": str(secrets.randbelow(2**31) if salt is None else int(salt))}
    outcomes, cells = runner.run(tasks, list(refs.values()), timeout, jobs, salt)
    references = {}
    for (_, kwargs, _), (status, value) in zip(refs.values(), outcomes):
        if status == "ok":
            references.update(sandbox.references_from(kwargs["names"], value))
    for task in tasks:
        value = cells.get(task.key, Result("error", "这个单元没有运行（评分器的问题，请告诉老师）"))
        if isinstance(value, Result):
            decided[task.who].update({ex: value for ex in task.cell.exercises})
        else:
            decided[task.who].update(sandbox.verdicts_from(task.cell.exercises, value, references,
                                                           timeout))
        decided[task.who].update(task.refused)


def grade(submissions_dir, out_csv=None, html=None, timeout: float = DEFAULT_TIMEOUT,
          jobs: int | None = None, course_dir=None, feedback=None,
          salt: int | None = None) -> Gradebook:
    """Grade every learner found in ``submissions_dir`` (see ``notebooks.find_learners``);
    write the CSV / HTML report and the per-learner feedback pages (``feedback``: a folder;
    default ``feedback/`` next to the CSV or HTML) when paths are given; return the
    :class:`Gradebook`. ``salt`` picks the checkers' hidden inputs (``COURSE_CHECK_SALT``);
    by default each call draws a new one, and a test fixes it so that a run repeats."""
    if not timeout or float(timeout) <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    course_dir = Path(course_dir or notebooks.COURSE_NOTEBOOKS)
    learners = notebooks.find_learners(Path(submissions_dir), course_dir)
    cells = notebooks.course_cells(course_dir)
    decided, tasks = _plan(learners, cells)
    _run_and_judge(_audited(tasks, decided), decided, float(timeout), jobs, salt)
    chapters = {ch: tuple(ex for cell in groups for ex in cell.exercises)
                for ch, groups in cells.items()}
    book = Gradebook(chapters, {who: {ex: decided[who][ex] for grp in chapters.values()
                                      for ex in grp} for who in learners})
    if out_csv:
        report.write_csv(book, out_csv)
    if html:
        report.write_html(book, html)
    if feedback is None and (out_csv or html):
        feedback = Path(out_csv or html).parent / "feedback"
    if feedback:
        report.write_feedback(book, feedback)
    return book
