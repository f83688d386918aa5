"""cpu_cores() and memory_gib() honour cgroup limits (v2 and v1), read from fake cgroup trees."""
from pathlib import Path

import pytest

from course_utils import hardware


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A fake /sys/fs/cgroup + /proc/self/cgroup that cpu_cores()/memory_gib() read by default."""
    root, proc = tmp_path / "cgroup", tmp_path / "proc_self_cgroup"
    root.mkdir()
    monkeypatch.setattr(hardware, "CGROUP_ROOT", root)
    monkeypatch.setattr(hardware, "PROC_CGROUP", proc)
    monkeypatch.setattr(hardware, "host_cpu_cores", lambda: 64)
    monkeypatch.setattr(hardware, "host_memory_gib", lambda: 256.0)
    return root, proc


def test_cgroup_v2_limits_like_mybinder(fake):
    root, proc = fake
    proc.write_text("0::/user/binder\n")
    write(root, {"cgroup.controllers": "cpu memory", "user/binder/cpu.max": "200000 100000",
                 "user/binder/memory.max": str(2 * 2**30), "user/cpu.max": "max 100000", "user/memory.max": "max"})
    assert hardware.cgroup_cpu_limit() == 2.0
    assert hardware.cgroup_memory_limit() == 2 * 2**30
    assert hardware.cpu_cores() == 2 and hardware.memory_gib() == 2.0
    text = str(hardware.report())
    assert "2 (cgroup CPU quota; the host shows 64)" in text
    assert "2.0 GiB (cgroup memory limit; the host has 256.0 GiB)" in text


def test_cgroup_v2_the_tightest_ancestor_wins_and_fractions_round_up(fake):
    root, proc = fake
    proc.write_text("0::/a/b\n")
    write(root, {"cgroup.controllers": "", "a/cpu.max": "50000 100000", "a/b/cpu.max": "400000 100000",
                 "a/memory.max": "1073741824", "a/b/memory.max": "max"})
    assert hardware.cgroup_cpu_limit() == 0.5 and hardware.cpu_cores() == 1
    assert hardware.memory_gib() == 1.0


def test_cgroup_v2_unlimited(fake):
    root, proc = fake
    proc.write_text("0::/\n")
    write(root, {"cgroup.controllers": "", "cpu.max": "max 100000", "memory.max": "max"})
    assert hardware.cgroup_cpu_limit() is None and hardware.cgroup_memory_limit() is None
    assert hardware.cpu_cores() == 64 and hardware.memory_gib() == 256.0
    assert "host" not in str(hardware.report()).split("GPUs")[0]


def test_cgroup_v1_limits(fake):
    root, proc = fake
    proc.write_text("4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n")
    write(root, {"cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "150000",
                 "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000",
                 "memory/docker/abc/memory.limit_in_bytes": str(3 * 2**30),
                 "memory/memory.limit_in_bytes": "9223372036854771712"})  # v1's "no limit"
    assert hardware.cgroup_cpu_limit() == 1.5 and hardware.cpu_cores() == 2
    assert hardware.cgroup_memory_limit() == 3 * 2**30 and hardware.memory_gib() == 3.0


def test_cgroup_v1_container_sees_its_own_cgroup_at_the_mount_root(fake):
    """Without a cgroup namespace /proc/self/cgroup names the host's path, which does not exist in
    the container's mount: the limits are then those at the mount's root."""
    root, proc = fake
    proc.write_text("4:memory:/kubepods/pod1/xyz\n2:cpu:/kubepods/pod1/xyz\n")
    write(root, {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000",
                 "memory/memory.limit_in_bytes": str(2**30)})
    assert hardware.cgroup_cpu_limit() is None and hardware.cpu_cores() == 64
    assert hardware.memory_gib() == 1.0


def test_no_cgroup_files_means_no_limit(fake):
    root, proc = fake   # nothing written: macOS, or /proc unreadable
    assert hardware.cgroup_cpu_limit() is None and hardware.cgroup_memory_limit() is None
    assert hardware.cpu_cores() == 64 and hardware.memory_gib() == 256.0


def test_limits_on_this_machine_are_consistent():
    assert 1 <= hardware.cpu_cores() <= hardware.host_cpu_cores()
    mem, host = hardware.memory_gib(), hardware.host_memory_gib()
    assert mem is None or host is None or mem <= host
