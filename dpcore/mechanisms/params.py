"""Shared checks of mechanism parameters (each mechanism keeps its own message)."""
from __future__ import annotations

import math
import numbers


def real_between(value: object, low: float, high: float = math.inf) -> bool:
    """True when ``value`` is a real number (not a bool) with ``low < value < high``, finite when ``high`` is inf."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        return False
    return math.isfinite(v) and low < v < high
