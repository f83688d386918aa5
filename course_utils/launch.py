"""Run code on several local processes, safely, from a notebook or a test.

``run(worker, world_size, plan=PLAN)`` starts ``world_size`` processes, joins them into one
``torch.distributed`` process group and calls ``worker(rank, world_size, *args, **kwargs)`` in
each; it returns the list of return values, indexed by rank. Where the ranks run is the plan's
decision (:func:`course_utils.placement.plan`): its backend, and each rank on its
``plan.rank_devices[rank]``; without a plan, ``placement.plan(world_size)`` decides. The rules it enforces are the ones
that keep distributed code from hanging a notebook or CI:

- processes come from a *forkserver* that preloaded torch (plain ``fork`` deadlocks once the
  parent ran any OpenMP op; ``spawn`` works but re-imports torch in every worker, 2-4 s each);
- the worker must live in an importable module (a notebook's ``__main__`` cannot be imported
  by another process): write it with ``%%writefile work/my_worker.py``;
- everything binds to 127.0.0.1 on a free port, gloo talks over loopback (``GLOO_SOCKET_IFNAME=lo``);
- the process group has a timeout, the whole call has a wall-clock timeout, and when one rank
  raises, dies or hangs, all ranks are killed and reaped and the call fails within seconds.

``torchrun(script)`` and ``run_command(cmd)`` (from :mod:`course_utils.subprocesses`, re-exported
here) run a script as a subprocess under the same rules.

Torch is imported only inside the worker processes and in the functions that need it, so this
module imports with no framework installed.
"""
from __future__ import annotations

import importlib
import importlib.util
import multiprocessing as mp
import multiprocessing.connection
import multiprocessing.forkserver
import os
import pickle
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import placement
from .progress import Waiting
from .subprocesses import (  # noqa: F401
    LOCALHOST,
    CommandError,
    free_port,
    run_command,
    run_commands,
    safe_env,
    torchrun,
    torchrun_nodes,
)

if TYPE_CHECKING:
    from .placement import Plan

PRELOAD = ["torch", "torch.distributed", "torch._dynamo"]
"""Modules the forkserver imports once, so that each worker starts in ~0.1 s instead of ~2 s."""


class WorkerError(RuntimeError):
    """A rank raised an exception, died, or the launch timed out. ``.rank`` says which rank."""

    def __init__(self, message: str, rank: int | None = None, remote_traceback: str = ""):
        super().__init__(message)
        self.rank = rank
        self.remote_traceback = remote_traceback


def workdir(path: str | os.PathLike = "work") -> Path:
    """Create the folder notebooks write their worker modules into, and make it importable.

    Launched processes can only run functions they can import, so a notebook writes its workers
    with ``%%writefile work/name.py`` and imports them from there. The folder is git-ignored.
    """
    folder = Path(path).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    importlib.invalidate_caches()
    return folder


def join_parts(name: str, parts: int, folder: str | os.PathLike = "work") -> Path:
    """Write ``folder/name.py`` from ``name_part1.py`` .. ``name_part{parts}.py`` and return its path.

    A worker script too long for one cell is written in parts, each by its own ``%%writefile`` cell
    (never ``%%writefile -a``, which adds a second copy when a reader re-runs the cell); this join
    rewrites the whole script every time, so any cell can be re-run. Prints the result in one line.
    """
    folder = Path(folder)
    texts = []
    for i in range(1, parts + 1):
        part = folder / f"{name}_part{i}.py"
        if not part.exists():
            raise FileNotFoundError(f"{part} is missing: run the %%writefile cell that writes part {i} first")
        texts.append(part.read_text().strip("\n"))
    script = folder / f"{name}.py"
    script.write_text("\n\n\n".join(texts) + "\n")
    print(f"{folder.name}/{script.name}: parts 1-{parts} joined, {len(script.read_text().splitlines())} lines")
    return script


# --------------------------------------------------------------------------------------------
# run(): N processes in one process group
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _WorkerRef:
    """Where to find a worker function: by module name, file and qualified name, not by pickle."""

    module: str
    file: str | None
    qualname: str

    def load(self) -> Callable:
        if self.file and self.module not in sys.modules and importlib.util.find_spec(self.module) is None:
            sys.path.insert(0, os.path.dirname(self.file))  # e.g. a notebook's work/ folder
        obj: Any = importlib.import_module(self.module)
        for part in self.qualname.split("."):
            obj = getattr(obj, part)
        return obj


