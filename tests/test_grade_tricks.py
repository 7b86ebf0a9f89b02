"""A class of learners who want a pass without the work: none of them gets one.

Each learner hands in notebook 06 whose ``ch06.rms_norm`` cell holds a WRONG RMSNorm (it
subtracts the mean) plus one trick read off the open checker and grader code, or no RMSNorm
of their own at all but the library's or the reference's. Controls: the same wrong RMSNorm
without a trick fails, and an honest learner who typed the same lines as the reference
passes. The verdict is computed in the grader's process from data (grade/judge.py); cells
that reach for the grading machinery or the answer do not run (grade/audit.py). The second
test bypasses the reader and runs the tricks that tamper with the learner's process through
the sandbox directly: the data judged here still refuses every one.
"""
import inspect
import json
from pathlib import Path

import pytest

from course_lib import grade as grading
from course_lib.grade import notebooks, sandbox

ROOT = Path(__file__).resolve().parents[1]
COURSE = ROOT / "notebooks"
EX = "ch06.rms_norm"

HEAD = "from mindspore import Parameter, nn, ops\nimport mindspore as ms\nfrom course_lib.check import ch06, show_solution\n\n"
WRONG = HEAD + '''
class MyRMSNorm(nn.Cell):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = Parameter(ops.ones(hidden_size, ms.float32), name="weight")

    def construct(self, x):
        x = x - x.mean(-1, keep_dims=True)                 # the LayerNorm habit: wrong here
        return self.weight * x * ops.rsqrt((x * x).mean(-1, keep_dims=True) + self.eps)

'''
CALL = "\nch06.rms_norm(MyRMSNorm)\n"
FORGED_BEFORE = "{'records': [['ch06.rms_norm', True, '', True]], 'error': None, 'dropped': 0}"
FORGED = ("{'records': [{'exercise': 'ch06.rms_norm', 'passed': True, 'hint': '', 'attempted': True,"
          " 'observations': [], 'provenance': None}], 'error': None, 'dropped': 0}")

# trick name -> the code after the wrong RMSNorm (the checker call follows unless it exits)
TAMPERING = {
    "forge the recorder": "from course_lib.check import common\ncommon._record('ch06.rms_norm', True, '')\n",
    "patch verdict and run_code_check": (
        "from course_lib.check import common\nimport course_lib.check.ch06 as c6\n"
        "common.verdict = lambda ok, hint='', name='': True\n"
        "c6.run_code_check = lambda name, hint, body: common.verdict(True, name=name)\n"),
    "patch numpy, compare and compare_grads": (
        "import numpy\nfrom course_lib.check import common, cellcheck\n"
        "numpy.allclose = lambda *a, **k: True\ncommon.compare = lambda *a, **k: None\n"
        "cellcheck.compare_grads = lambda *a, **k: None\n"),
    "replace Mismatch": "from course_lib.check import common\ncommon.Mismatch = type('Other', (Exception,), {})\n",
    "write the result file and exit 0": (
        "import sys, json, os\nch06.rms_norm(MyRMSNorm)\n"
        f"json.dump({FORGED}, open(sys.argv[-1], 'w'))\nos._exit(0)\n"),
    "write the result file as the grader used to read it": (
        "import sys, json, os\nch06.rms_norm(MyRMSNorm)\n"
        f"json.dump({FORGED_BEFORE}, open(sys.argv[-1], 'w'))\nos._exit(0)\n"),
    "exit 0 early": "import os\nos._exit(0)\n",
    "obfuscated import of the recorder": (
        "m = __import__('course_lib.check.common', fromlist=['x'])\nm._record('ch06.rms_norm', True, '')\n"),
    "copy the library's value into the observation": (
        "from course_lib.check import common\n_observe = common.observe\n"
        "common.observe = lambda what, got, want=None, **k: _observe(what, got if want is None else want, want, **k)\n"),
}
OTHERS = {
    "print a fake pass": "print('[ch06.rms_norm] ✅ 正确！')\n",
    "import the solution": "from course_lib.solutions.ch06 import RMSNorm as MyRMSNorm\n",
    "show_solution and exec it": (
        "import io, contextlib\nbuf = io.StringIO()\nwith contextlib.redirect_stdout(buf):\n"
        "    show_solution('ch06.rms_norm')\nns = {}\n"
        "exec('from mindspore import Parameter, nn, ops\\nimport mindspore as ms\\n' + buf.getvalue(), ns)\n"
        "MyRMSNorm = ns['RMSNorm']\n"),
    "subclass the library's class": "from course_lib import layers\n\nclass MyRMSNorm(layers.RMSNorm):\n    pass\n",
    "take the library's class by another path": "MyRMSNorm = cl.layers.RMSNorm\n",
}
TRICKS = {**TAMPERING, **OTHERS}


