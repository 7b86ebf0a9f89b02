"""course_lib.grade on a synthetic class built from the course's own notebooks.

Five learners hand in copies of notebooks 00, 03 and 05: ``ben`` the reference solutions
(from course_lib.solutions), ``cat`` realistic wrong ones (the checkers' own wrong
variants), ``dan`` untouched scaffolds, ``ann`` a hostile set (an infinite loop, megabytes of
output, a raise, ``import mindnlp`` plus deleting every file in its cwd, a notebook that is
not JSON) and ``eve <&>`` only part of one chapter, in a nested folder. The gradebook must
equal the expected verdicts exactly, and grading must leave this process as it was.
"""
import csv
import html
import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from course_lib import grade as grading
from course_lib.grade import notebooks, report
from course_lib.grade.sandbox import Result
from course_lib.check import all_exercises

N_EXERCISES = len(all_exercises())     # every count of exercises derives from the registry
N_CHAPTERS = len(list((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb")))

ROOT = Path(__file__).resolve().parents[1]
COURSE = ROOT / "notebooks"
TIMEOUT = 45.0                         # per cell; the infinite loop costs exactly this
HOSTILE_SCRIPT = "<script>alert('x')</script>"


# --------------------------------------------------------------------------- building the class
def _course(chapter: str) -> dict:
    return notebooks.read_notebook(next(COURSE.glob(f"{chapter}_*.ipynb")))


def _edited(chapter: str, sources: dict) -> dict:
    """The course's notebook with the exercise cells named in ``sources`` replaced."""
    nb = _course(chapter)
    for cell in nb["cells"]:
        key = notebooks.cell_exercises(cell)
        key = key[0] if len(key) == 1 else key
        if key in sources:
            cell["source"] = sources[key]
    return nb


def _solution(module, name: str, as_name: str | None = None) -> str:
    src = inspect.getsource(getattr(module, name))
    return src.replace(f"def {name}(", f"def {as_name or name}(", 1)


def _save(folder: Path, chapter: str, nb) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    name = next(COURSE.glob(f"{chapter}_*.ipynb")).name
    text = nb if isinstance(nb, str) else json.dumps(nb, ensure_ascii=False, indent=1)
    (folder / name).write_text(text, encoding="utf-8")


def _answers_00() -> str:
    from course_lib.tokenizer import load_tokenizer
    tok = load_tokenizer()
    return (f"ch00.ex1({len(tok.encode('深度学习'))})\nch00.ex2({len(tok.encode('🚀'))})\n"
            "from course_lib import data\n"
            "ch00.ex3(sum(ids.count(tok.encode('的')[0]) for ids in tok.encode_batch(data.news_splits().validation)))\n"
            "ch00.ex1(0)   # what a wrong answer looks like: a hint instead of the solution\n")


def _reference(folder: Path) -> None:
    from course_lib.solutions import ch03, ch05
    _save(folder, "00", _edited("00", {("ch00.ex1", "ch00.ex2", "ch00.ex3"): _answers_00()}))
    _save(folder, "03", _edited("03", {
        "ch03.shift_for_lm": _solution(ch03, "shift_for_lm") + "\nch03.shift_for_lm(shift_for_lm)\n",
        "ch03.truncate_pad": _solution(ch03, "truncate_pad") + "\nch03.truncate_pad(truncate_pad)\n",
        ("ch03.ex1", "ch03.ex2", "ch03.ex3"): "ch03.ex1(24)\n"}))
    _save(folder, "05", _edited("05", {
        "ch05.warmup_cosine": "import math\n" + _solution(ch05, "warmup_cosine")
                              + "\nch05.warmup_cosine(warmup_cosine)\n",
        "ch05.clipped_train_step": _solution(ch05, "train_step")
                                   + "\nch05.clipped_train_step(train_step)\n",
        ("ch05.ex1", "ch05.ex2", "ch05.ex3", "ch05.ex4"):
            "import math\nch05.ex2(params_decayed)   # a name never defined: only ex2 is lost\n"
            "ch05.ex1(math.exp(3.5))\nch05.ex4([13.0, 3 / 13])\n"}))


def _wrong(folder: Path) -> None:
    from course_lib.solutions import ch03, ch05
    folder.mkdir(parents=True)
    shutil.copy(next(COURSE.glob("00_*.ipynb")), folder)           # 00 untouched
    off_by_one = _solution(ch05, "warmup_cosine").replace("(i + 1) / warmup_steps",
                                                          "i / warmup_steps")
    assert "i / warmup_steps" in off_by_one
    _save(folder, "03", _edited("03", {       # labels shifted the wrong way; keeps the end
        "ch03.shift_for_lm": _solution(ch03, "wrong_shift_reversed", "shift_for_lm")
                             + "\nch03.shift_for_lm(shift_for_lm)\n",
        "ch03.truncate_pad": _solution(ch03, "wrong_pad_keeps_end", "truncate_pad")
                             + "\nch03.truncate_pad(truncate_pad)\n",
        ("ch03.ex1", "ch03.ex2", "ch03.ex3"):
            "ch03.ex1(13)\nch03.ex1(26)   # what a wrong answer looks like: a hint instead of the solution\n"}))
    _save(folder, "05", _edited("05", {       # warm-up off by one: the first step gets lr 0
        "ch05.warmup_cosine": "import math\n" + off_by_one + "\nch05.warmup_cosine(warmup_cosine)\n",
        ("ch05.ex1", "ch05.ex2", "ch05.ex3", "ch05.ex4"): "ch05.ex4(1.0)\n"}))


def _scaffolds(folder: Path) -> None:
    folder.mkdir(parents=True)
    for chapter in ("00", "03", "05"):
        shutil.copy(next(COURSE.glob(f"{chapter}_*.ipynb")), folder)


DELETE_CWD = ("for name in os.listdir('.'):\n"
              "    if os.path.isfile(name):\n"
              "        os.remove(name)\n")


def _hostile(folder: Path) -> None:
    from course_lib.solutions import ch03, ch05
    _save(folder, "00", '{"cells": [{"cell_type": "code", "source": "ch00.ex1(5)"')   # cut off
    _save(folder, "03", _edited("03", {
        "ch03.shift_for_lm": _solution(ch03, "shift_for_lm") + "\nwhile True:\n    pass\n"
                             "ch03.shift_for_lm(shift_for_lm)\n",
        "ch03.truncate_pad": _solution(ch03, "truncate_pad") + "\nfor _ in range(3):\n"
                             "    print('x' * 2_000_000)\nch03.truncate_pad(truncate_pad)\n",
        ("ch03.ex1", "ch03.ex2", "ch03.ex3"): f"raise RuntimeError({HOSTILE_SCRIPT!r})\n"}))
    _save(folder, "05", _edited("05", {
        "ch05.warmup_cosine": "import mindnlp\nimport math\n" + DELETE_CWD
                              + _solution(ch05, "warmup_cosine")
                              + "\nch05.warmup_cosine(warmup_cosine)\n"}))


def _partial(folder: Path) -> None:
    from course_lib.solutions import ch03
    _save(folder / "work", "03", _edited("03", {
        "ch03.shift_for_lm": _solution(ch03, "shift_for_lm") + "\nch03.shift_for_lm(shift_for_lm)\n"}))


LEARNERS = {"ann": _hostile, "ben": _reference, "cat": _wrong, "dan": _scaffolds,
            "eve <&>": _partial}

NA, P, F, E, T = "not attempted", "pass", "fail", "error", "timeout"
EXPECTED = {   # chapters 00, 03, 05; every other exercise of the course: not attempted
    "ann": {"ch00.ex1": E, "ch00.ex2": E, "ch00.ex3": E,
            "ch03.shift_for_lm": T, "ch03.truncate_pad": P,
            "ch03.ex1": E, "ch03.ex2": E, "ch03.ex3": E,
            "ch05.warmup_cosine": P, "ch05.clipped_train_step": NA,
            "ch05.ex1": NA, "ch05.ex2": NA, "ch05.ex3": NA, "ch05.ex4": NA},
    "ben": {"ch00.ex1": P, "ch00.ex2": P, "ch00.ex3": P,
            "ch03.shift_for_lm": P, "ch03.truncate_pad": P,
            "ch03.ex1": P, "ch03.ex2": NA, "ch03.ex3": NA,
            "ch05.warmup_cosine": P, "ch05.clipped_train_step": P,
            "ch05.ex1": P, "ch05.ex2": E, "ch05.ex3": NA, "ch05.ex4": P},
    "cat": {"ch00.ex1": NA, "ch00.ex2": NA, "ch00.ex3": NA,
            "ch03.shift_for_lm": F, "ch03.truncate_pad": F,
            "ch03.ex1": F, "ch03.ex2": NA, "ch03.ex3": NA,
            "ch05.warmup_cosine": F, "ch05.clipped_train_step": NA,
            "ch05.ex1": NA, "ch05.ex2": NA, "ch05.ex3": NA, "ch05.ex4": F},
    "dan": {name: NA for name in ("ch00.ex1", "ch00.ex2", "ch00.ex3", "ch03.shift_for_lm",
                                  "ch03.truncate_pad", "ch03.ex1", "ch03.ex2", "ch03.ex3",
                                  "ch05.warmup_cosine", "ch05.clipped_train_step",
                                  "ch05.ex1", "ch05.ex2", "ch05.ex3", "ch05.ex4")},
    "eve <&>": {"ch00.ex1": NA, "ch00.ex2": NA, "ch00.ex3": NA,
                "ch03.shift_for_lm": P, "ch03.truncate_pad": NA,
                "ch03.ex1": NA, "ch03.ex2": NA, "ch03.ex3": NA,
                "ch05.warmup_cosine": NA, "ch05.clipped_train_step": NA,
                "ch05.ex1": NA, "ch05.ex2": NA, "ch05.ex3": NA, "ch05.ex4": NA},
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade the class once, from a cwd holding a file the hostile learner would delete."""
    import time
    root = tmp_path_factory.mktemp("class")
    for name, build in LEARNERS.items():
        build(root / "submissions" / name)
    here = root / "grader"
    here.mkdir()
    (here / "keep.txt").write_text("the grader's own file")
    before, start = os.getcwd(), time.monotonic()
    os.chdir(here)
    try:
        book = grading.grade(root / "submissions", out_csv=root / "gradebook.csv",
                             html=root / "report.html", timeout=TIMEOUT)
    finally:
        os.chdir(before)
    return {"book": book, "root": root, "seconds": time.monotonic() - start}


def test_the_gradebook_equals_the_expected_verdicts(graded):
    book = graded["book"]
    assert book.learners == list(EXPECTED)
    got = {who: {ex: v for ex, v in verdicts.items() if ex[2:4] in ("00", "03", "05")}
           for who, verdicts in book.verdicts().items()}
    assert got == EXPECTED
    rest = {(who, ex, v) for who, verdicts in book.verdicts().items()
            for ex, v in verdicts.items() if ex[2:4] not in ("00", "03", "05") and v != NA}
    assert not rest
    assert len(book.exercises) == N_EXERCISES and graded["seconds"] < 120, graded["seconds"]


def test_each_verdict_carries_the_checkers_hint(graded):
    res = graded["book"].results
    assert "反了" in res["cat"]["ch03.shift_for_lm"].hint            # labels shifted backwards
    assert "结尾" in res["cat"]["ch03.truncate_pad"].hint            # kept the end
    assert "第一步" in res["cat"]["ch05.warmup_cosine"].hint         # warm-up off by one
    assert "drop_remainder" in res["cat"]["ch03.ex1"].hint
    assert res["ann"]["ch03.shift_for_lm"].hint.startswith(f"超过 {TIMEOUT:g} 秒")
    assert res["ann"]["ch03.ex1"].hint == f"RuntimeError: {HOSTILE_SCRIPT}（第 1 行）"
    assert "不是有效的笔记本" in res["ann"]["ch00.ex1"].hint
    assert res["dan"]["ch03.shift_for_lm"] == Result(NA, "练习单元还是原来的脚手架")
    assert res["eve <&>"]["ch05.ex1"] == Result(NA, "没有交第 05 章的笔记本")
    assert res["ben"]["ch00.ex1"] == Result(P)      # the course's example call ch00.ex1(0) left in
    assert res["ben"]["ch05.ex2"].hint.startswith("NameError: name 'params_decayed'")  # its own line only


def test_summary_and_csv(graded):
    book, root = graded["book"], graded["root"]
    assert book.chapters_complete("ben") == ["00"] and book.passed("ben") == 10
    assert book.summary_lines()[1] == f"ben: 通过 10/{N_EXERCISES} 个练习；完成的章节 1/{N_CHAPTERS}（00）"
    with open(root / "gradebook.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["learner", "passed", "total", "chapters_complete", *book.exercises]
    assert [r[0] for r in rows[1:]] == list(EXPECTED)
    for row in rows[1:]:
        assert dict(zip(book.exercises, row[4:])) == book.verdicts()[row[0]]
        assert row[1:4] == [str(book.passed(row[0])), str(N_EXERCISES),
                            " ".join(book.chapters_complete(row[0]))]


def test_the_grader_itself_is_untouched(graded):
    """Learner code never ran here: no mindnlp, the cwd's file survived, the folders too."""
    assert "mindnlp" not in sys.modules and "mindtorch" not in sys.modules
    assert (graded["root"] / "grader" / "keep.txt").read_text() == "the grader's own file"
    assert (graded["root"] / "submissions" / "ann" / "05_llm_trainer.ipynb").exists()


# --------------------------------------------------------------------------- the HTML report
def _browser() -> str:
    """A headless Chromium; under CI its absence is a failure (``make browser`` installs it)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    if os.environ.get("CI"):
        pytest.fail("no headless Chromium for the HTML report test: run `make browser`")
    pytest.skip("no headless Chromium (make browser installs it)")


def _chromium(browser: str, *args: str) -> str:
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_html_report_opens_in_headless_chromium_and_lists_every_learner(graded):
    browser, page = _browser(), graded["root"] / "report.html"
    dom = _chromium(browser, "--dump-dom", page.as_uri())
    for who in EXPECTED:
        assert f'<td class="who">{html.escape(who, quote=False)}</td>' in dom, who
    assert dom.count('class="learner"') == len(EXPECTED)
    assert dom.count('data-verdict="timeout"') == 1 and "<script" not in dom   # escaped hint
    assert dom.count('class="bar"') == N_CHAPTERS + len(EXPECTED)    # one per chapter + per learner
    shot = graded["root"] / "report.png"
    _chromium(browser, f"--screenshot={shot}", "--window-size=1600,1000", page.as_uri())
    assert shot.stat().st_size > 10_000
    keep = os.environ.get("COURSE_GRADE_SCREENSHOT")       # to look at it: set a path
    if keep:
        shutil.copy(shot, keep)


def test_learner_text_is_escaped_in_the_html():
    book = grading.Gradebook({"03": ("ch03.ex1",)},
                             {"<img src=x onerror=alert(1)>": {"ch03.ex1": Result(E, '"><script>x</script>')}})
    page = report.render_html(book)
    assert "<script>x" not in page and "<img" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "&quot;&gt;&lt;script&gt;" in page


# --------------------------------------------------------------------------- inputs and the CLI
def test_clear_errors_for_bad_submission_folders(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        grading.grade(tmp_path / "missing")
    (tmp_path / "a.txt").write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file"):
        grading.grade(tmp_path / "a.txt")
    (tmp_path / "learner").mkdir()
    (tmp_path / "learner" / "notes.ipynb").write_text("{}")
    with pytest.raises(ValueError, match="No notebooks found"):
        grading.grade(tmp_path)
    with pytest.raises(ValueError, match="timeout"):
        grading.grade(tmp_path, timeout=0)


def test_odd_but_valid_json_is_read_without_crashing_the_grader():
    odd = {"cells": [1, {"cell_type": "code", "source": [1, None], "metadata": []},
                     {"cell_type": "code", "source": "x", "metadata": {"course": {"exercise": 3}}}]}
    assert notebooks.find_cell(odd, ("ch03.ex1",)) is None
    assert notebooks.cell_source(odd["cells"][1]) == "1None"


def test_a_folder_of_notebooks_is_one_learner_and_the_cli_prints_a_summary(tmp_path):
    """``python -m course_lib.grade notebooks/``: a learner grading their own folder."""
    mine = tmp_path / "my notebooks"
    mine.mkdir()
    for chapter in ("00", "03"):
        shutil.copy(next(COURSE.glob(f"{chapter}_*.ipynb")), mine)
    assert list(notebooks.find_learners(mine)) == ["my notebooks"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "course_lib.grade", str(mine), "--out",
                           str(tmp_path / "g.csv")], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[0] == f"my notebooks: 通过 0/{N_EXERCISES} 个练习；完成的章节 0/{N_CHAPTERS}"
    assert (tmp_path / "g.csv").read_text(encoding="utf-8").count("not attempted") == N_EXERCISES
    bad = subprocess.run([sys.executable, "-m", "course_lib.grade", str(tmp_path / "nope")],
                         capture_output=True, text=True, env=env, timeout=300)
    assert bad.returncode == 2 and "does not exist" in bad.stderr


# --------------------------------------------------------------------------- the marks
def test_every_exercise_has_exactly_one_cell_in_the_course():
    from course_lib.check import all_exercises
    listed = [ex for groups in notebooks.EXERCISE_CELLS.values() for g in groups for ex in g]
    assert sorted(listed) == sorted(all_exercises()) and len(listed) == len(set(listed))
    cells = notebooks.course_cells()
    assert [ex for ch in cells.values() for c in ch for ex in c.exercises] == listed
    assert cells["03"][0].calls == {"ch03.shift_for_lm": "ch03.shift_for_lm(shift_for_lm)"}
    assert cells["05"][2].examples == ("ch05.ex1(0)",)


@pytest.mark.parametrize("path", sorted(COURSE.glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.stem)
def test_mark_exercises_is_idempotent_and_changes_metadata_only(path):
    sys.path.insert(0, str(ROOT / "tools"))
    import mark_exercises
    text = path.read_text(encoding="utf-8")
    once = mark_exercises.dumps(mark_exercises.mark(json.loads(text), path.name[:2]))
    assert mark_exercises.dumps(mark_exercises.mark(json.loads(once), path.name[:2])) == once
    before, after = json.loads(text), json.loads(once)
    strip = [{k: v for k, v in c.items() if k != "metadata"} for c in before["cells"]]
    assert strip == [{k: v for k, v in c.items() if k != "metadata"} for c in after["cells"]]
    for old, new in zip(before["cells"], after["cells"]):
        assert new["metadata"].get("course", {}).get("source_sha1") == \
            old["metadata"].get("course", {}).get("source_sha1")
    assert once == text, f"run: python tools/mark_exercises.py {path.relative_to(ROOT)}"


def test_recording_a_notebook_keeps_the_exercise_marks():
    import nbformat
    sys.path.insert(0, str(ROOT / "tools"))
    from nbexec import source_sha1, stamp_record
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("ch03.ex1(24)")])
    nb.cells[0].metadata["course"] = {"exercise": ["ch03.ex1"], "source_sha1": "stale"}
    nb.metadata["course"] = {"scale": "ci", "other": 1}
    stamped = stamp_record(nb, "full")
    assert stamped.cells[0].metadata["course"] == {"exercise": ["ch03.ex1"],
                                                   "source_sha1": source_sha1("ch03.ex1(24)")}
    assert stamped.metadata["course"] == {"scale": "full", "other": 1}


def test_the_courses_example_calls_are_dropped_and_line_numbers_kept():
    src = "x = 1\nch01.ex1(0)   # example\nch01.ex1(x)\n"
    assert notebooks.without_examples(src, ("ch01.ex1(0)",)) == "x = 1\n\nch01.ex1(x)\n"
    assert notebooks.without_examples("y = 2; ch01.ex1(0)\n", ("ch01.ex1(0)",)) == \
        "y = 2; ch01.ex1(0)\n"
    assert notebooks.untouched("a = 1   \n\n", "a = 1") and not notebooks.untouched("a = 2", "a = 1")
    for hostile in ("-" * 1_000_000 + "1", "(" * 200_000, "ch01.ex1(0)\n\x00"):   # parsing fails
        assert notebooks.without_examples(hostile, ("ch01.ex1(0)",)) == hostile


def test_raw_output_below_python_cannot_fill_the_disk():
    """100 MiB written straight to fd 2 (past sys.stderr's cap) stops at MAX_FILE_BYTES: the
    cell gets an error verdict naming the limit, and the grader carries on."""
    from course_lib.grade import sandbox
    cell = next(c for c in notebooks.course_cells()["03"] if c.exercises == ("ch03.truncate_pad",))
    flood = "import os\nfor _ in range(100):\n    os.write(2, b'x' * 2**20)\n"
    [(status, child)] = sandbox.run_all([(sandbox.run_cell, {"setup": cell.setup, "code": flood,
                                                             "calls": cell.calls})], timeout=120)
    assert status == "ok" and "File too large" in child["errors"][0]["error"], (status, child)
    assert sandbox.MAX_FILE_BYTES < 100 * 2**20
