"""The verdict, computed in the grader's own process from data.

The learner's process sends back, for every checker call, the values the learner's code
produced (``check.common.Observation``), the verdict it printed and where the learner's
object was defined. None of that is trusted: a run passes here only when every observation
equals, within the checker's tolerance, what the reference solution produced at the same
point in a process that ran no learner code (``reference``), and the learner's object was
written in the learner's cell rather than taken or derived from the course library.

Data cross the process boundary as JSON (:func:`encode` / :func:`decode`); decoding accepts
nothing but plain numbers, strings, lists and arrays of a few dtypes, of bounded size.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass

import numpy as np

from ..check.borrowing import library_origin
from ..check.common import Observation, Recorded

VERDICTS = ("pass", "fail", "borrowed", "not attempted", "error", "timeout")


@dataclass(frozen=True)
class Result:
    verdict: str                       # one of VERDICTS
    hint: str = ""                     # the checker's first-mismatch message, the reason, ...

DTYPES = {"<f8", "<f4", "<f2", "<i8", "<i4", "<i2", "|i1", "|u1", "<u2", "<u4", "<u8", "|b1"}
MAX_ELEMENTS = 20_000_000             # in one learner's data, all arrays together
LEARNER_FILES = {"<learner cell>"}    # and "<learner cell N>": the learner's earlier cells


def learner_file(name: str) -> bool:
    """Code compiled from the learner's exercise cell or from one of their earlier cells."""
    return name in LEARNER_FILES or (name.startswith("<learner cell ") and name.endswith(">"))


class BadData(ValueError):
    """What the learner's process sent back is not well-formed grading data."""


# --------------------------------------------------------------------------- crossing processes
def encode(value):
    """Plain data (``common.plain``) as JSON-ready values: arrays as {"a", "s", "b"}."""
    if isinstance(value, np.ndarray):
        arr = np.ascontiguousarray(value)
        if arr.dtype.str not in DTYPES:
            arr = arr.astype(np.float64) if arr.dtype.kind in "fc" else arr.astype(str).astype(object)
            if arr.dtype == object:
                return [encode(v) for v in arr.tolist()]
        return {"a": arr.dtype.str, "s": list(arr.shape), "b": base64.b64encode(arr.tobytes()).decode()}
    if isinstance(value, list):
        return [encode(v) for v in value]
    return value


def encode_record(r: Recorded) -> dict:
    return {"exercise": r.exercise, "passed": r.passed, "hint": r.hint, "attempted": r.attempted,
            "observations": [[o.what, encode(o.got), encode(o.want), o.atol, o.rtol]
                             for o in r.observations],
            "provenance": r.provenance}


class _Budget:
    def __init__(self, limit: int = MAX_ELEMENTS):
        self.left = limit

    def take(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise BadData("too much data")


def decode(value, budget: _Budget | None = None, depth: int = 0):
    """The inverse of :func:`encode`, for untrusted input: :class:`BadData` on anything else."""
    budget = budget or _Budget()
    if depth > 20:
        raise BadData("nested too deeply")
    if value is None or isinstance(value, (bool, int, float, str)):
        budget.take(1)
        return value
    if isinstance(value, list):
        budget.take(len(value))
        return [decode(v, budget, depth + 1) for v in value]
    if isinstance(value, dict) and set(value) == {"a", "s", "b"}:
        dtype, shape, data = value["a"], value["s"], value["b"]
        if dtype not in DTYPES or not isinstance(shape, list) or not isinstance(data, str) or \
                len(shape) > 8 or not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n
                                          for n in shape):
            raise BadData("malformed array")
        size = int(np.prod(shape, dtype=np.int64)) if shape else 1
        budget.take(size)
        try:
            raw = base64.b64decode(data, validate=True)
        except ValueError:
            raise BadData("malformed array bytes") from None
        if len(raw) != size * np.dtype(dtype).itemsize:
            raise BadData("array size does not match its shape")
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    raise BadData(f"unexpected {type(value).__name__}")


def _text(value, limit: int = 2000) -> str:
    return value[:limit] if isinstance(value, str) else ""


def _provenance(value) -> dict | None:
    """A provenance dict from untrusted data, keeping only strings (None if absent/odd)."""
    if not isinstance(value, dict):
        return None

    def where(d):
        return {k: _text(d.get(k)) for k in ("module", "name", "file")} if isinstance(d, dict) else {}
    out = where(value)
    out["bases"] = [where(b) for b in value.get("bases", [])[:64]] \
        if isinstance(value.get("bases"), list) else []
    out["methods"] = [_text(m) for m in value.get("methods", [])[:256]] \
        if isinstance(value.get("methods"), list) else []
    return out


