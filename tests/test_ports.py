"""The ports launchers hand out: never one the OS can give to someone else, never one twice.

Every launcher's port (``launch.run``'s MASTER_PORT, a torchrun job's rendezvous, a TensorFlow
task, MXNet's scheduler, the SLURM daemons, the browser test's JupyterLab) comes from
:func:`course_utils.ports.free_port`.
"""
import socket
import subprocess
import sys
import time

import pytest

from course_utils import ports
from course_utils.scripts import free_port as launchers_free_port


def test_the_launchers_use_the_leased_ports():
    assert launchers_free_port is ports.free_port


@pytest.mark.parametrize(("ephemeral", "expected"), [
    ((32768, 60999), range(20000, 32768)),   # Linux's default
    ((49152, 65535), range(20000, 49152)),   # macOS, Windows (IANA)
    ((40000, 60999), range(20000, 40000)),
    ((1024, 65535), range(1024, 65536)),     # a host that lets the OS use every port: leases only
    ((20500, 60999), range(1024, 65536)),
])
def test_ports_lie_below_the_ephemeral_range(ephemeral, expected):
    assert ports.course_ports(ephemeral) == expected


def test_this_machines_ephemeral_range_is_read_from_proc(tmp_path):
    fake = tmp_path / "ip_local_port_range"
    fake.write_text("40000\t50000\n")
    if sys.platform.startswith("linux"):
        assert ports.ephemeral_range(str(fake)) == (40000, 50000)
    assert ports.ephemeral_range(str(tmp_path / "missing")) == (49152, 65535)


def test_the_os_never_hands_out_a_course_port(tmp_path):
    """What used to take a launcher's port: another socket bound to port 0, or a connection's own
    source port. Neither can land in the course's range."""
    course = ports.course_ports()
    if course == range(1024, 65536):
        pytest.skip("this host's ephemeral range leaves no ports below it")
    port = ports.free_port(leases=tmp_path / "leases.json")
    assert port in course
    listener = socket.create_server(("127.0.0.1", 0), backlog=512)  # holds every connection unaccepted
    taken = []
    try:
        for _ in range(200):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            taken.append(s)
            c = socket.create_connection(listener.getsockname(), timeout=5)
            taken.append(c)
        assert not {s.getsockname()[1] for s in taken} & set(course)
    finally:
        for s in taken:
            s.close()
        listener.close()


def test_a_port_in_use_or_leased_is_skipped_and_none_left_is_a_clear_error(tmp_path):
    leases = tmp_path / "leases.json"
    busy = socket.create_server(("127.0.0.1", 0))
    first = busy.getsockname()[1]
    three = range(first, first + 3)
    try:
        got = {ports.free_port(ports=three, leases=leases) for _ in range(2)}
        assert first not in got and len(got) == 2   # the busy port skipped, the others leased once each
        with pytest.raises(RuntimeError, match=r"no free port in .* all 3 are in use or leased"):
            ports.free_port(ports=three, leases=leases)
    finally:
        busy.close()


def test_a_lease_expires(tmp_path):
    leases = tmp_path / "leases.json"
    port = ports.free_port(leases=leases, lease_s=0.05)
    only = range(port, port + 1)
    with pytest.raises(RuntimeError):
        ports.free_port(ports=only, leases=leases)  # still promised to its first caller
    time.sleep(0.1)
    assert ports.free_port(ports=only, leases=leases) == port


def test_a_damaged_lease_file_is_started_afresh(tmp_path):
    leases = tmp_path / "leases.json"
    leases.write_text('{"2')  # cut short by a crash
    assert ports.free_port(leases=leases) in ports.course_ports()


def test_processes_picking_at_once_never_get_the_same_port(tmp_path):
    leases = tmp_path / "leases.json"
    code = ("import sys; from course_utils import ports; from pathlib import Path; "
            "print(*[ports.free_port(leases=Path(sys.argv[1])) for _ in range(100)])")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(leases)], stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    picked = [int(p) for proc in procs for p in proc.communicate(timeout=60)[0].split()]
    assert len(picked) == 400 and len(set(picked)) == 400


def test_picking_a_port_leaves_the_seeded_random_generator_alone(tmp_path):
    import random

    random.seed(0)
    expected = random.random()
    random.seed(0)
    ports.free_port(leases=tmp_path / "leases.json")
    assert random.random() == expected  # a notebook's seeded results do not depend on its launches