def _honest() -> str:
    from course_lib.solutions import ch06
    source = inspect.getsource(ch06.RMSNorm).replace("class RMSNorm(", "class MyRMSNorm(", 1)
    return HEAD + source + CALL


def _cells() -> dict:
    learners = {"honest": _honest(), "wrong": WRONG + CALL}
    for i, (name, code) in enumerate(TRICKS.items()):
        learners[f"trick{i:02d}"] = WRONG + code + ("" if "_exit" in code else CALL)
    return learners


def _notebook(code: str) -> str:
    nb = notebooks.read_notebook(next(COURSE.glob("06_*.ipynb")))
    cell = notebooks.find_cell(nb, (EX,))
    cell["source"] = code
    return json.dumps(nb, ensure_ascii=False)


# A learner who tries every whole number until the checker says yes: in the gradebook the
# checker returns no verdict (nothing to stop at) and the last call is the one judged.
GUESSES = ("for k in range(1, 40):\n    if ch06.ex4(k):\n        break\n"
           "for k in (15264, 1, 2):\n    ch06.ex3(k)\n")


def _guesser() -> str:
    from course_lib.grade.notebooks import registry_groups
    nb = json.loads(_notebook(WRONG + CALL))
    group = next(g for g in registry_groups()["06"] if "ch06.ex4" in g)
    notebooks.find_cell(nb, group)["source"] = "from course_lib.check import ch06\n" + GUESSES
    return json.dumps(nb, ensure_ascii=False)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("tricks")
    for who, code in _cells().items():
        (root / "class" / who).mkdir(parents=True)
        (root / "class" / who / "06_baichuan_build.ipynb").write_text(_notebook(code), encoding="utf-8")
    (root / "class" / "guesser").mkdir(parents=True)
    (root / "class" / "guesser" / "06_baichuan_build.ipynb").write_text(_guesser(), encoding="utf-8")
    book = grading.grade(root / "class", out_csv=root / "gradebook.csv", timeout=120)
    return book, root


def test_no_trick_passes_and_the_honest_learner_does(graded):
    book, _ = graded
    verdicts = {who: r[EX] for who, r in book.results.items()}
    names = dict(zip((f"trick{i:02d}" for i in range(len(TRICKS))), TRICKS))
    assert verdicts["honest"].verdict == "pass", verdicts["honest"]
    assert verdicts["wrong"].verdict == "fail", verdicts["wrong"]
    passed = [names[w] for w, r in verdicts.items() if w.startswith("trick") and r.verdict == "pass"]
    assert not passed, f"tricks that passed: {passed}"
    assert len(TRICKS) >= 10
    for who, r in verdicts.items():
        assert r.verdict in ("pass", "fail", "error", "borrowed"), (who, r)


def test_guessing_in_a_loop_does_not_pass(graded):
    """ch06.ex4's answer (24) is among the guesses and the loop would stop there if the
    checker said so; ch06.ex3's right answer (15264) is tried first, then two wrong ones."""
    book, _ = graded
    verdicts = book.results["guesser"]
    assert verdicts["ch06.ex4"].verdict == "fail", verdicts["ch06.ex4"]
    assert verdicts["ch06.ex3"].verdict == "fail", verdicts["ch06.ex3"]


def test_the_checker_returns_no_verdict_in_the_gradebook(monkeypatch, capsys):
    from course_lib.check import ch06
    assert ch06.ex4(24) and not ch06.ex4(23)                  # in a notebook: the verdict
    monkeypatch.setenv("COURSE_GRADING", "1")
    assert ch06.ex4(24) is None and ch06.ex4(23) is None      # in the gradebook: nothing


