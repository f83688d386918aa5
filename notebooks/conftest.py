"""The notebook tier must leave nothing running: no kernel, no worker process, no TensorFlow task.

Checked when the session ends: every process below pytest (kernels, and what they started), and
every process that started during the session, runs something of this checkout and was orphaned
(re-parented to init when its kernel died, so no longer below pytest). Under pytest-xdist (`make
test` runs notebooks on every core) the controller checks, after its workers have been shut down:
what a worker left behind is then an orphan, and a worker's own verdict would not reach the report.
"""
import time
from pathlib import Path

import pytest

from course_utils import kernels
from course_utils.subprocesses import descendants, process_table

ROOT = str(Path(__file__).resolve().parents[1])
_before: set[int] = set()
# nbval's kernels talk over Unix sockets (no ports to race for) and, if one dies, its stderr and exit
# status are in the report: course_utils/kernels.py
kernels.use_for_every_kernel()


def _is_xdist_worker(session) -> bool:
    return hasattr(session.config, "workerinput")


def pytest_sessionstart(session):
    _before.update(process_table())


@pytest.hookimpl(trylast=True)   # after pytest-xdist's own sessionfinish has stopped the workers
def pytest_sessionfinish(session, exitstatus):
    if _is_xdist_worker(session):
        return
    deadline = time.monotonic() + 30       # kernels and their children get time to exit on a loaded machine
    while True:
        orphans = {pid: cmd for pid, (parent, cmd) in process_table().items()
                   if parent == 1 and pid not in _before and ROOT in cmd}
        left = {**descendants(), **orphans}
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if left:
        print("\nthe notebooks left processes running:\n" + "\n".join(f"  {p}: {c[:200]}" for p, c in left.items()))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
