"""Ports a launcher hands to the processes it starts, with no race for them.

A launcher must name a port *before* the process that listens on it exists: ``MASTER_PORT`` for
rank 0's store, a TensorFlow task's address, a SLURM daemon's port. The usual trick (bind to port
0, read the number, close) takes the port from the operating system's *ephemeral* range, the pool
every other socket on the machine draws from: a gloo rank's listener, the source port of every
outgoing connection, a Jupyter kernel's five ports. In the seconds before the new process binds
it, any of them may be handed the same number, and the launch dies on "Address already in use".

:func:`free_port` closes that window twice over:

- it picks from ports outside the ephemeral range, which the OS never hands out on its own
  (Linux: ``/proc/sys/net/ipv4/ip_local_port_range``, 32768-60999 by default; elsewhere IANA's
  49152-65535): 20000-28999, below torch's default 29500 and Kubernetes' NodePorts, and
- it leases the port for ``LEASE_S`` seconds in a file every process of this user on this machine
  shares (in a folder only this user can enter, locked while it is read and written), so two
  launches, in two notebooks or two test workers, are never given the same port.

A port someone already listens on, or that is still in TIME_WAIT, is skipped (it cannot be bound).
"""
from __future__ import annotations

import itertools
import json
import os
import random
import socket
import stat
import sys
import tempfile
import time
from pathlib import Path

LOCALHOST = "127.0.0.1"
LEASE_S = 300.0
"""Seconds a port stays promised to its caller: far longer than any launch takes to bind it."""
LOWEST, HIGHEST = 20000, 29000
"""The course's ports: above many services' well-known ports, below torch's default 29500."""
LEASES = Path(tempfile.gettempdir()) / f"course-ports-{os.getuid()}" / "leases.json"
"""The lease file: ``{"port": expiry in seconds since the epoch}``, in a folder of mode 0700."""

_random = random.SystemRandom()  # never the seeded global generator: a notebook's results stay its own


def ephemeral_range(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> tuple[int, int]:
    """``(first, last)`` port the OS assigns to sockets bound to port 0 and to outgoing connections."""
    if sys.platform.startswith("linux"):
        try:
            first, last = map(int, Path(path).read_text().split())
            return first, last
        except (OSError, ValueError):
            pass
    return 49152, 65535


def course_ports(ephemeral: tuple[int, int] | None = None) -> range:
    """The ports :func:`free_port` chooses from: ``LOWEST``-``HIGHEST`` where they lie below the
    ephemeral range, else the ports above it.

    Where neither side has 1,000 ports (a host that widened the range to 1024-65535), every
    unprivileged port is used: leases still keep the course's launches apart, but the OS may then
    hand one of them out (the old race, much rarer).
    """
    first, last = ephemeral or ephemeral_range()
    for ports in (range(LOWEST, min(HIGHEST, first)), range(last + 1, 65536)):
        if len(ports) >= 1000:
            return ports
    return range(1024, 65536)


def free_port(host: str = LOCALHOST, *, ports: range | None = None, leases: Path = LEASES,
              lease_s: float = LEASE_S) -> int:
    """A TCP port on ``host`` that is free now and promised to the caller for ``lease_s`` seconds.

    ``ports`` (default :func:`course_ports`) and ``leases`` (default :data:`LEASES`) are for tests.
    Raises ``RuntimeError`` if every port of ``ports`` is leased or in use.
    """
    import fcntl  # POSIX only, as the launchers are

    ports = course_ports() if ports is None else ports
    _private(leases.parent)
    with open(leases, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
        f.seek(0)
        try:
            held = {int(p): float(t) for p, t in json.loads(f.read() or "{}").items()}
        except (ValueError, AttributeError):
            held = {}  # a file cut short by a crash: the leases in it are lost, not the course
        now = time.time()
        horizon = now + max(lease_s, LEASE_S)  # a lease beyond it was written before the clock went back
        held = {p: t for p, t in held.items() if now < t <= horizon}
        # 64 random picks find a free port at once on any sane machine; then every port, in order
        for port in itertools.chain((_random.choice(ports) for _ in range(64)), ports):
            if port not in held and _bindable(host, port):
                held[port] = now + lease_s
                f.seek(0)
                f.truncate()
                f.write(json.dumps({str(p): t for p, t in sorted(held.items())}))
                return port
    raise RuntimeError(f"no free port in {ports.start}-{ports.stop - 1} on {host}: all {len(ports)} are in use "
                       f"or leased (leases in {leases}). Stop what holds them, or wait {lease_s:g} s.")


def _private(folder: Path) -> None:
    """Create ``folder`` (mode 0700) or check that an existing one is this user's alone."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = folder.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise RuntimeError(f"{folder} holds the course's port leases but is not a folder that only you can "
                           f"enter (owner uid {st.st_uid}, mode {stat.filemode(st.st_mode)}): remove it, or set "
                           "TMPDIR to a folder of your own")


def _bindable(host: str, port: int) -> bool:
    """Whether a listener could bind ``host:port`` now (no SO_REUSEADDR: TIME_WAIT counts as taken)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True
