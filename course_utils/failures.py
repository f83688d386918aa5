"""Running the seed articles' code where it fails, so the failure is shown *and* checked.

``with expect_error(TypeError): <the seed's code>`` runs the code unchanged, prints the error it
raises (without this machine's paths: :func:`portable`) and the line that raised it, and fails
with an AssertionError if no such error happens. A notebook then stores a printed error instead of
a traceback, so it also runs under papermill, which stops at any stored error.

``with expect_warning(FutureWarning) as caught: <the seed's code>`` does the same for a deprecated
API that still runs: it prints every warning the block raised (category and message, one per line,
without the file paths that differ between machines) and fails if none of them is of the expected
categories. ``caught`` is the list of ``warnings.WarningMessage`` for further checks.
"""
from __future__ import annotations

import os
import re
import traceback
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

SITE_PACKAGES = re.compile(r"/\S*?/(site|dist)-packages/")


def portable(text: str) -> str:
    """``text`` without this machine's paths: ".../site-packages/keras/..." becomes
    "site-packages/keras/...", and files under the current folder are named relative to it
    ("work/ch00_broken.py"), so a stored error message is the same on every machine."""
    return SITE_PACKAGES.sub(r"\1-packages/", text).replace(os.getcwd() + os.sep, "")


@contextmanager
def expect_error(*errors: type[BaseException]) -> Iterator[None]:
    """Run the block; it must raise one of ``errors``. Print ``Type: message`` and the failing line."""
    if not errors:
        raise ValueError("name the exception type(s) the code is expected to raise")
    try:
        yield
    except errors as exc:
        frames = traceback.extract_tb(exc.__traceback__)
        line = next((f.line for f in reversed(frames) if "site-packages" not in f.filename
                     and "course_utils" not in f.filename), None)
        print(portable(f"{type(exc).__name__}: {exc}"))
        if line:
            print(f"  raised by: {line}")
    else:
        names = " or ".join(e.__name__ for e in errors)
        raise AssertionError(f"expected the code to raise {names}, but it ran without error")


@contextmanager
def expect_warning(*categories: type[Warning]) -> Iterator[list[warnings.WarningMessage]]:
    """Run the block; it must warn with one of ``categories``. Print each ``Category: message``."""
    if not categories:
        raise ValueError("name the warning category (or categories) the code is expected to raise")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught
    for w in caught:
        print(f"{w.category.__name__}: {w.message}")
    if not any(issubclass(w.category, categories) for w in caught):
        names = " or ".join(c.__name__ for c in categories)
        raise AssertionError(f"expected the code to warn with {names}, but it warned with "
                             f"{[w.category.__name__ for w in caught] or 'nothing'}")
