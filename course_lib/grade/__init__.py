"""Grade a class: a folder of learners' notebooks -> a gradebook (CSV, HTML, a summary).

    from course_lib.grade import grade
    book = grade("submissions/", out_csv="gradebook.csv", html="report.html")
    book.verdicts()        # {"alice": {"ch03.shift_for_lm": "pass", ...}, ...}

or ``python -m course_lib.grade SUBMISSIONS_DIR [--out gradebook.csv] [--html report.html]``.
Every exercise cell a learner changed runs in its own fresh process (``grade.sandbox``)
against the checker the notebook calls; an untouched scaffold, a missing cell or a missing
notebook is "not attempted" without running anything. Verdicts: pass / fail / not attempted
/ error / timeout, each with the checker's hint (see docs/instructors.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import notebooks, report, sandbox
from .sandbox import VERDICTS, Result

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
    """Verdicts that need no process (missing, unreadable, untouched), and the cells to run."""
    decided: dict[str, dict[str, Result]] = {}
    tasks: list = []                              # (learner, ExerciseCell, code)
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
                    tasks.append((who, cell, code))
                    continue
                else:
                    outcome = problem
                decided[who].update({ex: outcome for ex in cell.exercises})
    return decided, tasks


def grade(submissions_dir, out_csv=None, html=None, timeout: float = DEFAULT_TIMEOUT,
          jobs: int | None = None, course_dir=None) -> Gradebook:
    """Grade every learner found in ``submissions_dir`` (see ``notebooks.find_learners``);
    write the CSV / HTML report when paths are given; return the :class:`Gradebook`."""
    if not timeout or float(timeout) <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    course_dir = Path(course_dir or notebooks.COURSE_NOTEBOOKS)
    learners = notebooks.find_learners(Path(submissions_dir), course_dir)
    cells = notebooks.course_cells(course_dir)
    decided, tasks = _plan(learners, cells)
    ran = sandbox.run_all([(cell, code) for _, cell, code in tasks], float(timeout), jobs)
    for (who, _, _), verdicts in zip(tasks, ran):
        decided[who].update(verdicts)
    chapters = {ch: tuple(ex for cell in groups for ex in cell.exercises)
                for ch, groups in cells.items()}
    book = Gradebook(chapters, {who: {ex: decided[who][ex] for grp in chapters.values()
                                      for ex in grp} for who in learners})
    if out_csv:
        report.write_csv(book, out_csv)
    if html:
        report.write_html(book, html)
    return book
