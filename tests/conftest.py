import os
import sys
import time

import pytest

from course_utils import kernels
from course_utils.scripts import descendants

sys.path.insert(0, os.path.dirname(__file__))  # so launched workers can import tests/workers.py
kernels.use_for_every_kernel()  # every kernel a test starts (otter's, JupyterLab's): Unix sockets, no ports

# multiprocessing's helpers live as long as pytest itself; everything else must be gone
HELPERS = ("multiprocessing.forkserver", "multiprocessing.resource_tracker")


@pytest.fixture(scope="session", autouse=True)
def no_process_left_behind():
    yield
    deadline = time.monotonic() + 30  # a leaked process never exits; a slow one on a loaded machine must not fail
    while True:
        left = {p: c for p, c in descendants(os.getpid()).items() if not any(h in c for h in HELPERS)}
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not left, f"the tests left processes running: {left}"
