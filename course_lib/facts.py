"""A fact a notebook states, printed and asserted: the book cannot say something false.

    cl.fact("untrained loss is within 0.1 of ln(8000)", abs(loss - math.log(8000)) < 0.1,
            f"loss {loss:.3f}")

prints ``✔ untrained loss is within 0.1 of ln(8000) (loss 8.987)`` when it holds and raises
:class:`FactError` (naming the claim and the detail) when it does not, so a checked cell whose
claim went stale fails ``make test`` instead of storing "False" under prose that says True.
State negative facts as what happens: ``cl.fact("O2 on CPU without loss_scale_manager=None
raises ValueError", raised is ValueError)``.
"""
from __future__ import annotations

import numbers


class FactError(AssertionError):
    """A fact the book states does not hold (any more): fix the code or the sentence."""


def fact(claim: str, holds, detail: str = "") -> None:
    """Print ``✔ claim (detail)``; raise :class:`FactError` when ``holds`` is not true."""
    if not isinstance(claim, str) or not claim.strip():
        raise TypeError(f"claim must be a non-empty sentence, got {claim!r}")
    if hasattr(holds, "asnumpy"):                       # a 0-d mindspore Tensor
        holds = holds.asnumpy()
    if hasattr(holds, "item") and getattr(holds, "size", 1) == 1:   # NumPy bool / 0-d array
        holds = holds.item()
    if not isinstance(holds, (bool, numbers.Integral)):
        raise TypeError(f"fact {claim!r}: holds must be a bool, got {type(holds).__name__} "
                        "(compare explicitly, e.g. abs(a - b) < tol or a == b)")
    suffix = f" ({detail})" if detail else ""
    if not holds:
        raise FactError(f"The book states a fact that does not hold: {claim}{suffix}. "
                        "Fix the code or rewrite the sentence (and the prose around the cell).")
    print(f"✔ {claim}{suffix}")
