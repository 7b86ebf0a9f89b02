"""The one knob that sizes every notebook: ``COURSE_SCALE=ci|full``.

* ``full`` (default) is what a learner runs: results that mean something, in minutes.
* ``ci`` is what ``make test`` runs: the same cells on less data / fewer steps, so each
  notebook finishes in well under 90 s on a 2-core CPU.

Notebooks never branch on the scale; they ask ``pick(ci=..., full=...)`` for a number.
"""
import os

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
