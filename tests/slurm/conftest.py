"""The SLURM tier's cluster: started once for the tier, stopped (every daemon, by pid) at its end."""
import os
import shutil
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from slurm_cluster import SlurmCluster, unavailable  # noqa: E402


@pytest.fixture(scope="session")
def cluster():
    """Two SLURM nodes on this machine. Skips where SLURM is not installed or not root, and fails
    there instead when COURSE_REQUIRE_SLURM=1 (`make test` in CI, or `make test SLURM=1`)."""
    reason = unavailable()
    if reason:
        if os.environ.get("COURSE_REQUIRE_SLURM") == "1":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    # not under pytest's tmp_path: munged needs every folder above its socket open to all
    root = tempfile.mkdtemp(prefix="course-slurm-")
    try:
        c = SlurmCluster(root, nodes=2).start()
        yield c
        left = c.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert not left, f"the SLURM cluster left processes running (now killed): {left}"


def pytest_terminal_summary(terminalreporter):
    """Say once, at the end, why the tier was skipped (and how to run it)."""
    reason = unavailable()
    if reason and terminalreporter.stats.get("skipped"):
        terminalreporter.write_line(f"SLURM tier skipped: {reason}")