def test_borrowing_is_named_as_such(graded):
    book, _ = graded
    verdicts = {who: book.results[who][EX] for who in book.learners}
    for i, name in enumerate(TRICKS):
        if name in OTHERS and name != "print a fake pass":
            assert verdicts[f"trick{i:02d}"].verdict == "borrowed", (name, verdicts[f"trick{i:02d}"])
    fake = verdicts[f"trick{list(TRICKS).index('print a fake pass'):02d}"]
    assert fake.verdict == "fail", fake


def test_each_learner_gets_a_feedback_page(graded):
    book, root = graded
    pages = sorted((root / "feedback").glob("*.md"))
    assert len(pages) == len(book.learners)
    honest = (root / "feedback" / "honest.md").read_text(encoding="utf-8")
    assert "**ch06.rms_norm**" in honest and "：通过" in honest and "写一个 RMSNorm Cell" in honest
    wrong = (root / "feedback" / "wrong.md").read_text(encoding="utf-8")
    assert "未通过 — 提示：" in wrong and "均值" in wrong


READER_ONLY = "copy the library's value into the observation"   # see the docstring below


@pytest.mark.parametrize("name", [n for n in TAMPERING if "_exit" not in TAMPERING[n] and n != READER_ONLY]
                         + ["write the result file and exit 0",
                            "write the result file as the grader used to read it", "exit 0 early"])
def test_the_data_is_judged_here_even_when_the_reader_is_bypassed(name):
    """The sandbox alone (no static reader): tampering with the learner's own process, its
    result file or its exit status still cannot turn the wrong RMSNorm into a pass. (Copying
    the library's value into the observation is the one trick only the reader stops: the
    checker computes that value inside the learner's process.)"""
    cell = next(c for c in notebooks.course_cells()["06"] if c.exercises == (EX,))
    code = WRONG + TRICKS[name] + ("" if "_exit" in TRICKS[name] else CALL)
    ref_spec = (sandbox.reference_cell, {"setup": cell.setup, "names": [EX]})
    learner = (sandbox.run_cell, {"setup": cell.setup, "code": code, "calls": cell.calls})
    (rs, ref), (ls, child) = sandbox.run_all([ref_spec, learner], 120, env={"COURSE_CHECK_SALT": "7"})
    assert rs == "ok"
    references = sandbox.references_from([EX], ref)
    result = sandbox.verdicts_from((EX,), child, references)[EX] if ls == "ok" else None
    assert result is None or result.verdict != "pass", (name, result)


def test_a_refused_statement_takes_only_its_own_answers():
    """In a cell of several answers the reader refuses one statement, not the cell: the
    answers that call it or use what it defined are decided by it, the others still run;
    reading a signature with ``inspect`` (as a question may invite) is not refused."""
    from course_lib.grade.audit import read_cell
    setup = "import inspect\nfrom mindspore import nn\n"
    names = ["ch13.ex1", "ch13.ex2", "ch13.ex3"]
    registered = {f"course_lib.check.{n}" for n in names}
    code = ("eps = inspect.signature(nn.LayerNorm).parameters['epsilon'].default\n"
            "ch13.ex1(eps)\n"
            "import sys\n"
            "big = sys.maxsize\n"
            "ch13.ex2(big)\n"
            "ch13.ex3(0.999)\n")
    reading = read_cell(code, setup, names, (), registered)
    assert reading.finding is None
    assert set(reading.refused) == {"ch13.ex2"} and reading.refused["ch13.ex2"].verdict == "error"
    assert "（第 3 行）" in reading.refused["ch13.ex2"].reason or "（第 4 行）" in reading.refused["ch13.ex2"].reason
    ran = reading.code.splitlines()
    assert ran[0] == code.splitlines()[0] and ran[1] == "ch13.ex1(eps)" and ran[5] == "ch13.ex3(0.999)"
    assert ran[2].startswith("raise RuntimeError(") and len(ran) == 6       # line numbers kept
    solo = read_cell("from course_lib.solutions import ch06\nch06.ex1(1)\n", "", ["ch06.rms_norm"],
                     (), {"course_lib.check.ch06.rms_norm"})
    assert solo.finding is not None and solo.finding.verdict == "borrowed"    # one exercise: all or nothing


