"""A private SLURM cluster on this machine, for the tests: munged, slurmctld and N slurmd "nodes".

Everything lives under one folder (slurm.conf, the munge key and socket, state, spool, logs); the
daemons listen on free ports and know each other as 127.0.0.1, so nothing touches the machine's
own SLURM or munge, if it has one. The slurmd listen on 127.0.0.1 only (``NoInAddrAny``); slurmctld
22.05 has no such setting and listens on every interface, and answers only what is signed with
this cluster's own munge key. Several slurmd on one host each serve one node name
(``slurmd -N node2``), which gives real multi-node jobs: ``srun`` starts one task per "node", and
each node's processes get that node's ``SLURMD_NODENAME``.

    with SlurmCluster(tmp_path, nodes=2) as cluster:
        job = cluster.submit("recipes/slurm/train_ddp.sbatch", options=["--gpus-per-node=0"])
        cluster.wait(job)["JobState"]            # "COMPLETED"

Needs Debian's packages (``slurmctld slurmd slurm-client munge``: ``make test SLURM=1`` installs them,
never as services) and root (slurmd starts every job's processes). :meth:`stop` stops every daemon
by pid and kills whatever this cluster started and left running (:meth:`processes`).
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from course_utils.subprocesses import free_port

COMMANDS = ("munged", "mungekey", "munge", "slurmctld", "slurmd", "sbatch", "scontrol", "scancel", "sinfo", "squeue")
ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED"}   # a job in these has not ended


def unavailable() -> str | None:
    """Why a private cluster cannot start here (None if it can)."""
    missing = [c for c in COMMANDS if shutil.which(c) is None]
    if missing:
        return (f"SLURM is not installed ({', '.join(missing)} not found). `make test SLURM=1` installs "
                "Debian's slurmctld, slurmd, slurm-client and munge (apt-get; no service is started or enabled) "
                "and runs this tier; CI does so by itself (CI=true)")
    if os.geteuid() != 0:
        return ("the SLURM tier runs slurmd, which starts every job's processes, as root: run it as root "
                "(CI does; or `sudo make test-slurm SLURM=1`)")
    return None


def node_layout() -> dict[str, int]:
    """This machine's CPU layout and memory (MB) as ``slurmd -C`` reports them."""
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True).stdout
    fields = dict(re.findall(r"(\w+)=(\d+)", out.splitlines()[0]))
    keys = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory")
    return {k: int(fields[k]) for k in keys}