def _ref_for(worker: Callable) -> _WorkerRef:
    if not callable(worker):
        raise ValueError(f"worker must be a function, got {type(worker).__name__} {worker!r}")
    module = getattr(worker, "__module__", None)
    qualname = getattr(worker, "__qualname__", "")
    if module in (None, "__main__", "__mp_main__") or "<" in qualname:
        where = "a lambda or nested function" if "<" in qualname else "the notebook (module __main__)"
        raise ValueError(
            f"worker {qualname or worker!r} is defined in {where}; other processes cannot import it.\n"
            "Put it at the top level of a module file and import it from there, e.g. in a cell:\n"
            "    %%writefile work/my_worker.py\n"
            "    def my_worker(rank, world_size): ...\n"
            "then `from my_worker import my_worker` (course_utils.launch.workdir() makes work/ importable)."
        )
    file = getattr(sys.modules.get(module), "__file__", None)
    return _WorkerRef(module, os.path.abspath(file) if file else None, qualname)


FROM_PLAN = "plan"
"""``run``'s default ``backend``: the plan's (``placement.plan(world_size)`` when no plan is given)."""


def rank_placement(world_size: int, plan: Plan | None = None,
                   backend: str | None = FROM_PLAN) -> tuple[str | None, tuple[str, ...]]:
    """``(backend, devices)`` for :func:`run`'s ``world_size`` ranks: ``devices[rank]`` is "cuda:i"
    (made the rank's current CUDA device before the worker runs) or "cpu".

    - default (``backend="plan"``): the plan's backend and ``plan.rank_devices``; without a plan,
      ``placement.plan(world_size)`` decides (NCCL only when each rank has its own GPU).
    - ``backend="gloo"``: CPU ranks on purpose (graders; a cell that measures the CPU).
    - ``backend="nccl"``: rank ``r`` on ``cuda:r``, checked by the same rule as the plan's.
    - ``backend=None``: no process group, no device set (the worker makes its own group).

    Raises ``ValueError`` saying what to do for a plan made for fewer ranks, a plan and a backend
    both given, or NCCL without a GPU per rank here.
    """
    if backend != FROM_PLAN:
        if plan is not None:
            raise ValueError(f"pass plan= or backend=, not both (backend={backend!r} would override the "
                             "plan's decision): drop backend= to run where the plan says")
        if backend is None:
            return None, ()
        if backend not in ("gloo", "nccl"):
            raise ValueError(f"backend must be 'gloo' (CPU) or 'nccl' (GPU), not {backend!r}; or leave it out "
                             "to use the plan's")
        devices = tuple(f"cuda:{r}" for r in range(world_size)) if backend == "nccl" else ("cpu",) * world_size
        _check_available(backend, world_size)
        return backend, devices
    if plan is None:
        plan = placement.plan(world_size)
    if world_size > plan.world_size or len(plan.rank_devices) < world_size:
        raise ValueError(
            f"this plan was made for {plan.world_size} rank(s) ({len(plan.rank_devices)} rank device(s)) but "
            f"{world_size} are launched: make it with placement.plan({world_size}) (the most ranks any cell "
            "of the chapter starts), or launch fewer ranks")
    if plan.framework != "PyTorch":
        raise ValueError(f"this plan counts {plan.framework}'s GPUs, not PyTorch's; launch.run starts PyTorch "
                         "ranks: pass a plan made by placement.plan(world_size)")
    devices = tuple(plan.rank_devices[:world_size])
    own_gpus = all(d.startswith("cuda") for d in devices) and len(set(devices)) == world_size
    if plan.backend == "nccl" and not own_gpus:
        raise ValueError(f"an nccl plan needs one GPU per rank, got rank devices {devices}: "
                         "make the plan with placement.plan(world_size)")
    _check_available(plan.backend, world_size)
    return plan.backend, devices


