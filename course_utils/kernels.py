"""Jupyter kernels that cannot lose a race for a port, and that say why when they die.

jupyter_client starts a kernel by choosing five TCP ports (bind to port 0, read the number,
close), writing them into a connection file and starting the kernel, which binds them a second or
more later, once Python and ipykernel are imported. In that window any other socket on the
machine may be handed one of the five (a gloo rank's listener, a launcher's port, another
kernel's): the kernel exits on "Address already in use", and its caller reports only "Kernel died
before replying to kernel_info", because nbval sends the kernel's stderr to /dev/null.

:class:`CourseProvisioner` is a *kernel provisioner*, jupyter_client's hook for how a kernel
is started. It

- connects the kernel over Unix domain sockets (ZeroMQ's ``ipc`` transport) in a folder of its
  own, readable only by this user: no ports, so nothing to race for; and
- writes the kernel's stderr to a file in that folder and, when the kernel dies without having
  been asked to stop, prints to the caller's stderr its exit status, its last stderr lines and the
  sockets it was given (:meth:`CourseProvisioner.death_report`), so a test report shows the cause.
  (A kernel that lives keeps its stderr to itself: ipykernel sends what cells print to the
  notebook; only its own log lines, and a C library's, went to the terminal before.)

It is registered as ``course-ipc`` (pyproject.toml). Every test tier makes it the default for the
kernels it starts, by nbval, nbclient, otter or JupyterLab, with :func:`use_for_every_kernel`.
"""
from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
import weakref
from importlib.metadata import entry_points
from typing import Any

from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.provisioning import LocalProvisioner

NAME = "course-ipc"
ENV = {"JUPYTER_DEFAULT_PROVISIONER_NAME": NAME}
"""Set in a process's environment, every kernel it (or a child) starts without a provisioner of
its own in its kernelspec is started by :class:`CourseProvisioner`."""
CHANNELS = ("shell", "iopub", "stdin", "control", "hb")


def use_for_every_kernel() -> None:
    """Make :class:`CourseProvisioner` start every kernel this process and its children start (through
    :data:`ENV`), unless the kernel's spec names a provisioner of its own.

    Raises ``RuntimeError`` where jupyter_client cannot find it: course_utils not installed with pip.
    """
    if not any(e.name == NAME for e in entry_points(group="jupyter_client.kernel_provisioners")):
        raise RuntimeError(f"jupyter_client cannot find the kernel provisioner {NAME!r}: install the course's "
                           "package into this environment (`pip install -e .`; `make test` does it)")
    os.environ.update(ENV)


class CourseProvisioner(LocalProvisioner):
    """A local kernel on Unix sockets in a private folder, whose unexpected death is explained.

    ``transport = "tcp"`` (a subclass's) keeps jupyter_client's TCP ports, the old race included:
    the tests replay that race with it.
    """

    transport: str = "ipc"
    folder: str | None = None
    stderr_path: str | None = None
    started: float = 0.0
    command: list[str] = []
    stopping: bool = False
    reported: bool = False

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        """Give the kernel a new private folder and, for ipc, put its sockets there."""
        km = self.parent
        if self.folder is None:  # a restart keeps its folder and connection file
            self.folder = _private_folder()
            weakref.finalize(self, shutil.rmtree, self.folder, True)  # also if nobody calls cleanup()
            if km is not None and self.transport == "ipc":
                km.transport = "ipc"
                km.cache_ports = False  # TCP-port bookkeeping: nothing to cache
                km.ip = os.path.join(self.folder, "k")  # the sockets are k-1 ... k-5
                for channel in CHANNELS:
                    setattr(km, f"{channel}_port", 0)  # ipc "ports" are suffixes, picked in the new folder
        return await super().pre_launch(**kwargs)

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        """Start the kernel with its stderr in ``folder/stderr.log`` (whatever the caller asked for)."""
        self.stderr_path = os.path.join(self.folder or _private_folder(), "stderr.log")
        self.stopping = self.reported = False
        self.started, self.command = time.monotonic(), list(cmd)
        with open(self.stderr_path, "wb") as stderr:
            return await super().launch_kernel(cmd, **{**kwargs, "stderr": stderr})

    async def poll(self) -> int | None:
        """The exit status, or None while the kernel runs; an unexpected death is reported once."""
        status = await super().poll()
        if status is not None and self.process is not None and not self.stopping and not self.reported:
            self.reported = True
            try:
                report = self.death_report(status)
            except Exception as exc:  # noqa: BLE001 - the report must never break is_alive()
                report = f"The Jupyter kernel (pid {self.pid}) {describe_exit(status)} ({exc!r} while reporting it)"
            print(report, file=sys.stderr, flush=True)
        return status

    async def shutdown_requested(self, restart: bool = False) -> None:
        self.stopping = True
        await super().shutdown_requested(restart)

    async def kill(self, restart: bool = False) -> None:
        self.stopping = True
        await super().kill(restart)

    async def terminate(self, restart: bool = False) -> None:
        self.stopping = True
        await super().terminate(restart)

    async def cleanup(self, restart: bool = False) -> None:
        await super().cleanup(restart)
        if self.folder and not restart:
            shutil.rmtree(self.folder, ignore_errors=True)  # the sockets and the stderr log
            self.folder = None

    def death_report(self, status: int, lines: int = 40) -> str:
        """What a test report shows of a kernel that died: how, after how long, on which sockets,
        and the last ``lines`` lines it wrote to stderr."""
        info = self.connection_info
        sep = "-" if info.get("transport") == "ipc" else ":"  # ipc: socket files k-1 ...; tcp: ip:port
        sockets = ", ".join(f"{c} {info.get('ip')}{sep}{info.get(c + '_port')}" for c in CHANNELS)
        try:
            with open(self.stderr_path or "", "rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - 64_000))  # the end of a long log is enough
                tail = f.read().decode(errors="replace").rstrip().splitlines()[-lines:]
        except OSError:
            tail = []
        stderr = "\n".join("  | " + line for line in tail) if tail else "  (it wrote nothing to stderr)"
        return (f"The Jupyter kernel (pid {self.pid}) {describe_exit(status)}, "
                f"{time.monotonic() - self.started:.1f} s after it was started, without being asked to stop.\n"
                f"  command: {' '.join(self.command)}\n"
                f"  connection ({info.get('transport')}): {sockets}\n"
                f"  its stderr (last {lines} lines):\n{stderr}")


def describe_exit(status: int) -> str:
    """``"exited with status 1"``, or ``"was killed by SIGKILL (...)"`` for a negative status."""
    if status >= 0:
        return f"exited with status {status}"
    try:
        name = signal.Signals(-status).name
    except ValueError:  # a real-time signal has a number, not a name
        name = f"signal {-status}"
    why = " (the out-of-memory killer sends this)" if name == "SIGKILL" else ""
    return f"was killed by {name}{why}"


def _private_folder() -> str:
    """A new folder only this user can enter (mkdtemp: mode 0700), with a short path: a Unix
    socket's path has room for about 100 bytes, and a long $TMPDIR (macOS's) can fill it."""
    folder = tempfile.mkdtemp(prefix="course-kernel-")
    if len(folder) > 80 and os.path.isdir("/tmp"):
        os.rmdir(folder)
        folder = tempfile.mkdtemp(prefix="course-kernel-", dir="/tmp")
    return folder