def test_a_statement_is_held_to_the_targets_of_the_answers_it_feeds():
    """ch08.ex1 must not be computed by ``lora.inject_lora`` (its target); ch08.ex4, in the
    same answers cell, may use it as section 9 does: only ex1's statement is refused, and an
    earlier cell that feeds only ex4 is not held to ex1's target."""
    from course_lib.grade import _answered, _piece_targets
    from course_lib.grade.audit import read_cell
    from course_lib.grade.context import Piece
    setup = "from course_lib import lora, memory\n"
    names = ["ch08.ex1", "ch08.ex4"]
    registered = {f"course_lib.check.{n}" for n in names}
    targets = {"ch08.ex1": ("course_lib.lora.inject_lora",), "ch08.ex4": ()}
    code = ("n4 = lora.inject_lora(big, ['q_proj'], r=64).added\n"
            "ch08.ex4(n4 * 2)\n"
            "n1 = lora.inject_lora(big, ['q_proj'], r=8).added\n"
            "ch08.ex1(n1)\n")
    reading = read_cell(code, setup, names, targets, registered)
    assert reading.finding is None
    assert set(reading.refused) == {"ch08.ex1"} and reading.refused["ch08.ex1"].verdict == "borrowed"
    assert reading.code.splitlines()[0] == code.splitlines()[0]
    flat = read_cell(code, setup, names, targets["ch08.ex1"], registered)     # one list for all
    assert set(flat.refused) == {"ch08.ex1", "ch08.ex4"}

    class Task:                         # an earlier cell's statement feeding only ex4
        code = "ch08.ex4(report7.added)\nch08.ex1(19988480)\n"
        cell = type("Cell", (), {"exercises": tuple(names)})
    piece = Piece(cell=3, line=1, code="report7 = lora.inject_lora(big, ['q_proj'], r=64)", learner=True)
    assert _piece_targets(piece, _answered(Task), targets) == ()
    piece1 = Piece(cell=3, line=1, code="x = 1", learner=True)               # feeds nothing: all
    assert _piece_targets(piece1, _answered(Task), targets) == ("course_lib.lora.inject_lora",)


@pytest.mark.parametrize("call, borrowed", [
    ("super().construct(x)", True),                               # the reference's own forward
    ("super(MyLoRADense, self).construct(x)", True),
    ("super(lora.LoRADense, self).construct(x) + self.bypass(x)", False),   # nn.Dense's: W x + b
])
def test_super_is_borrowing_only_when_it_reaches_the_reference(call, borrowed):
    from course_lib.grade.audit import audit
    code = ("class MyLoRADense(lora.LoRADense):\n"
            "    def construct(self, x):\n"
            f"        return {call}\n")
    found = audit(code, "from course_lib import lora\n", ["ch08.lora_forward"],
                  ("course_lib.lora.LoRADense.construct",), {"course_lib.check.ch08.lora_forward"})
    assert (found is not None and found.verdict == "borrowed") == borrowed, found


@pytest.mark.parametrize("code, verdict", [
    ("import inspect\nch13.ex1(inspect.signature(nn.LayerNorm).parameters['epsilon'].default)\n", None),
    ("import inspect as i\nch13.ex1(i.signature(nn.LayerNorm).parameters['epsilon'].default)\n", None),
    ("import inspect\nf = inspect.currentframe()\nch13.ex1(1e-7)\n", "error"),
    ("from inspect import currentframe\nch13.ex1(1e-7)\n", "error"),
])
def test_a_learner_may_import_inspect_to_read_a_signature(code, verdict):
    """A question that says "read the defaults from the signatures" invites ``import inspect``:
    the import is not refused, a use that reaches into the interpreter still is."""
    from course_lib.grade.audit import audit
    found = audit(code, "from mindspore import nn\n", ["ch13.ex1"], (), {"course_lib.check.ch13.ex1"})
    assert (found.verdict if found else None) == verdict, found


