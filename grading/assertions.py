"""Assertions for the autograded exercises that tell the student what to fix.

Otter-grader shows a failing test's assertion message; these helpers make that message say
which value was wrong, what was expected and a hint, instead of a bare ``AssertionError``.
"""
from __future__ import annotations

from typing import Any

import numpy as np


def _unanswered(value: Any) -> bool:
    return value is Ellipsis or value is None or value is NotImplemented


def check_answered(value: Any, name: str) -> None:
    """Fail if ``value`` is still the placeholder (``...`` or None)."""
    if _unanswered(value):
        raise AssertionError(f"`{name}` is still {value!r}: replace the `...` with your answer.")


def check_close(value: Any, expected: Any, name: str, *, rtol: float = 1e-6, atol: float = 0.0,
                hint: str = "") -> None:
    """Fail unless ``value`` is numerically close to ``expected`` (scalars or arrays/tensors)."""
    check_answered(value, name)
    got = np.asarray(value.detach() if hasattr(value, "detach") else value, dtype=float)
    want = np.asarray(expected, dtype=float)
    if got.shape != want.shape:
        raise AssertionError(f"`{name}` has shape {got.shape}, expected {want.shape}. {hint}".rstrip())
    if not np.allclose(got, want, rtol=rtol, atol=atol):
        worst = float(np.max(np.abs(got - want)))
        shown = f"{got.item():.6g} vs expected {want.item():.6g}" if got.size == 1 else f"max |error| {worst:.3g}"
        raise AssertionError(f"`{name}` is off: {shown}. {hint}".rstrip())


def check_equal(value: Any, expected: Any, name: str, hint: str = "") -> None:
    """Fail unless ``value == expected`` (use for ints, strings, lists)."""
    check_answered(value, name)
    if value != expected:
        raise AssertionError(f"`{name}` is {value!r}, expected {expected!r}. {hint}".rstrip())


def check(condition: bool, message: str) -> None:
    """Fail with ``message`` unless ``condition`` holds."""
    if not condition:
        raise AssertionError(message)