def _check_available(backend: str, world_size: int) -> None:
    """That this machine can run ``world_size`` ranks over ``backend`` (NCCL: one GPU per rank, by the
    course's one rule, ``placement.ranks_get_gpus``)."""
    import torch
    import torch.distributed as dist

    if backend == "nccl":
        gpus = torch.cuda.device_count()
        profile = placement.requested_profile()
        if not placement.ranks_get_gpus(world_size, gpus, profile):
            why = ("COURSE_PROFILE=cpu keeps ranks on the CPU" if profile == "cpu"
                   else f"world_size={world_size} but {gpus} GPU(s) visible")
            raise ValueError(f"backend 'nccl' needs one CUDA GPU per rank: {why}; launch fewer ranks, or "
                             "leave backend= out so that placement.plan decides (gloo on the CPU here)")
    if not dist.is_available() or not dist.is_backend_available(backend):
        raise ValueError(f"backend {backend!r} is not available in this PyTorch build; leave backend= out "
                         "(the plan then picks gloo here) or use backend='gloo'")


def _entry(ref: _WorkerRef, rank: int, world_size: int, args: tuple, kwargs: dict,
           env: dict, backend: str | None, device: str, pg_timeout_s: float, threads: int,
           conn: multiprocessing.connection.Connection, log_path: str) -> None:
    """Body of every worker process: set up, call the worker, send back (status, payload)."""
    os.setpgid(0, 0)  # own process group, so the parent can kill the worker *and* its children
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)  # C++ and Python output both land in the rank's log
    os.dup2(log, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    os.environ.update(env)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                      LOCAL_WORLD_SIZE=str(world_size))
    failed_at = None
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(threads)
        if backend is not None:
            if device.startswith("cuda"):
                torch.cuda.set_device(torch.device(device))   # the plan's GPU for this rank (NCCL needs it)
            dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world_size,
                                    timeout=timedelta(seconds=pg_timeout_s))
        try:
            payload = ref.load()(rank, world_size, *args, **kwargs)
            data = pickle.dumps(payload)  # plain pickle: tensors by value, no shared-memory handles
        except BaseException:
            failed_at = time.time()  # before destroy_process_group() disturbs the peers
            if backend is not None and dist.is_initialized():
                dist.destroy_process_group()
            raise
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the notebook
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code is _entry.__code__:
            tb = tb.tb_next  # start the traceback at the worker, not at this wrapper
        text = "".join(traceback.format_exception(type(exc), exc, tb))
        _send(conn, "error", pickle.dumps((type(exc).__name__, str(exc), text, failed_at or time.time())))
        return
    _send(conn, "ok", data)  # the launcher now counts this rank as done
    if backend is not None and dist.is_initialized():
        # Leave together: a rank that tears its group down early can close the connections a slower
        # peer is still setting up (gloo: "connectFullMesh failed ... Connection closed by peer").
        # A peer that fails instead reports its own error; this rank's result is already sent.
        try:
            dist.barrier(**({"device_ids": [torch.cuda.current_device()]} if backend == "nccl" else {}))
        except Exception:  # noqa: BLE001
            pass
        finally:
            dist.destroy_process_group()


def _send(conn: multiprocessing.connection.Connection, status: str, data: bytes) -> None:
    """Flush this rank's output, then send (status, data) to the launcher and close the pipe."""
    sys.stdout.flush()
    sys.stderr.flush()
    conn.send_bytes(pickle.dumps((status, data)))
    conn.close()


_preloaded = False


def _context(start_method: str):
    global _preloaded
    if start_method == "fork":
        raise ValueError(
            "start_method='fork' deadlocks once the notebook ran any OpenMP op (a single matmul "
            "suffices); use 'forkserver' (default) or 'spawn'"
        )
    if start_method not in ("forkserver", "spawn"):
        raise ValueError(f"start_method must be 'forkserver' or 'spawn', not {start_method!r}")
    ctx = mp.get_context(start_method)
    if start_method == "forkserver" and not _preloaded:
        ctx.set_forkserver_preload([m for m in PRELOAD if importlib.util.find_spec(m.split(".")[0])])
        _preloaded = True
    return ctx


