import os
import sys
import time

import pytest

from course_utils import kernels
from course_utils.subprocesses import descendants

sys.path.insert(0, os.path.dirname(__file__))  # so launched workers can import tests/workers.py
kernels.use_for_every_kernel()  # every kernel a test starts (otter's, JupyterLab's): Unix sockets, no ports

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under ``--dist loadgroup`` (the unit tier), a file's tests share one xdist worker, as under
    ``loadfile`` (module fixtures are built once), except test_mutants.py's, which go one by one:
    its questions are slow and independent, and one worker would take them all."""
    for item in items:
        if item.path.name != "test_mutants.py":
            item.add_marker(pytest.mark.xdist_group(item.path.name))


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
