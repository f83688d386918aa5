import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # so launched workers can import tests/workers.py

# multiprocessing's helpers live as long as pytest itself; everything else must be gone
HELPERS = ("multiprocessing.forkserver", "multiprocessing.resource_tracker")


def descendants(pid: int) -> dict[int, str]:
    """{pid: command line} of every live, non-zombie process below ``pid``."""
    parent, cmd = {}, {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if fields[0] == "Z":
                continue
            child = int(stat.parent.name)
            parent[child] = int(fields[1])
            cmd[child] = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = {}, {pid}
    while frontier:
        frontier = {c for c, p in parent.items() if p in frontier}
        found.update({c: cmd[c] for c in frontier})
    return found


@pytest.fixture(scope="session", autouse=True)
def no_process_left_behind():
    yield
    deadline = time.monotonic() + 5
    while True:
        left = {p: c for p, c in descendants(os.getpid()).items() if not any(h in c for h in HELPERS)}
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not left, f"the tests left processes running: {left}"