def stop_forkserver() -> bool:
    """Stop the forkserver that :func:`run` keeps warm (it holds a preloaded torch, ~240 MB), e.g.
    before launching other torch processes on a 1-2 GB machine; the next :func:`run` starts a
    new one. Returns whether one was running. (Uses the stdlib's own stop, which is private.)"""
    server = getattr(mp.forkserver, "_forkserver", None)
    if server is None or getattr(server, "_forkserver_pid", None) is None:
        return False
    server._stop()
    return True


def _kill(procs: Sequence[mp.process.BaseProcess], grace_s: float = 5.0) -> None:
    """SIGKILL every live worker (and its process group), then reap them all."""
    for p in procs:
        if p.pid is not None and p.exitcode is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                p.kill()
    for p in procs:
        p.join(grace_s)


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def _tail(path: str, lines: int = 20) -> str:
    try:
        text = Path(path).read_text(errors="replace").rstrip()
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def run(worker: Callable, world_size: int = 2, *, plan: Plan | None = None, args: tuple = (),
        kwargs: dict | None = None, backend: str | None = FROM_PLAN, timeout_s: float = 120.0,
        pg_timeout_s: float = 30.0, threads_per_rank: int = 1, start_method: str = "forkserver",
        output: str = "all", progress: str | None = None) -> list[Any]:
    """Run ``worker(rank, world_size, *args, **kwargs)`` on ``world_size`` local processes.

    Returns the workers' return values as a list indexed by rank (they must be picklable).

    - ``plan``: where the ranks run, the chapter's ``PLAN = placement.plan(n)`` (``n >= world_size``):
      its ``backend``, and rank ``r`` on ``plan.rank_devices[r]`` (with nccl made the rank's current
      CUDA device, which :func:`course_utils.placement.rank_device` then returns; with gloo the CPU).
      Without a plan, ``placement.plan(world_size)`` decides: the course's rule, not a fixed backend.
    - ``backend``: leave it out. An override for the few callers that need one: "gloo" for CPU ranks
      on purpose (graders), "nccl", or None for no process group (the worker may then call
      ``dist.init_process_group`` itself: MASTER_ADDR/MASTER_PORT, RANK and WORLD_SIZE are set, as
      torchrun would). Not together with ``plan`` (see :func:`rank_placement`).
    - ``timeout_s``: wall-clock limit for the whole call; ``pg_timeout_s``: the process group's
      timeout, i.e. how long a collective may wait for a missing peer.
    - ``threads_per_rank``: torch intra-op threads in each worker (1 = one rank per core).
    - ``output``: what to print of each rank's stdout/stderr when it finishes: "all" (grouped by
      rank, in rank order, so the output is deterministic), "rank0", or "none".
    - ``progress``: a label for a progress bar of finished ranks shown while waiting (long runs).

    Raises ``ValueError`` for bad arguments and :class:`WorkerError` if any rank raises, dies or
    outlives ``timeout_s``; in every failure all ranks are killed and reaped before it returns.
    """
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise ValueError(f"world_size must be an integer >= 1, got {world_size!r}")
    if output not in ("all", "rank0", "none"):
        raise ValueError(f"output must be 'all', 'rank0' or 'none', not {output!r}")
    if timeout_s <= 0 or pg_timeout_s <= 0:
        raise ValueError("timeout_s and pg_timeout_s must be positive numbers of seconds")
    ref = _ref_for(worker)
    backend, devices = rank_placement(world_size, plan, backend)
    devices = devices or ("cpu",) * world_size
    ctx = _context(start_method)
    env = safe_env(threads_per_rank, free_port())
    with tempfile.TemporaryDirectory(prefix="course_launch_") as logdir:  # removed also when a rank fails
        logs = [os.path.join(logdir, f"rank{r}.log") for r in range(world_size)]
        procs, conns = [], []
        try:
            for rank in range(world_size):
                recv, send = ctx.Pipe(duplex=False)
                p = ctx.Process(target=_entry, name=f"rank{rank}", daemon=True,
                                args=(ref, rank, world_size, args, kwargs or {}, env, backend,
                                      devices[rank], pg_timeout_s, threads_per_rank, send, logs[rank]))
                p.start()
                send.close()
                procs.append(p)
                conns.append(recv)
            with Waiting(world_size, progress, unit="rank") as waiting:
                results = _collect(procs, conns, logs, timeout_s, waiting=waiting)
            for p in procs:  # they sent their results and are exiting; give them a moment
                p.join(2.0)
        finally:
            _kill(procs)
            for c in conns:
                c.close()
        if output != "none":
            for rank in range(1 if output == "rank0" else world_size):
                text = Path(logs[rank]).read_text(errors="replace")
                if text.strip():
                    prefix = f"[rank {rank}] " if world_size > 1 else ""
                    print("\n".join(prefix + line for line in text.rstrip("\n").splitlines()))
    return results


