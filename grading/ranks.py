"""Grade a student's distributed code: run it on gloo ranks, compare with one process, explain.

An exercise question has the student write part of a worker in a file (a ``%%writefile`` cell
the student edits). Its check, in ``course_utils.autograde.chNN``, runs a *harness* on N local
ranks through :func:`course_utils.launch.run`; the harness loads the student's file afresh in
every rank, calls the student's function where a real training loop would, and returns what it
saw. The check compares that with the same computation in one process and raises
``AssertionError`` with what a teaching assistant would say: which rank diverged, by how much,
and the classic cause when the numbers match one ("forgot to divide by world size").

A student's code that raises, kills its rank or waits forever becomes such a message too, within
the check's timeout, and every rank is killed and reaped (``launch.run`` guarantees it).

Importing this package imports no framework; the ``chNN`` modules import PyTorch.
"""
from __future__ import annotations

import importlib.util
import os
import re
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from .. import launch

HANG_HINT = ("The ranks waited for each other until the timeout: one rank called a collective or a "
             "recv that no other rank matched. Every rank must call the same collectives in the same "
             "order (no `if rank == 0:` around an all_reduce), and every send needs a recv on its peer.")
SIZE_HINT = ("A message arrived into a buffer of another size, and gloo aborted the process: every recv "
             "must get a tensor of exactly the size its peer sends. With uneven chunks, check which chunk "
             "each step sends and which it receives.")


@dataclass(frozen=True)
class Mutant:
    """A planted wrong answer to one exercise question, and the feedback it must get.

    ``edits`` are ``(old, new)`` replacements applied to the question's solution cell (each ``old``
    must occur there once); ``source`` replaces the whole cell instead. The grader must give it 0
    points, failing with an ``AssertionError`` whose message contains ``hint``
    (``tools/mutants.py`` runs them; ``tests/test_mutants.py`` runs every table).
    """

    name: str
    hint: str
    edits: tuple[tuple[str, str], ...] = ()
    source: str | None = None

    def __post_init__(self):
        if (self.source is None) == (not self.edits):
            raise ValueError(f"mutant {self.name!r}: give either edits or source, not both or neither")


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


def run_ranks(harness: Callable, student_file: str | os.PathLike, world_size: int, *,
              timeout_s: float = 60.0, pg_timeout_s: float = 10.0, **kwargs: Any) -> list[Any]:
    """``harness(rank, world_size, student_file, **kwargs)`` on ``world_size`` gloo ranks.

    Returns the harness's results by rank. A rank that raises, dies or hangs raises
    ``AssertionError`` whose message is the error in the student's own words: the exception, the
    lines of the student's file it went through, and for a timeout, what usually causes one.
    """
    student_file = os.fspath(student_file)
    load_student(student_file)   # a syntax error or a missing file is reported here, in this process
    try:
        return launch.run(harness, world_size, args=(student_file,), kwargs=kwargs, timeout_s=timeout_s,
                          pg_timeout_s=pg_timeout_s, output="none")
    except launch.WorkerError as error:
        raise AssertionError(explain_failure(error, student_file)) from None


def explain_failure(error: launch.WorkerError, student_file: str) -> str:
    """The student-facing account of a failed run: the error's first line, the student's frames."""
    full = str(error)
    message = _without_source_paths(full.splitlines()[0])[:400]
    died = re.search(r"what\(\):\s*(.*)", full)   # a C++ exception that aborted the rank
    if died:
        message += ": " + _without_source_paths(died.group(1))[:300]
    name = os.path.basename(student_file)
    frames = re.findall(r'File "([^"]*)", line (\d+), in (\S+)\n\s+(.*)', error.remote_traceback)
    mine = [f"  {name}, line {line}, in {fn}: {code.strip()}" for file, line, fn, code in frames
            if os.path.basename(file) == name]
    text = message + ("\nin your code:\n" + "\n".join(mine) if mine else "")
    if re.search(r"timed? ?out|Timeout|deadline", full, re.IGNORECASE):
        text += "\n" + HANG_HINT
    elif "doesn't match expected size" in full:
        text += "\n" + SIZE_HINT
    return text


def _without_source_paths(text: str) -> str:
    """``text`` without the C++ source locations framework errors start with ("[.../pair.cc:456] ")."""
    return re.sub(r"\[[^\]]*\.(?:cc|cpp|h|hpp):\d+\] ", "", text)


def first_mismatch(got: Sequence, want: Sequence, names: Sequence[str], *, atol: float,
                   rtol: float = 0.0) -> tuple[str, float] | None:
    """The first ``(name, max |got - want|)`` where two lists of tensors differ, else None.

    A missing tensor (None) or a shape mismatch counts as an infinite difference.
    """
    import torch

    for name, g, w in zip(names, got, want):
        if g is None or tuple(g.shape) != tuple(w.shape):
            return name, float("inf")
        g, w = g.detach().double(), w.detach().double()
        if not torch.allclose(g, w, atol=atol, rtol=rtol):
            return name, float((g - w).abs().max())
    return None


def same(got: Sequence, want: Sequence, *, atol: float = 1e-6, rtol: float = 1e-5) -> bool:
    """Whether two lists of tensors match (same length, shapes, values within tolerance)."""
    return len(got) == len(want) and first_mismatch(got, want, [""] * len(got), atol=atol, rtol=rtol) is None


def mlp_parameters(sizes: Sequence[int]) -> list[tuple[str, Any]]:
    """``mlp(sizes).named_parameters()`` built on the meta device: names and shapes, no memory, and no
    random numbers drawn (the caller's random state stays as it was)."""
    import torch

    from ..models import mlp

    with torch.device("meta"):
        return list(mlp(list(sizes), seed=None).named_parameters())
