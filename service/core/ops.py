"""Arithmetic that works on one plan (Python numbers) or on many at once (numpy arrays).

The geometry, memory and timing formulas are written once, against this small interface:
``xp.where``, ``xp.maximum``, ``xp.minimum`` and ``xp.log2``, plus ordinary operators, and
``xp.searchsorted`` and ``xp.take`` for a table looked up by size (``collectives``).
``estimate()`` passes ``SCALAR`` and Python numbers; the plan search passes the ``numpy``
module and arrays with one element per candidate plan. Both therefore run the same formulas
in the same order, and agree to floating-point rounding (a property test checks 1e-9
relative). The core itself needs no numpy: only the search imports it.
"""

from __future__ import annotations

import bisect
import math
from typing import Any

Num = Any
"""A Python int, float or bool, or a numpy array of them (one element per candidate plan)."""


class ScalarOps:
    """The numpy functions the formulas use, for Python numbers. Like numpy, ``where``
    receives both branches already computed, so a branch must be safe to compute."""

    @staticmethod
    def where(condition: Num, if_true: Num, if_false: Num) -> Num:
        return if_true if condition else if_false

    @staticmethod
    def maximum(a: Num, b: Num) -> Num:
        return a if a >= b else b

    @staticmethod
    def minimum(a: Num, b: Num) -> Num:
        return a if a <= b else b

    @staticmethod
    def log2(a: Num) -> Num:
        return math.log2(a)

    @staticmethod
    def searchsorted(a: Any, v: Num, side: str = "left") -> Num:
        """numpy's ``searchsorted`` for one value: its index in the sorted ``a``."""
        return bisect.bisect_right(a, v) if side == "right" else bisect.bisect_left(a, v)

    @staticmethod
    def take(a: Any, indices: Num) -> Num:
        return a[indices]


SCALAR = ScalarOps()
