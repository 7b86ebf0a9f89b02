"""No answer is on screen before the exercise asks for it.

Code exercises: no stored output of the notebook (before the exercise, under its scaffold, or
in the cells below it, which a learner scrolls past), and no comment of the scaffold, shows a
line of the reference solution's code (``course_lib.check.leaks``: a run of 6 code tokens of the
solution that the scaffold itself does not show).

Number exercises:

For every registered number exercise ``chNN.exK`` the answer (from its registered solution,
computed in a subprocess: checker modules import MindSpore, chapter 11's imports mindnlp) is
rendered the usual ways — int with and without thousands separators, float at several
precisions, list/tuple/array printouts — and searched in every cell source and every text
output of notebook NN *before* the exercise cell: the first code cell that calls
``chNN.exK(`` (the answer slot, ``# chNN.exK(你的答案)`` included). A markdown cell or an
exercise list that merely names ``chNN.exK`` is not the exercise: a number printed between
the list and the answer slot (a sweep that prints the asked row) is a leak. Renderings with
fewer than 3 significant digits ("6", "0.2") are too common to mean anything and are skipped.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = {p.name[:2]: p for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}

_DUMP = r"""
import inspect, json, math, re, sys
import numpy as np
from course_lib.check import all_exercises
from course_lib.check.common import as_number, as_numbers, BadAnswer
exercises = all_exercises()
out = {"answers": {}, "errors": {}, "unregistered": [], "solutions": {}}
for name, ex in exercises.items():
    if ex.kind == "code":
        obj = ex.solution()
        target = obj if (inspect.isclass(obj) or inspect.isfunction(obj)) else ex.solution
        out["solutions"][name] = [inspect.getsource(target), list(ex.taught)]
        continue
    try:
        value = ex.solution()
    except Exception as err:
        out["errors"][name] = f"{type(err).__name__}: {err}"
        continue
    try:
        if isinstance(value, str):
            out["answers"][name] = value
        elif isinstance(value, (list, tuple)) or (hasattr(value, "shape") and len(value.shape) > 0):
            out["answers"][name] = as_numbers(value)
        else:
            out["answers"][name] = as_number(value)
    except BadAnswer:
        pass                    # not a number, a list of numbers or a string: nothing to search for
for modname in sorted({n.split(".")[0] for n in exercises} | {f"ch{i:02d}" for i in range(15)}):
    try:
        mod = sys.modules.get(f"course_lib.check.{modname}")
    except Exception:
        mod = None
    if mod is None:
        continue
    for fname, func in inspect.getmembers(mod, inspect.isfunction):
        if re.fullmatch(r"ex\d+", fname) and func.__module__ == mod.__name__ \
                and f"{modname}.{fname}" not in exercises:
            out["unregistered"].append(f"{modname}.{fname}")
print("JSON:" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def registry() -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), GLOG_v="3", COURSE_SCALE="ci",
               COURSE_HEADLESS="1", PYTHONHASHSEED="0")
    proc = subprocess.run([sys.executable, "-c", _DUMP], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("JSON:")][-1]
    return json.loads(line[5:])


def _digits(text: str) -> int:
    """Significant digits of a rendering: digits left after dropping signs and leading zeros."""
    return sum(c.isdigit() for c in text.lstrip("-+0.,"))


def _number_texts(v) -> set[str]:
    texts = set()
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) < 1e15):
        i = int(v)
        texts |= {str(i), f"{i:,}", f"{i}.0", f"{i:,}.0"}
    if isinstance(v, float):
        texts.add(repr(v))
        for n in range(1, 7):
            texts.add(f"{v:.{n}f}")
            texts.add(f"{v:.{n}g}")
            texts.add(f"{v:.{n}e}")
    return texts


MIN_DIGITS = 3                # fewer significant digits ("6.5", "24") occur by chance on any page


def _number_pattern(v) -> str | None:
    texts = sorted((t for t in _number_texts(v) if _digits(t) >= MIN_DIGITS), key=len, reverse=True)
    if not texts:
        return None
    return "(?:" + "|".join(re.escape(t) for t in texts) + ")"