@pytest.mark.parametrize("code, verdict", [
    ("from transformers.models.bloom.modeling_bloom import build_alibi_tensor\n"
     "def my_alibi_slopes(n):\n"
     "    return build_alibi_tensor(torch.ones(1, 2), n, torch.float32)[:, 0, 1].tolist()\n"
     "ch06.alibi_slopes(my_alibi_slopes)\n", "borrowed"),
    ("import transformers\n"
     "slopes = transformers.models.falcon.modeling_falcon.build_alibi_tensor\n"
     "ch06.ex1([1, 2, 3, 4])\n", "borrowed"),
    ("from transformers import BloomModel\n"
     "f = BloomModel.build_alibi_tensor\n"
     "ch06.alibi_slopes(f)\n", "borrowed"),
    ("def my_alibi_slopes(n):\n"
     "    return [2 ** (-8 * (h + 1) / n) for h in range(n)]\n"
     "ch06.alibi_slopes(my_alibi_slopes)\n", None),
])
def test_slopes_taken_from_transformers_are_borrowed(code, verdict):
    """ALiBi's slopes are one call away in transformers' BLOOM and Falcon: an answer that
    takes them there is "borrowed", like one that calls the course's ``alibi_slopes``; a
    learner's own (here the power-of-two rule alone) is not refused by the reader."""
    from course_lib.check import all_exercises
    from course_lib.grade.audit import audit
    names = ["ch06.alibi_slopes", "ch06.ex1"]
    targets = tuple(t for n in names for t in all_exercises()[n].targets)
    found = audit(code, "import torch\nfrom course_lib.check import ch06\n", names, targets,
                  {"course_lib.check.ch06.alibi_slopes", "course_lib.check.ch06.ex1"})
    assert (found.verdict if found else None) == verdict, found
    if verdict:
        assert "transformers" in found.reason and "参考答案" not in found.reason, found.reason


@pytest.mark.parametrize("name, code", [
    ("ch16.kv_bytes_per_token",     # the plan section 1 prints carries the KV cache of a full-length sequence
     "plan = memory.load_plan(qwen05, 'bfloat16', device='Ascend')\n"
     "ch16.kv_bytes_per_token(plan.kv_cache // qwen05.max_seq_len)\n"),
    ("ch15.peak_gib",               # from_pretrained prints the same load plan before it reads weights
     "model = cl.from_pretrained(config_only_dir, 'bfloat16')\nch15.peak_gib(14.43)\n"),
])
def test_a_library_call_that_prints_the_answer_is_borrowed(name, code):
    """The registry's targets cover every library call that hands out the number: a plan's
    ``kv_cache`` field, or the plan ``from_pretrained`` prints, is borrowing too."""
    from course_lib.check import all_exercises
    from course_lib.grade.audit import read_cell
    registry = all_exercises()
    setup = "import course_lib as cl\nfrom course_lib import memory\n"
    reading = read_cell(code, setup, [name], {name: registry[name].targets}, {f"course_lib.check.{name}"})
    found = reading.finding or reading.refused.get(name)
    assert found is not None and found.verdict == "borrowed"


@pytest.mark.parametrize("code, verdict", [
    (WRONG + "ch06.rms_norm(MyRMSNorm)\nshow_solution('ch06.rms_norm')\n", None),
    (WRONG + "show_solution('ch06.rms_norm')\nch06.rms_norm(MyRMSNorm)\n", "borrowed"),
    (WRONG + "ch06.rms_norm(MyRMSNorm)\nshow = show_solution\n", "borrowed"),
])
def test_show_solution_after_the_check_is_looking_not_borrowing(code, verdict):
    """A scaffold's ``# show_solution(...)`` uncommented where it stands, after the checker
    call, prints the reference once the learner has answered: not borrowed. Called before the
    check (or taken without a call) it is."""
    from course_lib.grade.audit import audit
    found = audit(code, "from course_lib.check import ch06, show_solution\n", ["ch06.rms_norm"],
                  ("course_lib.layers.RMSNorm",), {"course_lib.check.ch06.rms_norm"})
    assert (found.verdict if found else None) == verdict, found
