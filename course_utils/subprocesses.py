"""Run a script or command as a subprocess that cannot outlive its welcome.

``run_command(cmd)`` starts ``cmd`` in its own session with a safe environment (127.0.0.1, gloo on
loopback, one thread, quiet TensorFlow), captures its output, and on a timeout kills the whole
process tree. ``torchrun(script)`` runs a script under ``torchrun --standalone`` that way;
``torchrun_nodes(script, nnodes=2)`` runs it as a multi-node job whose "nodes" are local processes.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from . import placement, quiet
from .ports import LOCALHOST, free_port  # noqa: F401 - re-exported: the launchers' ports
from .progress import Waiting

COURSE_ROOT = Path(__file__).resolve().parents[1]
"""The folder that holds course_utils: the repository root, or site-packages when installed."""


def course_pythonpath(path: str | None = None) -> str | None:
    """``path`` (a ``PYTHONPATH``; default: this process's) with the folder that holds this very
    course_utils added, so that a child process imports it; unchanged when course_utils is installed
    in site-packages (every child finds it there already).

    On Colab the course is a folder put on the kernel's ``sys.path`` by the set-up cell; a new
    process does not inherit ``sys.path``, so without this ``python -m course_utils.tfcluster``, a
    ``torchrun`` script or a rank's own subprocess could not ``import course_utils``. The folder
    goes after the entries already there (a caller's ``work/`` folder keeps its precedence), and
    like them before site-packages, so an older installed copy does not win.
    """
    path = os.environ.get("PYTHONPATH") if path is None else path
    if str(COURSE_ROOT) in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
        return path or None
    entries = [p for p in (path or "").split(os.pathsep) if p]
    return os.pathsep.join(entries if str(COURSE_ROOT) in entries else [*entries, str(COURSE_ROOT)])


def _importable(env: dict[str, str]) -> dict[str, str]:
    """``env`` with :func:`course_pythonpath` applied to its ``PYTHONPATH`` (a caller's own
    ``PYTHONPATH``, e.g. ``{"PYTHONPATH": work}``, must not hide course_utils)."""
    path = course_pythonpath(env.get("PYTHONPATH", ""))
    return {**env, "PYTHONPATH": path} if path else env


def safe_env(threads: int = 1, master_port: int | None = None) -> dict[str, str]:
    """Environment variables that keep distributed runs on loopback and quiet (:data:`quiet.ENV`),
    and let every process import this course_utils (:func:`course_pythonpath`).

    ``threads`` is the OpenMP/MKL thread count per process (1 rank per core is the rule on CPU).
    """
    env = {
        "MASTER_ADDR": LOCALHOST,
        "GLOO_SOCKET_IFNAME": "lo",
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        **quiet.ENV,
    }
    if master_port is not None:
        env["MASTER_PORT"] = str(master_port)
    path = course_pythonpath()
    if path:
        env["PYTHONPATH"] = path
    return env


def process_table() -> dict[int, tuple[int, str]]:
    """``{pid: (parent pid, command line)}`` of every live (not zombie) process. Reads /proc
    (Linux); elsewhere returns {}."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if fields[0] == "Z":
                continue
            cmd = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            table[int(stat.parent.name)] = (int(fields[1]), cmd)
        except (OSError, IndexError, ValueError):
            continue
    return table


def descendants(pid: int | None = None) -> dict[int, str]:
    """``{pid: command line}`` of every live process below ``pid`` (default: this one).

    A notebook or test can assert that a launch left nothing running: ``assert not descendants()``.
    """
    table = process_table()
    found, frontier = {}, {os.getpid() if pid is None else pid}
    while frontier:
        frontier = {child for child, (parent, _) in table.items() if parent in frontier}
        found.update({child: table[child][1] for child in frontier})
    return found


def require_script(script: str | os.PathLike) -> None:
    """Fail with a clear error, before anything is launched, if ``script`` is not a file."""
    if not Path(script).is_file():
        raise ValueError(f"no script at {script!r}; write it first (e.g. with %%writefile)")


class CommandError(RuntimeError):
    """A subprocess failed or timed out; the message carries the tail of its output."""


def run_command(cmd: Sequence[str], *, timeout_s: float = 120.0, env: dict[str, str] | None = None,
                cwd: str | os.PathLike | None = None, check: bool = True,
                progress: str | None = None) -> subprocess.CompletedProcess:
    """Run ``cmd`` in its own session with :func:`safe_env` added, capture stdout+stderr as text
    (framework log lines removed: :func:`quiet.strip_logs`; an error message keeps them).

    On timeout the whole process group (the command and everything it started) is killed and
    reaped, and :class:`CommandError` is raised. With ``check`` a non-zero exit raises too.
    ``progress``: a label for a progress bar shown while it runs (then :func:`run_commands` runs it).
    """
    if progress:
        return run_commands([cmd], timeout_s=timeout_s, env=env, cwd=cwd, check=check, progress=progress)[0]
    full_env = _importable({**os.environ, **safe_env(), **(env or {})})
    proc = subprocess.Popen(list(map(str, cmd)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, env=full_env, cwd=cwd,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise CommandError(f"{' '.join(map(str, cmd))!r} timed out after {timeout_s:g} s and was "
                           f"killed with its children.\n--- output (tail) ---\n{_last(out)}") from None
    finally:
        try:  # reap anything the command left behind in its session
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    result = subprocess.CompletedProcess(proc.args, proc.returncode, quiet.strip_logs(out), "")
    if check and proc.returncode != 0:
        raise CommandError(f"{' '.join(map(str, cmd))!r} failed with exit code {proc.returncode}."
                           f"\n--- output (tail) ---\n{_last(out)}")
    return result


def _last(text: str, lines: int = 30) -> str:
    return "\n".join((text or "").rstrip().splitlines()[-lines:])


def _torchrun_cmd(launch_args: Sequence[str], script: str | os.PathLike, script_args: Sequence[str],
                  nproc_per_node: int, ranks: str, extra_args: Sequence[str]) -> list[str]:
    require_script(script)
    if not isinstance(nproc_per_node, int) or nproc_per_node < 1:
        raise ValueError(f"nproc_per_node must be an integer >= 1, got {nproc_per_node!r}")
    return [sys.executable, "-m", "torch.distributed.run", *launch_args, f"--local-addr={LOCALHOST}",
            f"--nproc-per-node={nproc_per_node}", "--tee=3",
            *([f"--local-ranks-filter={ranks}"] if ranks else []), *extra_args, str(script), *script_args]


def torchrun(script: str | os.PathLike, *script_args: str, nproc_per_node: int = 2,
             timeout_s: float = 120.0, ranks: str = "0", threads_per_rank: int = 1,
             extra_args: Sequence[str] = (), env: dict[str, str] | None = None,
             progress: str | None = None) -> str:
    """Run ``script`` under ``torchrun --standalone`` on this machine and return its output.

    ``ranks`` is torchrun's ``--local-ranks-filter``: "0" shows rank 0 only (default), "0,1" both,
    "" all ranks. Output lines are prefixed by torchrun with ``[default<rank>]:``.
    Raises :class:`CommandError` (with the output tail) on failure or timeout. ``progress``: a
    label for a progress bar shown while it runs.
    """
    cmd = _torchrun_cmd(["--standalone"], script, script_args, nproc_per_node, ranks, extra_args)
    full_env = {**safe_env(threads_per_rank), **(env or {})}
    return run_command(cmd, timeout_s=timeout_s, env=full_env, progress=progress).stdout


def torchrun_nodes(script: str | os.PathLike, *script_args: str, nnodes: int = 2, nproc_per_node: int = 1,
                   timeout_s: float = 120.0, join_timeout_s: float = 30.0, ranks: str = "",
                   threads_per_rank: int = 1, extra_args: Sequence[str] = (),
                   env: dict[str, str] | None = None, progress: str | None = None) -> list[str]:
    """Simulate ``nnodes`` machines on localhost: one torchrun agent per "node", all meeting at a
    c10d rendezvous on 127.0.0.1:<free port> — the exact flags a multi-node job uses, with the
    head node's address replaced by loopback. Returns each agent's output, in the order the agents
    were started (the rendezvous, not that order, decides which agent becomes node 0).

    Each "node" sees only its own GPUs (:func:`placement.simulated_node_gpus`): with fewer than
    ``nnodes * nproc_per_node`` GPUs, none, so its processes run on the CPU with gloo.
    ``join_timeout_s`` is how long the agents wait for every node to join before giving up.
    If one agent fails or the timeout passes, all agents are killed and :class:`CommandError` raised.
    """
    if not isinstance(nnodes, int) or nnodes < 1:
        raise ValueError(f"nnodes must be an integer >= 1, got {nnodes!r}")
    rdzv = ["--nnodes", str(nnodes), "--rdzv-backend=c10d", f"--rdzv-endpoint={LOCALHOST}:{free_port()}",
            f"--rdzv-id=course-{os.getpid()}", f"--rdzv-conf=join_timeout={join_timeout_s:g}"]
    cmds = [_torchrun_cmd(rdzv, script, script_args, nproc_per_node, ranks, extra_args)] * nnodes
    full_env = {**safe_env(threads_per_rank), **(env or {})}
    # real nodes have their own GPUs; simulated ones get disjoint slices, or none (then gloo)
    gpus = [{"CUDA_VISIBLE_DEVICES": ids} for ids in placement.simulated_node_gpus(nnodes, nproc_per_node)]
    return [r.stdout for r in run_commands(cmds, timeout_s=timeout_s, env=full_env, envs=gpus, progress=progress)]


def run_commands(cmds: Sequence[Sequence[str]], *, timeout_s: float = 120.0, env: dict[str, str] | None = None,
                 envs: Sequence[dict[str, str]] | None = None, cwd: str | os.PathLike | None = None,
                 progress: str | None = None,
                 check: bool = True) -> list[subprocess.CompletedProcess]:
    """Run several commands at once (each in its own session, as :func:`run_command` does).

    ``env`` is added to every command's environment, ``envs[i]`` (optional) to command i's only
    (e.g. each TensorFlow worker's own ``TF_CONFIG``). With ``check``, the first command that fails
    makes the others be killed, and :class:`CommandError` names it; without it, every command runs
    to its end and the caller reads the return codes. On timeout all are killed. Every process
    tree is reaped. ``progress``: a label for a bar of finished commands shown while waiting.
    """
    if envs is not None and len(envs) != len(cmds):
        raise ValueError(f"envs has {len(envs)} entries for {len(cmds)} commands; give one per command")
    base_env = {**os.environ, **safe_env(), **(env or {})}
    logs = [tempfile.TemporaryFile("w+") for _ in cmds]
    procs = [subprocess.Popen(list(map(str, c)), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              text=True, env=_importable({**base_env, **(envs[i] if envs else {})}), cwd=cwd,
                              start_new_session=True) for i, (c, log) in enumerate(zip(cmds, logs))]
    deadline = time.monotonic() + timeout_s
    failed: int | None = None
    timed_out = False
    waiting = Waiting(len(cmds), progress, unit="cmd")
    try:
        while [p.poll() for p in procs].count(None):
            waiting.done(sum(p.returncode is not None for p in procs))
            waiting.tick()
            bad = [i for i, p in enumerate(procs) if p.returncode not in (None, 0)]
            if check and bad:
                failed = bad[0]
                break
            if time.monotonic() > deadline:
                timed_out = True
                break
            time.sleep(0.05)
        waiting.done(len(procs))
    finally:
        waiting.close()
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            p.wait()
    outs = []
    for log in logs:
        log.seek(0)
        outs.append(log.read())
        log.close()
    if timed_out:
        raise CommandError(f"{len(cmds)} commands timed out after {timeout_s:g} s and were killed.\n"
                           + "".join(f"--- command {i} output (tail) ---\n{_last(o)}\n" for i, o in enumerate(outs)))
    if failed is None and check:
        failed = next((i for i, p in enumerate(procs) if p.returncode != 0), None)
    if failed is not None:
        raise CommandError(f"command {failed} {' '.join(map(str, cmds[failed]))!r} failed with exit code "
                           f"{procs[failed].returncode}; the others were stopped.\n--- output (tail) ---\n"
                           f"{_last(outs[failed])}")
    return [subprocess.CompletedProcess(p.args, p.returncode, quiet.strip_logs(o), "") for p, o in zip(procs, outs)]