def _element_pattern(v) -> str:
    texts = sorted(_number_texts(v) | {str(v)}, key=len, reverse=True)
    return "(?:" + "|".join(re.escape(t) for t in texts) + ")"


def answer_patterns(answer) -> list[re.Pattern]:
    """Regexes that find ``answer`` as a learner would see it printed or typed."""
    edge_l, edge_r = r"(?<![\w.])", r"(?!\.?\d)"
    if isinstance(answer, str):
        return [re.compile(re.escape(answer))] if len(answer) >= 4 else []
    if isinstance(answer, list):
        if sum(_digits(str(x)) for x in answer) < MIN_DIGITS:
            return []
        sep = r"[\s,]+"
        body = sep.join(_element_pattern(x) for x in answer)
        return [re.compile(edge_l + body + edge_r)]
    pat = _number_pattern(answer)
    return [re.compile(edge_l + pat + edge_r)] if pat else []


# A question states its own inputs; where an input renders like the answer, the phrase of the
# question that holds it is not a leak (the exact phrase: the same number anywhere else is).
QUESTION_INPUTS = {
    "ch00.ex3": ['tok.encode("我爱北京天安门")'],        # the text to round-trip is the answer
    "ch13.ex3": ["betas=(0.9, 0.999)"],                 # beta2 = 0.999 is the answer to 3 digits
}


def _cell_texts(cell) -> list[tuple[str, str]]:
    texts = [("source", cell.source)]
    for out in cell.get("outputs", []):
        if "text" in out:
            texts.append(("output", out["text"]))
        for mime in ("text/plain", "text/html", "text/markdown"):
            data = out.get("data", {}).get(mime)
            if data:
                texts.append(("output", data if isinstance(data, str) else "".join(data)))
    return texts


def exercise_cell(nb, name: str) -> int | None:
    """Index of the first code cell that calls the checker ``name`` (None: never called)."""
    chapter, func = name.split(".")
    call = re.compile(rf"\b{chapter}\.{func}\s*\(")
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and call.search(cell.source):
            return i
    return None


def _before(nb, stop: int):
    """(cell index, where, text) of everything on screen before the learner answers: every
    cell before the exercise cell, and the exercise cell's stored output (what its scaffold
    and the course's example calls print)."""
    for i, cell in enumerate(nb.cells[:stop + 1]):
        for where, text in _cell_texts(cell):
            if i < stop or where == "output":
                yield i, where, text


def leaks(nb, name: str, answer) -> list[str]:
    """Where ``answer`` shows up before the exercise cell of ``name`` (empty: nowhere)."""
    stop = exercise_cell(nb, name)
    assert stop is not None, f"{name} is never asked in its notebook"
    found = []
    for pattern in answer_patterns(answer):
        for i, where, text in _before(nb, stop):
            for phrase in QUESTION_INPUTS.get(name, ()):
                text = text.replace(phrase, " " * len(phrase))
            m = pattern.search(text)
            if m:
                found.append(f"cell {i} {where}: ...{text[max(0, m.start() - 40):m.end() + 20]!r}")
    return found


def _comments(source: str) -> str:
    return "\n".join(line.split("#", 1)[1] for line in source.splitlines() if "#" in line)


def code_leaks(nb, name: str, solution: str, taught=()) -> list[str]:
    """Where a line of ``solution`` (a code exercise's reference source) is on screen before
    the learner tries: in ANY stored output of the notebook (a stored notebook shows the cells
    below the exercise too: the library's listing under it waits for a pass,
    ``check.source_after``), or in a comment of the scaffold."""
    from course_lib.check import leaks as scan
    stop = exercise_cell(nb, name)
    assert stop is not None, f"{name} is never asked in its notebook"
    runs = scan.solution_runs(solution, nb.cells[stop].source, taught)
    texts = [(i, where, text) for i, cell in enumerate(nb.cells)
             for where, text in _cell_texts(cell) if where == "output"]
    texts.append((stop, "scaffold comment", _comments(nb.cells[stop].source)))
    found = []
    for i, where, text in texts:
        shown = scan.shows_code(text, runs)
        if shown:
            found.append(f"cell {i} {where}: {shown!r}")
    return found


