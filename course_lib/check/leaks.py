"""Does a text give an exercise's answer away before the learner tries?

Used where the course shows something to a learner who has not solved an exercise yet: the
hints its checker prints (``python -m course_lib.check --self-test``), the scaffold's
comments and the notebook's stored outputs before the exercise
(tests/test_no_answer_before_exercise.py).

* Code: the reference solution's source and the text are compared as sequences of code
  tokens (identifiers, numbers, operators; ``self.`` dropped, comments and docstrings
  ignored). A run of :data:`RUN` consecutive tokens of the solution, with at least two names
  or numbers in it, found in the text is a line of the solution. Runs the scaffold itself
  shows (the signature, the checker call) do not count.
* Numbers: the answer rendered the ways a notebook prints numbers (an int with and without
  thousands separators; a float rounded to 2-6 significant digits, fixed or scientific) found
  in the text as a whole number.
"""
from __future__ import annotations

import io
import math
import re
import tokenize

RUN = 6
_TOKEN = re.compile(r"[A-Za-z_][A-Za-z_0-9]*|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|\*\*|//|==|!=|<=|>=|->|"
                    r"[-+*/%@=<>()\[\]{},.:]")
_WORD = re.compile(r"[A-Za-z_0-9]")


def _without_comments(source: str) -> str:
    """Python source with comments and docstrings blanked (strings that are statements)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return source
    out, previous = [], tokenize.NEWLINE
    for tok in tokens:
        if tok.type == tokenize.COMMENT:
            continue
        if tok.type == tokenize.STRING and previous in (tokenize.NEWLINE, tokenize.NL,
                                                          tokenize.INDENT, tokenize.DEDENT):
            previous = tok.type
            continue                                  # a docstring
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            previous = tok.type
        out.append(tok.string if tok.type not in (tokenize.NEWLINE, tokenize.NL) else "\n")
    return " ".join(out)


def code_tokens(text: str) -> list[str]:
    """``text`` as code tokens, ``self.`` dropped (``self.fc1(x)`` reads as ``fc1(x)``)."""
    tokens = _TOKEN.findall(text)
    out = []
    i = 0
    while i < len(tokens):
        if tokens[i] == "self" and i + 1 < len(tokens) and tokens[i + 1] == ".":
            i += 2
            continue
        out.append(tokens[i])
        i += 1
    return out


def _runs(tokens: list[str], n: int = RUN) -> set[tuple[str, ...]]:
    return {tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)
            if sum(bool(_WORD.match(t)) for t in tokens[i:i + n]) >= 2}


def solution_runs(solution_source: str, scaffold: str = "", taught=()) -> set[tuple[str, ...]]:
    """The token runs of a solution that its scaffold does not already show, nor touch a
    snippet the chapter teaches on purpose (``Exercise.taught``: the API the exercise is
    about, e.g. ``cb = run_context.original_args()``), nor a ``def`` whose name the scaffold
    defines (the signature is given)."""
    tokens = code_tokens(_without_comments(solution_source))
    given = code_tokens(_without_comments(scaffold)) if scaffold else []
    shown = _runs(given)
    spans = [code_tokens(t) for t in taught]
    spans += [["def", given[i + 1]] for i in range(len(given) - 1) if given[i] == "def"]
    keep = set()
    for i in range(len(tokens) - RUN + 1):
        run = tuple(tokens[i:i + RUN])
        if run in shown or sum(bool(_WORD.match(t)) for t in run) < 2:
            continue
        if any(_overlaps(tokens, i, span) for span in spans):
            continue
        keep.add(run)
    return keep


def _overlaps(tokens: list[str], start: int, span: list[str]) -> bool:
    """Whether the run at ``start`` shares a token with an occurrence of ``span``."""
    n = len(span)
    for j in range(max(0, start - n + 1), min(len(tokens) - n, start + RUN - 1) + 1):
        if tokens[j:j + n] == span:
            return True
    return False


def shows_code(text: str, runs: set[tuple[str, ...]]) -> str | None:
    """The first run of ``runs`` in ``text`` (joined with spaces), or None."""
    tokens = code_tokens(text)
    for i in range(len(tokens) - RUN + 1):
        run = tuple(tokens[i:i + RUN])
        if run in runs:
            return " ".join(run)
    return None


def _significant(value: float, digits: int) -> float:
    if value == 0:
        return 0.0
    return round(value, digits - 1 - int(math.floor(math.log10(abs(value)))))


def renderings(value) -> set[str]:
    """How a notebook may print the number ``value`` (two significant digits or more)."""
    if isinstance(value, bool):
        return set()
    out = set()
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e15):
        n = int(value)
        if abs(n) >= 10:
            out |= {str(n), f"{n:,}"}
        if isinstance(value, int):
            return out
    v = float(value)
    for digits in range(2, 7):
        r = _significant(v, digits)
        for text in (f"{r:.{digits}g}", f"{r:.{digits - 1}e}", repr(r)):
            if len(re.sub(r"[^0-9]", "", text.split("e")[0]).lstrip("0")) >= 2:
                out.add(text)
    return out


def shows_number(text: str, value) -> str | None:
    """A rendering of ``value`` that ``text`` contains as a whole number, or None."""
    for r in sorted(renderings(value), key=len, reverse=True):
        if re.search(rf"(?<![\d.,]){re.escape(r)}(?![\d]|[.,]\d)", text):
            return r
    return None
