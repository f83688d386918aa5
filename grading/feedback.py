"""Call a student's plain function in the grader's process and say what went wrong in their words.

:func:`call_student` turns the student's exception into feedback naming the call and their line;
:func:`check_number` refuses an unfinished stub or a non-number; :func:`explain` names the classic
mistake whose formula gives the student's results. The graders of chapters 00-03 use them.
"""
from __future__ import annotations

import math
import sysconfig
import traceback
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch

from .student import COURSE_CODE


def call_student(fn: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``; a student's exception becomes an ``AssertionError`` naming the call.

    ``name`` is the function's name in the notebook. The message holds the call, the exception and
    the line of the student's code it came from, never a traceback from inside a library.
    """
    shown = f"{name}({', '.join([*map(_short, args), *(f'{k}={_short(v)}' for k, v in kwargs.items())])})"
    if fn is Ellipsis or fn is None:
        raise AssertionError(f"`{name}` is still {fn!r}: replace the `...` with your answer.")
    if not callable(fn):
        raise AssertionError(f"`{name}` must be a function; it is {type(fn).__name__} {fn!r}.")
    try:
        return fn(*args, **kwargs)
    except Exception as error:   # noqa: BLE001 - whatever the student's code raises, said plainly
        raise AssertionError(f"`{shown}` raised {type(error).__name__}: {error}{_student_line(error)}") from None


def _short(value: Any) -> str:
    """``repr(value)``, or its type and shape when that is long (an array argument)."""
    text = repr(value)
    if len(text) <= 40:
        return text
    shape = getattr(value, "shape", None)
    return f"<{type(value).__name__}{' of shape ' + str(tuple(shape)) if shape is not None else ''}>"


def _student_line(error: BaseException) -> str:
    """`` (in your code, line L: `source`)`` for the last frame of ``error`` outside Python's and the
    course's libraries (the student's notebook cell), or ``""``."""
    libraries = (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"], *COURSE_CODE)
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if "site-packages" not in f.filename and not f.filename.startswith(libraries)]
    if not frames:
        return ""
    frame = frames[-1]
    code = (frame.line or "").strip()
    return f" (in your code, line {frame.lineno}" + (f": `{code}`)" if code else ")")


def check_number(value: Any, call: str) -> float:
    """``value`` as a float; fail if it is None (an unfinished stub) or not a real number."""
    if value is Ellipsis:
        raise AssertionError(f"`{call}` is still `...`: replace the `...` with your answer.")
    if value is None:
        raise AssertionError(f"`{call}` returned None: the function still does nothing. "
                             "Replace the `...` with your code and return the result.")
    size = value.numel() if isinstance(value, torch.Tensor) else np.size(value)
    if isinstance(value, (bool, str)) or size != 1:
        raise AssertionError(f"`{call}` returned {type(value).__name__} {value!r}: return a number.")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise AssertionError(f"`{call}` returned {type(value).__name__} {value!r}: return a number.") from None


def explain(got: Sequence[float], cases: Sequence[tuple], candidates: Iterable[tuple[Callable, str]], *,
            rtol: float = 1e-9) -> str | None:
    """The message of the first candidate mistake ``formula(*case)`` that gives ``got`` on every case.

    ``candidates`` are ``(formula, message)`` pairs: a wrong formula a student would write, and
    what to tell them. Returns None when the results match none of them.
    """
    for formula, message in candidates:
        try:
            wrong = [float(formula(*case)) for case in cases]
        except (ArithmeticError, ValueError):
            continue
        if all(math.isclose(g, w, rel_tol=rtol, abs_tol=1e-300) for g, w in zip(got, wrong)):
            return message
    return None
