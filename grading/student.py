"""A student's code, loaded and called: their latest file, their function, a time limit on it.

Feedback names the student's own lines, never a library's: :data:`COURSE_CODE` lists the folders
that hold the course's code (``course_utils`` and this package), whose frames are left out.
"""
from __future__ import annotations

import importlib.util
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import course_utils

# The course's own code (the library and the graders): a traceback's frames in these folders are not
# the student's. Each ends with a separator, so ``str.startswith`` matches the folders themselves only.
COURSE_CODE: tuple[str, ...] = tuple(os.path.join(os.path.dirname(os.path.abspath(path)), "")
                                     for path in (course_utils.__file__, __file__))


@contextmanager
def time_limit(seconds: float, error: type[BaseException] = TimeoutError) -> Iterator[None]:
    """Raise ``error`` inside the block once it has run ``seconds`` s (a student's endless loop).

    SIGALRM, so only in the main thread; in any other thread the block runs without a limit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise error

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def load_student(path: str | os.PathLike) -> ModuleType:
    """Import the student's file ``path`` afresh: its latest edit, whatever was imported before."""
    path = Path(path)
    if not path.is_file():
        raise AssertionError(f"{path} does not exist: run the %%writefile cell that writes it first.")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module   # so that pickling and dataclasses inside it work
    try:
        spec.loader.exec_module(module)
    except SyntaxError as error:
        raise AssertionError(f"{path.name}, line {error.lineno}: {error.msg}: {(error.text or '').strip()}") from None
    except Exception as error:   # noqa: BLE001 - whatever the file raises on import, said plainly
        line = next((f.lineno for f in reversed(traceback.extract_tb(error.__traceback__))
                     if f.filename == str(path)), "?")
        raise AssertionError(f"{path.name}, line {line}, on import: {type(error).__name__}: {error}") from None
    return module


def student_function(module: ModuleType, name: str) -> Callable:
    """``module.name``, or a clear error saying which function the file must define."""
    fn = getattr(module, name, None)
    if not callable(fn):
        raise AssertionError(f"{module.__file__} must define a function `{name}`; it does not.")
    return fn
