"""In a notebook, a checker refuses what the gradebook marks "borrowed" (check/borrowing.py).

The cells run in an IPython shell in a child process, the way a Jupyter kernel runs them (the
running cell is the last entry of ``In``). Outside a kernel a checker grades whatever it is
given: the self-test passes the library's own solutions (tests/test_check_*.py do too).
"""
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

def _honest_prompt() -> str:
    """The right ``internlm_prompt`` of tests/learners/ch15.py (its definition only)."""
    sys.path.insert(0, str(ROOT / "tests"))
    import learners
    cell = next(code for key, code in learners.chapter("15").RIGHT.items() if "ch15.internlm_prompt" in key)
    tree = ast.parse(cell)
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "internlm_prompt")
    return "\n" + ast.get_source_segment(cell, node) + "\n"


HONEST = _honest_prompt()

CELLS = {
    "setup": "from course_lib.check import ch15\nfrom course_lib import conversation, memory\n"
             "from course_lib.internlm import internlm_7b\nlibrary_prompt = conversation.internlm_prompt",
    "library object": "ok = ch15.internlm_prompt(conversation.internlm_prompt)",
    "bound in an earlier cell": "ok = ch15.internlm_prompt(library_prompt)",
    "wrapped in the cell": "def mine(tokenizer, messages):\n"
                           "    return conversation.internlm_prompt(tokenizer, messages)\n"
                           "ok = ch15.internlm_prompt(mine)",
    "honest": HONEST + "ok = ch15.internlm_prompt(internlm_prompt)",
    "honest, with a cell the gradebook will not run": "import sys\n" + HONEST +
                                                      "ok = ch15.internlm_prompt(internlm_prompt)",
    "number from the library": "ok = ch15.peak_gib(round(memory.load_plan(internlm_7b(), 'bf16').host_peak / 2**30, 2))",
    "example call alone": "ch15.peak_gib(0)",
    "example call beside the answer": "ch15.peak_gib(0)\nok = ch15.peak_gib(15.54)\nch15.peak_gib(0)\n"
                                      "from course_lib.check.common import PASSED\nok = ok and 'ch15.peak_gib' in PASSED",
}

SCRIPT = '''
import contextlib, io, json, sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
cells = json.loads(sys.argv[1])
out = {}
for label, code in cells.items():
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        result = shell.run_cell(code, store_history=True)
    error = result.error_in_exec or result.error_before_exec
    out[label] = {"printed": buffer.getvalue(), "ok": bool(shell.user_ns.get("ok")),
                  "error": repr(error) if error else ""}
    shell.user_ns.pop("ok", None)
print("@@" + json.dumps(out, ensure_ascii=False))
'''


@pytest.fixture(scope="module")
def cells():
    env = {**os.environ, "GLOG_v": "3", "PYTHONPATH": str(ROOT)}
    env.pop("COURSE_GRADING", None)
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(CELLS)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    line = next((l for l in done.stdout.splitlines() if l.startswith("@@")), None)
    assert line, done.stdout[-2000:] + done.stderr[-4000:]
    return json.loads(line[2:])


@pytest.mark.parametrize("label", ["library object", "bound in an earlier cell", "wrapped in the cell",
                                   "number from the library"])
def test_a_borrowed_answer_fails_in_the_notebook_as_in_the_gradebook(cells, label):
    cell = cells[label]
    assert not cell["error"], cell
    assert not cell["ok"] and "成绩册记为“借用”" in cell["printed"] and "✅" not in cell["printed"], cell


def test_the_reason_names_what_was_borrowed(cells):
    assert "course_lib.conversation.internlm_prompt" in cells["library object"]["printed"]
    assert "课程库里现成的 course_lib.conversation.internlm_prompt" in cells["wrapped in the cell"]["printed"]
    assert "load_plan" in cells["number from the library"]["printed"]


def test_an_honest_answer_passes_and_a_refused_cell_is_announced(cells):
    assert cells["honest"]["ok"] and "✅" in cells["honest"]["printed"], cells["honest"]
    assert "⚠️" not in cells["honest"]["printed"] and "成绩册记为" not in cells["honest"]["printed"]
    warned = cells["honest, with a cell the gradebook will not run"]
    assert warned["ok"] and "✅" in warned["printed"], warned
    assert "⚠️ 成绩册不会运行这个单元" in warned["printed"] and "sys" in warned["printed"], warned


def test_the_example_call_counts_only_when_it_is_the_cells_only_call(cells):
    """The course's example call ``name(0)`` under a number exercise shows what a wrong answer
    looks like; left beside the learner's answer it is skipped (the gradebook drops it), so the
    pass stands."""
    alone = cells["example call alone"]["printed"]
    assert "❌" in alone and "⏭" not in alone
    beside = cells["example call beside the answer"]
    assert beside["ok"] and beside["printed"].count("⏭") == 2 and "❌" not in beside["printed"], beside


def test_outside_a_kernel_the_checker_grades_what_it_is_given():
    from course_lib import conversation
    from course_lib.check import ch15
    assert ch15.internlm_prompt(conversation.internlm_prompt)