def _death(rank: int, proc: mp.process.BaseProcess) -> tuple[float, int, str, str]:
    """A failure record for a rank that died without a word (sorts before any raised exception)."""
    return (float("-inf"), rank, f"rank {rank} {_describe_exit(proc.exitcode)} before returning a result", "")


def _collect(procs, conns, logs, timeout_s: float, grace_s: float = 1.0, waiting: Waiting | None = None) -> list[Any]:
    """Wait for every rank's message; on the first error or death, stop within ``grace_s``.

    When one rank fails, its peers usually fail a moment later ("connection closed by peer").
    The grace period gathers those too, so the error can blame the root cause: a rank that died
    without a word, else the rank whose exception came first (by the workers' own clock).
    """
    results: dict[int, Any] = {}
    failures: list[tuple[float, int, str, str]] = []  # (when, rank, message, traceback)
    pending = {c: rank for rank, c in enumerate(conns)}
    sentinels = {p.sentinel: rank for rank, p in enumerate(procs)}
    deadline = time.monotonic() + timeout_s
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready = mp.connection.wait(list(pending) + list(sentinels), timeout=min(left, 0.5))
        for obj in ready:
            if obj not in pending:
                continue
            rank = pending.pop(obj)
            try:
                status, data = pickle.loads(obj.recv_bytes())
            except EOFError:  # died without a word; its sentinel tells how
                continue
            if status == "ok":
                results[rank] = pickle.loads(data)
                if waiting is not None:
                    waiting.done(len(results))
                continue
            name, msg, tb, when = pickle.loads(data)
            failures.append((when, rank, f"rank {rank} raised {name}: {msg}", tb))
        if waiting is not None:
            waiting.tick()
        for obj in ready:
            rank = sentinels.get(obj)
            if rank is None or conns[rank] in pending and conns[rank].poll():
                continue  # not a sentinel, or its message waits in the pipe: read it first
            del sentinels[obj]
            if rank in results or any(f[1] == rank for f in failures):
                continue
            procs[rank].join(0.5)
            pending.pop(conns[rank], None)
            failures.append(_death(rank, procs[rank]))
        if failures:
            deadline = min(deadline, time.monotonic() + grace_s)
    for rank, p in enumerate(procs):  # pipe closed without a message, sentinel not yet seen: how did it die?
        if conns[rank] not in pending and rank not in results and not any(f[1] == rank for f in failures):
            p.join(grace_s)
            failures.append(_death(rank, p))
    if failures:
        when, rank, msg, tb = min(failures)
        others = [f"  {m.splitlines()[0][:200]}" for w, r, m, _ in sorted(failures) if r != rank]
        tail = _tail(logs[rank])
        if not tail and not os.path.exists(logs[rank]):
            tail = ("(none: it died before the worker started. Launching from a script? Guard the "
                    "launch with `if __name__ == '__main__':`, as multiprocessing re-imports the "
                    "main script in new processes.)")
        raise WorkerError(
            f"{msg}\nAll ranks have been stopped."
            + ("\nThen, as a consequence:\n" + "\n".join(others) if others else "")
            + (f"\n\n--- traceback in rank {rank} ---\n{tb}" if tb else "")
            + (f"\n--- rank {rank} output (tail) ---\n{tail}" if tail else ""),
            rank=rank, remote_traceback=tb)
    if pending:
        running = sorted(pending.values())
        raise WorkerError(
            f"launch timed out after {timeout_s:g} s; ranks {running} were still running and "
            "have been killed. A rank stuck in a collective usually means the ranks did not call "
            "the same collectives in the same order, or one rank is much slower.\n"
            + "".join(f"--- rank {r} output (tail) ---\n{_tail(logs[r])}\n" for r in running))
    return [results[r] for r in range(len(procs))]
