"""``python -m course_lib.check --self-test``, one chapter per test so a failure names it.

The checkers run in subprocesses, never in the pytest process: they import MindSpore, and
chapter 11's imports mindnlp, which patches MindSpore process-wide. Chapter 11 gets a
subprocess of its own; the other sixteen share one (``--self-test`` over all of them, as an
instructor runs it: each subprocess costs ~3 s of imports), and each chapter's test reads
its exercises' "ok" / "FAIL" lines from that run. A chapter passes when every code checker
accepts its reference solution and rejects each of its wrong variants with that variant's
hint, and every number checker accepts its answer and rejects None / "42" / NaN without
raising.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = [f"ch{n:02d}" for n in range(0, 17)]
MIN_CODE = 2                  # code exercises required in each chapter 01–14


def _run(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), GLOG_v="3", COURSE_SCALE="ci",
               COURSE_HEADLESS="1", PYTHONHASHSEED="0")
    return subprocess.run([sys.executable, "-m", "course_lib.check", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def listing() -> dict[str, tuple[str, str]]:
    """name -> (kind, task) from ``--list`` (run once, in a subprocess)."""
    proc = _run("--list", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {}
    for line in proc.stdout.splitlines():
        name, kind, task = line.split("\t")
        rows[name] = (kind, task)
    return rows


def test_list_format(listing):
    assert listing, "--list printed nothing"
    for name, (kind, task) in listing.items():
        assert name.split(".")[0] in CHAPTERS, f"{name}: not chNN.<name>"
        assert kind in ("code", "number"), f"{name}: kind {kind!r}"
        assert task.strip(), f"{name}: empty task"


@pytest.mark.parametrize("chapter", CHAPTERS[1:15])
def test_chapter_has_code_exercises(chapter, listing):
    code = [n for n, (kind, _) in listing.items() if n.startswith(chapter + ".") and kind == "code"]
    assert len(code) >= MIN_CODE, f"{chapter} has {len(code)} code exercises ({code}); need >= {MIN_CODE}"


@pytest.fixture(scope="module")
def self_tests() -> dict[str, subprocess.CompletedProcess]:
    """chapter -> the ``--self-test`` run that covered it (ch11 alone, the rest together)."""
    shared = _run("--self-test", *[c for c in CHAPTERS if c != "ch11"], timeout=1800)
    return {c: _run("--self-test", c) if c == "ch11" else shared for c in CHAPTERS}


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_self_test(chapter, listing, self_tests):
    names = [n for n in listing if n.startswith(chapter + ".")]
    assert names, f"{chapter} registers no exercise"
    proc = self_tests[chapter]
    lines = proc.stdout.splitlines()
    failed = [n for n in names if f"FAIL {n}" in lines]
    passed = [n for n in names if f"ok   {n}" in lines]
    problems = [line for line in lines if line.startswith(tuple(names))]
    assert not failed and len(passed) == len(names), (
        f"{chapter} self-test: failed {failed}, not run {sorted(set(names) - set(passed) - set(failed))}\n"
        + "\n".join(problems)[-4000:] + "\n" + proc.stderr[-2000:])
    if chapter == "ch11":                    # its own run: it must also end cleanly
        assert proc.returncode == 0 and "exercises as expected" in proc.stdout, proc.stderr[-2000:]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_exercise_is_asked_in_its_notebook(chapter, listing):
    """Each registered exercise is called (``chNN.name(``) in a cell of notebook NN: code
    exercises from their scaffold cell, number exercises from the exercise cell."""
    import nbformat
    path = next((ROOT / "notebooks").glob(f"{chapter[2:]}_*.ipynb"))
    sources = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)
    missing = [n for n in listing if n.startswith(chapter + ".") and f"{n}(" not in sources]
    assert not missing, f"{path.name} never calls {missing}"

