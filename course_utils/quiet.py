"""Keep framework log lines out of what a notebook prints — decided once, here.

Frameworks write chatter that depends on the machine, not on the code: TensorFlow announces
"oneDNN custom operations are on" only on CPUs where oneDNN is its default (AVX512-VNNI/BF16, AMX),
absl prefixes each line with a timestamp and a thread id, gloo reports its connections. One such
line in a stored output makes strict nbval fail on the next machine. Two measures:

- :data:`ENV`: the environment variables that silence what can be silenced. ``import course_utils``
  sets them (:func:`apply`, never overriding a value you set) before any framework is imported, and
  every subprocess course_utils starts gets them (:func:`course_utils.subprocesses.safe_env`).
- :func:`strip_logs`: removes the lines that no variable silences (absl writes some before it reads
  its settings: ``TF_CPP_MIN_LOG_LEVEL=3`` still prints the oneDNN notice) from a subprocess's
  captured output. :data:`LOG_LINE` is the pattern; the tests check every stored output with it.
- :func:`logs_removed`: the same for what C++ libraries write to file descriptors 1 and 2 while a
  block runs (torch.profiler's kineto lines).
- :func:`import_quietly`: imports a module in this process with those lines removed from what it
  writes to file descriptor 2 while it loads (TensorFlow, imported by a notebook's kernel: its
  oneDNN notice appears only on some CPUs, so a stored output must never contain it).

Errors are never hidden: a failing command's error message carries its raw output.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from types import ModuleType

ENV: dict[str, str] = {
    "TF_CPP_MIN_LOG_LEVEL": "2",     # TensorFlow C++: errors only (3 would hide errors too)
    "GRPC_VERBOSITY": "ERROR",       # TensorFlow's multi-worker transport
    "TORCH_CPP_LOG_LEVEL": "ERROR",  # c10/gloo: "[Gloo] Rank 0 is connected to 1 peer ranks"
    "KMP_WARNINGS": "0",             # Intel OpenMP (MKL builds)
    "PYTHONUNBUFFERED": "1",         # a subprocess's lines arrive in the order they were printed
}
"""Environment variables that silence framework logs; read by each framework when it starts."""

LOG_LINE = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called"  # absl, before init
    r"|[IW]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ \S+:\d+\]"                        # absl/glog info, warning
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IW] \S+:\d+\]"                  # TensorFlow's own prefix
    r"|\[\d\d:\d\d:\d\d\] \S+\.(cc|h):\d+: "                                 # MXNet (dmlc) prefix
    r"|\[Gloo\] "
    r"|USDT:|STAGE:)"                                                        # kineto (torch.profiler)
)
"""A line a framework's logger wrote (info or warning), recognised by its prefix."""


LOGGERS = ("torchao", "torch.utils._pytree", "torch.distributed.tensor._redistribute")
"""Python loggers that warn about the machine or about the checks, not the code taught: torchao's
"Failed to load" its CUDA kernels (on a machine without them), a deprecation notice torchao's import
triggers, and DTensor's note that gathering a parameter sharded over two mesh dimensions (FSDP × TP)
takes two all-gathers — which only the course's comparisons with one process do."""


def apply() -> None:
    """Set every variable of :data:`ENV` in this process that is not set yet (children inherit), and
    raise the :data:`LOGGERS` to errors only, unless a level was set for them already."""
    import logging

    for name, value in ENV.items():
        os.environ.setdefault(name, value)
    for name in LOGGERS:
        if logging.getLogger(name).level == logging.NOTSET:
            logging.getLogger(name).setLevel(logging.ERROR)


def strip_logs(text: str) -> str:
    """``text`` without the lines that match :data:`LOG_LINE`."""
    return "".join(line for line in text.splitlines(keepends=True) if not LOG_LINE.match(line))


def _flush_c_streams() -> None:
    """Push what C code has buffered in ``stdout``/``stderr`` (libc's FILE buffers) to the descriptors."""
    import ctypes

    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):   # no libc to ask (not Linux/macOS): nothing is buffered there
        pass


@contextlib.contextmanager
def logs_removed() -> Iterator[None]:
    """While the block runs, capture file descriptors 1 and 2 (where C++ libraries write, below
    Python's ``sys.stdout``/``sys.stderr``) and pass on only the lines that are not framework log lines
    (:data:`LOG_LINE`): TensorFlow's oneDNN notice on fd 2; kineto's "USDT: ... profiler_start" lines,
    which it writes to fd 1 (through libc's buffer) at every ``torch.profiler`` run, whatever
    ``KINETO_LOG_LEVEL`` says."""
    streams = {1: sys.stdout, 2: sys.stderr}
    for stream in streams.values():
        stream.flush()
    _flush_c_streams()
    saved = {fd: os.dup(fd) for fd in streams}
    captured = {fd: tempfile.TemporaryFile() for fd in streams}
    for fd, file in captured.items():
        os.dup2(file.fileno(), fd)
    try:
        yield
    finally:
        _flush_c_streams()
        for fd, stream in streams.items():
            os.dup2(saved[fd], fd)
            os.close(saved[fd])
            captured[fd].seek(0)
            rest = strip_logs(captured[fd].read().decode(errors="replace"))
            captured[fd].close()
            if rest:
                stream.write(rest)
                stream.flush()


def import_quietly(name: str) -> ModuleType:
    """``importlib.import_module(name)``, with the framework log lines (:data:`LOG_LINE`) it writes
    while loading removed (:func:`logs_removed`); any other line is passed on."""
    if name in sys.modules:
        return sys.modules[name]
    with logs_removed():
        return importlib.import_module(name)
