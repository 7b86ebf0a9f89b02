"""The one place that formats a verdict, so every chapter's checkers read alike."""
from __future__ import annotations

import math


def verdict(ok: bool, hint: str = "", name: str = "") -> bool:
    label = f"[{name}] " if name else ""
    print(f"{label}✅ 正确！" if ok else f"{label}❌ 还不对。提示：{hint}")
    return bool(ok)


def close(a, b, rel: float = 1e-6, abs_: float = 0.0) -> bool:
    """Numbers (or equal-length sequences of numbers) equal within tolerance."""
    try:
        if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
            return len(a) == len(b) and all(close(x, y, rel, abs_) for x, y in zip(a, b))
        return math.isclose(float(a), float(b), rel_tol=rel, abs_tol=abs_)
    except (TypeError, ValueError):
        return False
