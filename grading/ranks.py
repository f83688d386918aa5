"""Run a student's distributed code on gloo ranks and explain a failure in the student's words.

An exercise question has the student write part of a worker in a file (a ``%%writefile`` cell
the student edits). Its check, in one of the chapter modules of :mod:`grading`, runs a *harness*
on N local ranks through :func:`run_ranks` (:func:`course_utils.launch.run` underneath); the harness
loads the student's file afresh in every rank (:func:`grading.student.load_student`), calls the
student's function where a real training loop would, and returns what it saw. The check compares
that with the same computation in one process (:mod:`grading.compare`) and raises
``AssertionError`` with what a teaching assistant would say: which rank diverged, by how much, and
the classic cause when the numbers match one ("forgot to divide by world size").

A student's code that raises, kills its rank or waits forever becomes such a message too, within
the check's timeout, and every rank is killed and reaped (``launch.run`` guarantees it).
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from course_utils import launch

from .student import load_student

HANG_HINT = ("The ranks waited for each other until the timeout: one rank called a collective or a "
             "recv that no other rank matched. Every rank must call the same collectives in the same "
             "order (no `if rank == 0:` around an all_reduce), and every send needs a recv on its peer.")
SIZE_HINT = ("A message arrived into a buffer of another size, and gloo aborted the process: every recv "
             "must get a tensor of exactly the size its peer sends. With uneven chunks, check which chunk "
             "each step sends and which it receives.")


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
        return launch.run(harness, world_size, args=(student_file,), kwargs=kwargs, backend="gloo",  # CPU ranks,
                          timeout_s=timeout_s, pg_timeout_s=pg_timeout_s, output="none")      # on any machine
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