class SlurmCluster:
    """``nodes`` SLURM nodes on this host, each claiming the host's CPUs and at most 2000 MB."""

    def __init__(self, root: str | os.PathLike, nodes: int = 2, memory_mb: int = 2000):
        self.root = Path(root)
        self.nodes = [f"node{i}" for i in range(1, nodes + 1)]
        self.layout = node_layout()
        self.layout["RealMemory"] = min(memory_mb, self.layout["RealMemory"])
        self.conf = self.root / "slurm.conf"
        # clients, daemons and jobs all read this cluster's config; no SLURM_* of an enclosing job leaks in
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))}
        self.env["SLURM_CONF"] = str(self.conf)
        self.daemons: dict[str, subprocess.Popen] = {}

    @property
    def cpus(self) -> int:
        """CPUs of each node."""
        return self.layout["CPUs"]

    # ---- start ------------------------------------------------------------------------------------
    def start(self, timeout_s: float = 30.0) -> SlurmCluster:
        for sub in ("munge", "state", "log", *(f"spool/{n}" for n in self.nodes)):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)   # munged refuses a socket below a folder others cannot enter (pytest's tmp_path)
        (self.root / "munge").chmod(0o755)
        self._write_conf()
        try:
            munge = self.root / "munge"
            subprocess.run(["mungekey", "--create", f"--keyfile={munge / 'munge.key'}"], check=True)
            self._daemon("munged", ["munged", "--foreground", f"--socket={munge / 'munge.sock'}",
                                    f"--key-file={munge / 'munge.key'}", f"--pid-file={munge / 'munged.pid'}",
                                    f"--seed-file={munge / 'munged.seed'}", f"--log-file={munge / 'munged.log'}"])
            self._until(lambda: (munge / "munge.sock").exists(), timeout_s, "munged to open its socket")
            self._daemon("slurmctld", ["slurmctld", "-D"])
            self._until(lambda: "UP" in self.run("scontrol", "ping", check=False).stdout, timeout_s,
                        "slurmctld to answer `scontrol ping`")
            for node in self.nodes:
                self._daemon(f"slurmd-{node}", ["slurmd", "-D", "-N", node])
            self._until(self._all_idle, timeout_s, f"{len(self.nodes)} node(s) to be idle in `sinfo`")
        except BaseException:
            self.stop()
            raise
        return self

    def _write_conf(self) -> None:
        r, host = self.root, socket.gethostname().split(".")[0]
        layout = " ".join(f"{k}={v}" for k, v in self.layout.items())
        lines = [
            "ClusterName=course", f"SlurmctldHost={host}(127.0.0.1)", f"SlurmctldPort={free_port()}",
            "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={r / 'munge/munge.sock'}",
            # no cgroups, no accounting database, no mail: what a container without systemd allows
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            "AccountingStorageType=accounting_storage/none", "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none", "MailProg=/bin/true", "ReturnToService=2",
            "CommunicationParameters=NoInAddrAny",   # daemons listen on 127.0.0.1 only
            "KillWait=5",                 # seconds between SIGTERM and SIGKILL when a step is cancelled
            f"StateSaveLocation={r / 'state'}", f"SlurmdSpoolDir={r / 'spool/%n'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}", f"SlurmdPidFile={r / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={r / 'log/slurmctld.log'}", f"SlurmdLogFile={r / 'log/slurmd-%n.log'}",
            *(f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={free_port()} {layout}" for n in self.nodes),
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        ]
        self.conf.write_text("\n".join(lines) + "\n")

    def _daemon(self, name: str, cmd: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "w")
        self.daemons[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                              env=self.env, start_new_session=True)
        log.close()

    def _until(self, ready, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            dead = [n for n, p in self.daemons.items() if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "".join(f"--- {p.name} ---\n{p.read_text()[-1500:]}\n"
                               for p in sorted((self.root / "log").iterdir()))
                reason = f"{', '.join(dead)} exited" if dead else f"no answer after {timeout_s:g} s"
                raise RuntimeError(f"the private SLURM cluster did not start: waiting for {what}, {reason}.\n{logs}")
            time.sleep(0.1)

    def _all_idle(self) -> bool:
        states = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False).stdout.split()
        return states[1::2] == ["idle"] * len(self.nodes)

    # ---- jobs -------------------------------------------------------------------------------------
    def run(self, *cmd: str, check: bool = True, timeout_s: float = 30.0, cwd=None) -> subprocess.CompletedProcess:
        """Run a SLURM client command (``scontrol``, ``sbatch``...) against this cluster."""
        return subprocess.run(cmd, capture_output=True, text=True, env=self.env, check=check, timeout=timeout_s,
                              cwd=cwd)

    def submit(self, script: str | os.PathLike, *script_args: str, options: list[str] = (),
               env: dict[str, str] | None = None, cwd: str | os.PathLike | None = None) -> int:
        """``sbatch options script script_args`` from ``cwd``; the job gets this process's environment
        plus ``env``. Returns the job id."""
        try:
            out = subprocess.run(["sbatch", "--parsable", *options, str(script), *script_args], capture_output=True,
                                 text=True, env={**self.env, **(env or {})}, cwd=cwd, check=True, timeout=30)
        except subprocess.CalledProcessError as e:
            raise RuntimeError(f"sbatch refused the job: {e.stderr.strip()}") from None
        return int(out.stdout.strip().split(";")[0])

    def job(self, job: int) -> dict[str, str]:
        """``scontrol show job``'s fields (JobState, ExitCode, Reason, NodeList, ...)."""
        return dict(re.findall(r"(\w+)=(\S*)", self.run("scontrol", "show", "job", "-o", str(job)).stdout))

    def wait(self, job: int, timeout_s: float = 120.0) -> dict[str, str]:
        """Wait until ``job`` has ended; its fields. On timeout the job is cancelled and RuntimeError raised."""
        deadline = time.monotonic() + timeout_s
        while (info := self.job(job))["JobState"] in ACTIVE:
            if time.monotonic() > deadline:
                self.run("scancel", str(job), check=False)
                raise RuntimeError(f"job {job} still {info['JobState']} after {timeout_s:g} s; cancelled")
            time.sleep(0.2)
        return info

    def processes(self, **environ: str) -> dict[int, str]:
        """``{pid: command line}`` of live processes this cluster started (daemons, steps, job tasks:
        their environment names this cluster's config) whose environment also has ``environ``."""
        want = {"SLURM_CONF": str(self.conf), **{k: str(v) for k, v in environ.items()}}
        found = {}
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                if proc.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
                env = dict(kv.split("=", 1) for kv in proc.joinpath("environ").read_bytes().decode(
                    errors="replace").split("\0") if "=" in kv)
                if all(env.get(k) == v for k, v in want.items()):
                    found[int(proc.name)] = proc.joinpath("cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            except (OSError, IndexError, ValueError):
                continue
        found.pop(os.getpid(), None)
        return found

    # ---- stop -------------------------------------------------------------------------------------
    def stop(self, timeout_s: float = 15.0) -> dict[int, str]:
        """Cancel every job, stop every daemon by pid (SIGTERM, then SIGKILL), then kill whatever this
        cluster started that is still alive. Returns what had to be killed that way (should be {})."""
        if "slurmctld" in self.daemons and self.daemons["slurmctld"].poll() is None:
            jobs = self.run("squeue", "-h", "-o", "%i", check=False).stdout.split()
            if jobs:
                self.run("scancel", "--full", *jobs, check=False)
            deadline = time.monotonic() + timeout_s
            while self.run("squeue", "-h", check=False).stdout.strip() and time.monotonic() < deadline:
                time.sleep(0.2)
        for name in reversed(list(self.daemons)):      # slurmd, then slurmctld, then munged
            self.daemons[name].send_signal(signal.SIGTERM)
        for proc in self.daemons.values():
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.daemons.clear()
        left = self.processes()
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return left

    def __enter__(self) -> SlurmCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
