"""The one knob that sizes every notebook: ``COURSE_SCALE=ci|full``.

* ``full`` (default) is what a learner runs: results that mean something, in minutes.
* ``ci`` is what ``make test`` runs: the same cells on less data / fewer steps, so each
  notebook finishes in well under 90 s on a 2-core CPU.

Notebooks never branch on the scale; they ask ``pick(ci=..., full=...)`` for a number.
"""
import os
from contextlib import contextmanager

SCALES = ("ci", "full")


def current_scale() -> str:
    value = os.environ.get("COURSE_SCALE", "full").strip().lower()
    if value not in SCALES:
        raise ValueError(
            f"COURSE_SCALE={value!r} is not a known scale; use one of {SCALES} "
            "(ci = quick run used by the tests, full = the learner's run)."
        )
    return value


def pick(ci, full):
    """Return ``ci`` or ``full`` for the scale in force (read at call time)."""
    return ci if current_scale() == "ci" else full


@contextmanager
def at_scale(scale: str):
    """Run a block at ``COURSE_SCALE=scale`` (e.g. load the full-scale zoo model from a
    CI-scale script); the variable is restored exactly afterwards (unset if it was)."""
    if scale not in SCALES:
        raise ValueError(f"Unknown scale {scale!r}; use one of {SCALES}.")
    saved = os.environ.get("COURSE_SCALE")
    os.environ["COURSE_SCALE"] = scale
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("COURSE_SCALE", None)
        else:
            os.environ["COURSE_SCALE"] = saved