def decode_record(item) -> Recorded:
    """One record from the learner's process; :class:`BadData` if it is not one."""
    if not isinstance(item, dict) or not isinstance(item.get("exercise"), str) or \
            not isinstance(item.get("observations"), list):
        raise BadData("malformed record")
    budget = _Budget()
    obs = []
    for o in item["observations"]:
        if not (isinstance(o, list) and len(o) == 5 and isinstance(o[0], str)
                and all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in o[3:])):
            raise BadData("malformed observation")
        obs.append(Observation(o[0][:500], decode(o[1], budget), decode(o[2], budget),
                               float(o[3]), float(o[4])))
    return Recorded(item["exercise"], item.get("passed") is True, _text(item.get("hint")),
                    item.get("attempted") is not False, tuple(obs),
                    _provenance(item.get("provenance")))


# --------------------------------------------------------------------------- comparing
def _numeric(value) -> np.ndarray | None:
    """``value`` as a float64 array when it is numbers all the way down (bools excluded)."""
    if isinstance(value, np.ndarray):
        return value.astype(np.float64) if value.dtype.kind in "iuf" else (
            value.astype(np.float64) if value.dtype.kind == "b" else None)
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return None
    if isinstance(value, (int, float)):
        return np.asarray(float(value))
    if isinstance(value, list):
        parts = [_numeric(v) for v in value]
        if any(p is None for p in parts):
            return None
        try:
            return np.asarray(parts, dtype=np.float64) if parts else np.zeros((0,))
        except ValueError:                               # ragged
            return None
    return None


def same(got, want, atol: float, rtol: float) -> bool:
    """``got`` equals ``want``: numbers within ``atol + rtol·|want|`` (same shape, no NaN where
    the reference has none), anything else exactly."""
    w = _numeric(want)
    if w is not None and not (isinstance(want, bool)):
        g = _numeric(got)
        if g is None or isinstance(got, bool) or g.shape != w.shape:
            return False
        return bool(np.allclose(g, w, atol=atol, rtol=rtol, equal_nan=True))
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and \
            all(same(a, b, atol, rtol) for a, b in zip(got, want))
    if isinstance(want, np.ndarray):                    # bool arrays
        return isinstance(got, np.ndarray) and got.shape == want.shape and bool(np.array_equal(got, want))
    if isinstance(want, bool):                          # a flag: True and 1 say the same
        return isinstance(got, (bool, int)) and got == want
    return type(got) is type(want) and got == want


def expected(ref: Observation):
    return ref.got if ref.want is None else ref.want


def first_difference(run: Recorded, ref: Recorded) -> int | None:
    """Index of the first observation of ``run`` that differs from the reference's at the
    same point (only the points both made), or None."""
    for i, (mine, theirs) in enumerate(zip(run.observations, ref.observations)):
        if not same(mine.got, expected(theirs), theirs.atol, theirs.rtol):
            return i
    return None


# --------------------------------------------------------------------------- borrowing
def borrowed(run: Recorded, ref: Recorded) -> str:
    """Why the learner's object is the library's rather than the learner's own ("" if it is
    their own): ``borrowing.library_origin``, with the learner's cells as their own code."""
    return library_origin(run.provenance, ref.provenance, learner_file)


# --------------------------------------------------------------------------- the verdict
def judge_run(run: Recorded, ref: Recorded) -> Result:
    """One checker call of the learner's against the reference run."""
    reason = borrowed(run, ref)
    if reason:
        return Result("borrowed", reason)
    if not run.attempted:
        return Result("not attempted", "还没有实现（脚手架仍然 raise NotImplementedError）")
    i = first_difference(run, ref)
    if i is not None:
        hint = run.hint or f"{ref.observations[i].what} 与参考实现不一致。"
        return Result("fail", hint)
    if len(run.observations) != len(ref.observations) or not run.passed:
        hint = run.hint or ("检查没有看到全部输出（代码中途出错或提前结束了？）"
                            if len(run.observations) < len(ref.observations)
                            else "检查看到的输出比参考实现多。")
        return Result("fail", hint)
    return Result("pass")


def judge(name: str, runs: list[Recorded], ref: Recorded | None, error: str | None) -> Result:
    """The exercise's verdict from the calls of its checker in the learner's cell: borrowed
    if any call submitted the library's object, else the LAST call's verdict (the learner's
    final answer: trying many answers in a loop passes only if the last one is right, and
    the checker returns no verdict in the gradebook to stop the loop at); no call: error (the
    cell raised) or not attempted."""
    if ref is None or not ref.passed:
        return Result("error", "评分器的参考运行没有通过（这是课程的问题，不是你的）：请告诉老师。")
    mine = [judge_run(r, ref) for r in runs if r.exercise == name]
    if mine:
        return next((r for r in mine if r.verdict == "borrowed"), mine[-1])
    if error:
        return Result("error", error)
    return Result("not attempted", f"单元运行了，但没有调用 {name}(...)")
