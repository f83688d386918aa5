"""Print a measured number as what holds on every machine: the bound it was checked against.

Two runs that should agree (N processes vs one, one framework vs another) differ by float
rounding: 6.0e-08 on one CPU, 8.9e-08 on the next, because each CPU's SIMD kernels add in a
different order. The number itself is noise; the claim is the bound. So a stored output says

    >>> print("max |Δparam|", at_most(3.0e-08, 1e-6))
    max |Δparam| ≤ 1e-6

and the function *checks* the bound (an ``AssertionError`` that names both numbers when it fails),
so the printed line is a verified claim, identical on every machine. :func:`at_least`,
:func:`between` and :func:`near` do the same for statistics that vary a little from machine to
machine (a share of gradient entries flushed to zero, an accuracy after training). Where the exact
value teaches something, print it too, in a separate cell tagged ``nbval-ignore-output``.

``fmt`` is a format spec for the bound: ``"g"`` (default; ``1e-6``), ``".0%"`` (``5%``), ``".2f"``.
"""
from __future__ import annotations

import math


def _show(x: float, fmt: str) -> str:
    text = format(x, fmt)
    if "e" in text:  # 1e-06 -> 1e-6, 2.5e+03 -> 2.5e3
        mantissa, exponent = text.split("e")
        text = f"{mantissa}e{int(exponent)}"
    return text


def _number(value: float, name: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number (a float, int or 0-d tensor), got {type(value).__name__}") from None
    if math.isnan(x):
        raise AssertionError(f"{name} is NaN: the computation that produced it failed (diverged, or 0/0)")
    return x


def at_most(value: float, bound: float, fmt: str = "g") -> str:
    """Check ``value <= bound`` and return ``"≤ bound"``. Raises AssertionError otherwise."""
    x, b = _number(value, "value"), _number(bound, "bound")
    if not x <= b:
        raise AssertionError(f"measured {x:.3g}, expected at most {_show(b, fmt)}")
    return f"≤ {_show(b, fmt)}"


def at_least(value: float, bound: float, fmt: str = "g") -> str:
    """Check ``value >= bound`` and return ``"≥ bound"``. Raises AssertionError otherwise."""
    x, b = _number(value, "value"), _number(bound, "bound")
    if not x >= b:
        raise AssertionError(f"measured {x:.3g}, expected at least {_show(b, fmt)}")
    return f"≥ {_show(b, fmt)}"


def between(value: float, low: float, high: float, fmt: str = "g") -> str:
    """Check ``low <= value <= high`` and return ``"low–high"``. Raises AssertionError otherwise."""
    x, lo, hi = _number(value, "value"), _number(low, "low"), _number(high, "high")
    if lo > hi:
        raise ValueError(f"low ({lo:g}) must not exceed high ({hi:g})")
    if not lo <= x <= hi:
        raise AssertionError(f"measured {x:.3g}, expected between {_show(lo, fmt)} and {_show(hi, fmt)}")
    return f"{_show(lo, fmt)}–{_show(hi, fmt)}"


def near(value: float, target: float, tol: float, fmt: str = "g") -> str:
    """Check ``|value - target| <= tol`` and return ``"target ± tol"``. Raises AssertionError otherwise."""
    x, t, d = _number(value, "value"), _number(target, "target"), _number(tol, "tol")
    if d < 0:
        raise ValueError(f"tol must be >= 0, got {d:g}")
    if not abs(x - t) <= d:
        raise AssertionError(f"measured {x:.7g}, expected {_show(t, fmt)} ± {_show(d, fmt)}")
    return f"{_show(t, fmt)} ± {_show(d, fmt)}"
