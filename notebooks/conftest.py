"""The notebook tier must leave nothing running: no kernel, no worker process, no TensorFlow task.

A worker whose kernel died is re-parented to init, so it is no longer a descendant of pytest; we
look instead for any process that started during the session and runs something of this checkout.
"""
import time
from pathlib import Path

import pytest

from course_utils.scripts import process_table

ROOT = str(Path(__file__).resolve().parents[1])
_before: set[int] = set()


def pytest_sessionstart(session):
    _before.update(process_table())


def pytest_sessionfinish(session, exitstatus):
    deadline = time.monotonic() + 10       # kernels and their children get a moment to exit
    while True:
        left = {pid: cmd for pid, (_, cmd) in process_table().items() if pid not in _before and ROOT in cmd}
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if left:
        print("\nthe notebooks left processes running:\n" + "\n".join(f"  {p}: {c[:200]}" for p, c in left.items()))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
