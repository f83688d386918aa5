"""The ports launchers hand out: never one the OS can give to someone else, never one twice.

Every launcher's port (``launch.run``'s MASTER_PORT, a torchrun job's rendezvous, a TensorFlow
task, MXNet's scheduler, the SLURM daemons, the browser test's JupyterLab) comes from
:func:`course_utils.ports.free_port`.
"""
import socket
import subprocess
import sys

import pytest

from course_utils import ports
from course_utils.subprocesses import free_port as launchers_free_port


def test_the_launchers_use_the_leased_ports():
    assert launchers_free_port is ports.free_port


@pytest.mark.parametrize(("ephemeral", "expected"), [
    ((32768, 60999), range(20000, 29000)),   # Linux's default
    ((49152, 65535), range(20000, 29000)),   # macOS, Windows (IANA)
    ((25000, 60999), range(20000, 25000)),
    ((1024, 60999), range(61000, 65536)),    # nothing below: the ports above
    ((20500, 60999), range(61000, 65536)),
    ((1024, 65535), range(1024, 65536)),     # the OS may use every port: leases only
])
def test_ports_lie_outside_the_ephemeral_range(ephemeral, expected):
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


def test_a_port_in_use_or_leased_is_skipped_and_none_left_is_a_clear_error(tmp_path, monkeypatch):
    leases = tmp_path / "leases.json"
    monkeypatch.setattr(ports, "_bindable", lambda host, port: port != 20001)  # someone listens on 20001
    three = range(20000, 20003)
    assert {ports.free_port(ports=three, leases=leases) for _ in range(2)} == {20000, 20002}
    with pytest.raises(RuntimeError, match=r"no free port in 20000-20002 .* all 3 are in use or leased"):
        ports.free_port(ports=three, leases=leases)


def test_a_port_someone_listens_on_cannot_be_bound():
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        assert not ports._bindable("127.0.0.1", port)
    assert ports._bindable("127.0.0.1", port)  # closed without a connection: no TIME_WAIT


def test_a_lease_expires(tmp_path, monkeypatch):
    leases, clock = tmp_path / "leases.json", [1000.0]
    monkeypatch.setattr(ports.time, "time", lambda: clock[0])
    monkeypatch.setattr(ports, "_bindable", lambda host, port: True)
    only = range(20000, 20001)
    assert ports.free_port(ports=only, leases=leases) == 20000
    clock[0] += ports.LEASE_S - 1
    with pytest.raises(RuntimeError):
        ports.free_port(ports=only, leases=leases)  # still promised to its first caller
    clock[0] += 2
    assert ports.free_port(ports=only, leases=leases) == 20000
    clock[0] -= 10 * ports.LEASE_S                  # the clock went back: that lease cannot block for ages
    assert ports.free_port(ports=only, leases=leases) == 20000


def test_the_lease_folder_must_be_this_users_alone(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(RuntimeError, match="not a folder that only you can enter .* set TMPDIR"):
        ports.free_port(leases=shared / "leases.json")
    fresh = tmp_path / "fresh"
    ports.free_port(leases=fresh / "leases.json")
    assert fresh.stat().st_mode & 0o777 == 0o700


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