@pytest.mark.parametrize("nn", sorted(NOTEBOOKS))
def test_no_solution_code_before_its_exercise(nn, registry):
    chapter = f"ch{nn}"
    nb = nbformat.read(NOTEBOOKS[nn], as_version=4)
    problems = {name: found for name, (source, taught) in registry["solutions"].items()
                if name.startswith(chapter + ".") and (found := code_leaks(nb, name, source, taught))}
    assert not problems, "solution code on screen before its exercise:\n" + "\n".join(
        f"{n}: " + "; ".join(f) for n, f in problems.items())


@pytest.mark.parametrize("nn", sorted(NOTEBOOKS))
def test_no_answer_before_its_exercise(nn, registry):
    chapter = f"ch{nn}"
    errors = {n: e for n, e in registry["errors"].items() if n.startswith(chapter + ".")}
    assert not errors, f"could not compute the answers: {errors}"
    unregistered = [n for n in registry["unregistered"] if n.startswith(chapter + ".")]
    assert not unregistered, f"number checkers not registered with @exercise: {unregistered}"
    nb = nbformat.read(NOTEBOOKS[nn], as_version=4)
    problems = {}
    for name, answer in registry["answers"].items():
        if name.startswith(chapter + "."):
            found = leaks(nb, name, answer)
            if found:
                problems[name] = found
    assert not problems, "answers on screen before their exercise:\n" + "\n".join(
        f"{n} = {registry['answers'][n]!r}: " + "; ".join(f) for n, f in problems.items())


def test_the_scanner_finds_what_a_learner_would_see():
    """The scanner itself: it must find a printed answer and ignore look-alikes."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print(acc)"),
                nbformat.v4.new_code_cell("# 练习：ch99.ex1(你的答案)")]
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", text="acc = 0.5202\n")]
    assert leaks(nb, "ch99.ex1", 0.52023)                  # 4 decimals of the answer
    assert not leaks(nb, "ch99.ex1", 0.5203)
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", text="ppl 8000.0\n")]
    assert leaks(nb, "ch99.ex1", 8000) and leaks(nb, "ch99.ex1", 8000.0)
    assert not leaks(nb, "ch99.ex1", 800)                   # 800 inside 8000 is not 800
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", text="[0.1, 0.05, 0.025, 0.0125]\n")]
    assert leaks(nb, "ch99.ex1", [0.1, 0.05, 0.025, 0.0125])
    assert not leaks(nb, "ch99.ex1", 6)                     # too short to mean anything
    nb.cells[0].source = "x = 12,736 parameters"
    nb.cells[0].outputs = []
    assert leaks(nb, "ch99.ex1", 12736)


def test_the_exercise_is_the_cell_that_calls_the_checker():
    """An exercise list that names ``ch99.ex1`` early is not the exercise: a sweep printed
    between the list and the answer slot that shows the answer is a leak."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("1. r=4 时新增多少参数？用 `ch99.ex1(你的答案)` 检查。"),
                nbformat.v4.new_code_cell("for r in ranks: print(r, trainable[r])"),
                nbformat.v4.new_markdown_cell("## 练习\n例如 `ch99.ex1(你的答案)`。"),
                nbformat.v4.new_code_cell("from course_lib.check import ch99\n# ch99.ex1(你的答案)")]
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="r=4   trainable  19,712\n")]
    assert exercise_cell(nb, "ch99.ex1") == 3
    assert leaks(nb, "ch99.ex1", 19712) and leaks(nb, "ch99.ex1", 19712.0)
    assert not leaks(nb, "ch99.ex1", 14784)
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="betas=(0.9, 0.999)\n")]
    assert leaks(nb, "ch99.ex1", 0.99899)                   # only ch13.ex3's question is exempt
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="fraction 0.2291%\n")]
    assert leaks(nb, "ch99.ex1", 0.22912) and leaks(nb, "ch99.ex1", 0.229124)


