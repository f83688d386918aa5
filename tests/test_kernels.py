"""Kernels start whatever else binds ports meanwhile, and a kernel that dies says why.

The race these tests plant is the one that failed a whole chapter under nbval ("Kernel died before
replying to kernel_info"): jupyter_client writes five free TCP ports into the kernel's connection
file, and before the kernel binds them another process takes one. Measured before the fix (two
loops of four-rank gloo launches beside two loops of kernel starts, 2 cores): 1 kernel in 300
died, on ``ZMQError: Address already in use (addr='tcp://127.0.0.1:37849')``.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from jupyter_client.manager import KernelManager

from course_utils import kernels

ROOT = Path(__file__).resolve().parents[1]


class PortThief:
    """Takes every TCP port in the kernel's connection file after it is written and before the
    kernel starts: what another process did, by chance, in the failing runs."""

    stolen: list[socket.socket]

    async def launch_kernel(self, cmd, **kwargs):
        self.stolen = []
        if self.connection_info["transport"] == "tcp":
            for channel in kernels.CHANNELS:
                s = socket.socket()
                s.bind((self.connection_info["ip"], self.connection_info[f"{channel}_port"]))
                s.listen()
                self.stolen.append(s)
        return await super().launch_kernel(cmd, **kwargs)


class TcpWithThief(PortThief, kernels.CourseProvisioner):
    transport = "tcp"  # jupyter_client's ports, as every kernel had before


class IpcWithThief(PortThief, kernels.CourseProvisioner):
    pass


def manager(provisioner_class) -> KernelManager:
    """A manager for a python3 kernel that ``provisioner_class`` will start."""
    km = KernelManager(kernel_name="python3")
    km.provisioner = provisioner_class(kernel_id="planted", kernel_spec=km.kernel_spec, parent=km)
    return km


def start(km: KernelManager):
    """Start the kernel; its ready client (or the error, with the kernel shut down)."""
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
    except BaseException:
        stop(km, kc)
        raise
    return kc


def stop(km, kc) -> None:
    kc.stop_channels()
    km.shutdown_kernel(now=True)


def test_the_planted_race_kills_a_kernel_on_tcp_and_the_report_names_the_port(capfd):
    km = manager(TcpWithThief)
    thief = km.provisioner
    try:
        with pytest.raises(RuntimeError, match="Kernel died before replying to kernel_info"):
            start(km)
    finally:
        for s in thief.stolen:
            s.close()
    report = capfd.readouterr().err
    assert "The Jupyter kernel (pid" in report and "exited with status 1" in report, report
    assert "connection (tcp): shell 127.0.0.1:" in report, report
    assert "Address already in use" in report, report  # the kernel's own traceback, from its stderr


def test_the_same_race_cannot_touch_a_course_kernel(capfd):
    km = manager(IpcWithThief)
    kc = start(km)
    try:
        info = km.get_connection_info()
        assert info["transport"] == "ipc" and km.provisioner.stolen == []  # no port to take
        folder = Path(km.provisioner.folder)
        assert folder.stat().st_mode & 0o777 == 0o700  # no other user can reach its sockets
        assert all(Path(f"{info['ip']}-{info[c + '_port']}").is_socket() for c in kernels.CHANNELS)
        reply = kc.execute_interactive("print(6 * 7)", timeout=30)
        assert reply["content"]["status"] == "ok"
    finally:
        stop(km, kc)
    assert not folder.exists(), "the sockets' folder should go with the kernel"
    assert "The Jupyter kernel" not in capfd.readouterr().err  # asked to stop: nothing to report


def test_every_kernel_a_test_starts_is_a_course_kernel():
    assert os.environ["JUPYTER_DEFAULT_PROVISIONER_NAME"] == kernels.NAME  # tests/conftest.py
    km = KernelManager(kernel_name="python3")
    km.start_kernel()
    try:
        assert isinstance(km.provisioner, kernels.CourseProvisioner)
        assert km.get_connection_info()["transport"] == "ipc"
    finally:
        km.shutdown_kernel(now=True)


def test_a_restarted_kernel_keeps_its_sockets(capfd):
    km = manager(kernels.CourseProvisioner)
    kc = start(km)
    try:
        folder = km.provisioner.folder
        km.restart_kernel(now=True)
        kc.wait_for_ready(timeout=60)
        assert km.provisioner.folder == folder
        assert kc.execute_interactive("x = 1", timeout=30)["content"]["status"] == "ok"
    finally:
        stop(km, kc)
    assert not Path(folder).exists()
    assert "The Jupyter kernel" not in capfd.readouterr().err  # restarted and stopped on request


def test_exit_statuses_read_as_words():
    assert kernels.describe_exit(3) == "exited with status 3"
    assert kernels.describe_exit(-9) == "was killed by SIGKILL (the out-of-memory killer sends this)"
    assert kernels.describe_exit(-11) == "was killed by SIGSEGV"
    assert kernels.describe_exit(-40) == "was killed by signal 40"  # real-time signals have no name


def test_a_kernel_killed_from_outside_is_reported(capfd):
    km = manager(kernels.CourseProvisioner)
    kc = start(km)
    try:
        os.kill(km.provisioner.pid, signal.SIGKILL)  # what the out-of-memory killer does
        km.provisioner.process.wait(10)
        assert not km.is_alive()
    finally:
        stop(km, kc)
    report = capfd.readouterr().err
    assert "was killed by SIGKILL (the out-of-memory killer sends this)" in report, report
    assert report.count("The Jupyter kernel") == 1  # once, however often it is polled


def test_nbval_shows_a_dying_kernels_stderr_and_exit_status(tmp_path):
    """What a contributor reads when a notebook's kernel cannot start (a planted kernel that can't)."""
    spec = tmp_path / "kernels" / "dies"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": ["python", "-c", "import sys; print('planted: this kernel cannot start', file=sys.stderr); "
                 "sys.exit(3)", "{connection_file}"], "display_name": "dies", "language": "python"}))
    nb = {"cells": [{"cell_type": "code", "execution_count": 1, "id": "c0", "metadata": {}, "source": ["print(42)"],
                     "outputs": [{"name": "stdout", "output_type": "stream", "text": ["42\n"]}]}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "chapter.ipynb").write_text(json.dumps(nb))
    temp = Path(tempfile.mkdtemp(prefix="t-", dir="/tmp"))  # the kernel's folder goes here (short: sockets)
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "--nbval", "--nbval-kernel-name", "dies", "-p",
                               "no:cacheprovider", "-q", "chapter.ipynb"], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120,
                              env={**os.environ, "JUPYTER_PATH": str(tmp_path), "TMPDIR": str(temp)})
        left = [p.name for p in temp.glob("course-kernel-*")]
    finally:
        shutil.rmtree(temp)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "Kernel died before replying to kernel_info" in out, out  # what nbval says, as before
    report = out[out.index("Captured stderr setup"):]                   # and now, below it, why
    assert "exited with status 3" in report and "planted: this kernel cannot start" in report, report
    assert "connection (ipc):" in report, report
    assert not left, "the dead kernel's folder should be removed"