def test_a_library_listing_waits_for_a_pass(capsys):
    """``check.source_after``: the library's version of an exercise is printed only after the
    learner's answer passed its checker in this process; the untouched scaffold
    (NotImplementedError) and a wrong attempt leave only the line that says when (and how to
    see the reference solution instead)."""
    from mindspore import nn
    from course_lib import layers
    from course_lib.check import ch06, common, source_after
    from course_lib.solutions.ch06 import RMSNorm as Right
    common.PASSED.discard("ch06.rms_norm")

    class Untouched(nn.Cell):                           # as the notebook's scaffold
        def __init__(self, hidden_size, eps=1e-6):
            super().__init__()
            raise NotImplementedError

    class Identity(nn.Cell):
        def __init__(self, hidden_size, eps=1e-6):
            super().__init__()

        def construct(self, x):
            return x

    source_after("ch06.rms_norm", layers.RMSNorm)
    assert "⏳" in capsys.readouterr().out
    for attempt in (Untouched, Identity):               # not tried yet; tried, but wrong
        ch06.rms_norm(attempt)
        capsys.readouterr()
        source_after("ch06.rms_norm", layers.RMSNorm)
        out = capsys.readouterr().out
        assert "class RMSNorm" not in out and "⏳" in out and 'show_solution("ch06.rms_norm")' in out
    assert ch06.rms_norm(Right)
    capsys.readouterr()
    source_after("ch06.rms_norm", layers.RMSNorm)
    assert "class RMSNorm" in capsys.readouterr().out


def test_a_worked_example_waits_for_a_pass(capsys):
    """``check.after_pass``: chapter 06's printed slope exponents (the rule applied to 20
    and 40 heads) appear only after the learner's ALiBi answer passed, not after a wrong one."""
    from course_lib import layers
    from course_lib.check import after_pass, ch06, common
    common.PASSED.discard("ch06.alibi_slopes")
    shown = []
    after_pass("ch06.alibi_slopes", lambda: shown.append(1))
    assert not shown and "⏳" in capsys.readouterr().out
    ch06.alibi_slopes(lambda n: [0.5] * n)                # wrong: still nothing
    after_pass("ch06.alibi_slopes", lambda: shown.append(1))
    assert not shown
    ch06.alibi_slopes(lambda n: list(layers.alibi_slopes(n)))   # right (outside a kernel)
    after_pass("ch06.alibi_slopes", lambda: shown.append(1))
    assert shown == [1]
    with pytest.raises(KeyError):
        after_pass("ch06.no_such_exercise", print)


def test_the_cells_below_build_with_yours_once_it_passes(capsys, monkeypatch):
    """``check.yours_or_reference``: the library's version until the learner's latest checked
    attempt passed in this kernel, then the learner's; a later wrong attempt switches back; in
    the gradebook's learner process (``COURSE_GRADING=1``) always the library's."""
    from course_lib.check import ch06, common, yours_or_reference
    from course_lib.solutions import ch06 as sol
    common.PASSED.discard("ch06.alibi_slopes")

    def mine(n):
        return sol.alibi_slopes(n)

    def wrong(n):
        return sol.wrong_alibi_naive(n)
    assert yours_or_reference("ch06.alibi_slopes", mine, sol.wrong_alibi_from_zero) is sol.wrong_alibi_from_zero
    assert "course_lib.solutions.ch06.wrong_alibi_from_zero" in capsys.readouterr().out
    ch06.alibi_slopes(wrong)
    assert yours_or_reference("ch06.alibi_slopes", mine, wrong) is wrong
    ch06.alibi_slopes(mine)
    capsys.readouterr()
    assert yours_or_reference("ch06.alibi_slopes", mine, wrong) is mine
    assert "你的 mine" in capsys.readouterr().out
    monkeypatch.setenv("COURSE_GRADING", "1")
    assert yours_or_reference("ch06.alibi_slopes", mine, wrong) is wrong
    monkeypatch.delenv("COURSE_GRADING")
    ch06.alibi_slopes(wrong)                              # the latest attempt decides
    assert yours_or_reference("ch06.alibi_slopes", mine, wrong) is wrong
    with pytest.raises(KeyError):
        yours_or_reference("ch06.no_such_exercise", mine, wrong)
