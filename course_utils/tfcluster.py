"""A TensorFlow cluster on one machine: every task a subprocess on 127.0.0.1, always reaped.

A multi-worker TensorFlow job is one process per task. Each finds the others through the
environment variable ``TF_CONFIG``: the same ``cluster`` (job name -> list of "host:port") in
every task, plus this task's own ``{"type": ..., "index": ...}``. Here every host is 127.0.0.1
and every port is free; :func:`run` starts one process per task with its ``TF_CONFIG``, waits
with a timeout, and kills and reaps the whole process tree of every task, whatever happens.

TensorFlow is not imported here: the tasks import it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from .scripts import LOCALHOST, free_port, require_script, run_commands

JOBS = ("chief", "worker", "ps", "evaluator")


def cluster_spec(workers: int = 2, ps: int = 0, chief: int = 0) -> dict[str, list[str]]:
    """``{"worker": ["127.0.0.1:PORT", ...], ...}`` with a free port for every task.

    ``chief`` is 0 or 1: with 1, task ``chief:0`` also trains and does the chief's extra work
    (checkpoints, summaries); with 0, ``worker:0`` takes that role.
    """
    for name, n in (("workers", workers), ("ps", ps), ("chief", chief)):
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {n!r}")
    if chief > 1:
        raise ValueError("a cluster has at most one chief")
    if workers + chief < 1:
        raise ValueError("a cluster needs at least one worker (or a chief)")
    counts = {"chief": chief, "worker": workers, "ps": ps}
    return {job: [f"{LOCALHOST}:{free_port()}" for _ in range(n)] for job, n in counts.items() if n}


def tf_config(cluster: dict[str, list[str]], task_type: str, index: int) -> str:
    """The ``TF_CONFIG`` JSON string of task ``task_type:index`` in ``cluster``."""
    if task_type not in cluster:
        raise ValueError(f"no job {task_type!r} in the cluster; it has {sorted(cluster)}")
    if not 0 <= index < len(cluster[task_type]):
        raise ValueError(f"job {task_type!r} has tasks 0..{len(cluster[task_type]) - 1}, not {index}")
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


def tasks(cluster: dict[str, list[str]]) -> list[tuple[str, int]]:
    """Every ``(task_type, index)`` of ``cluster``, chief first, then workers, then ps."""
    unknown = set(cluster) - set(JOBS)
    if unknown:
        raise ValueError(f"unknown job name(s) {sorted(unknown)}; TensorFlow knows {JOBS}")
    return [(job, i) for job in JOBS for i in range(len(cluster.get(job, [])))]


def run(script: str | os.PathLike, cluster: dict[str, list[str]], *script_args: str,
        timeout_s: float = 120.0, check: bool = True, threads: int = 1,
        env: dict[str, str] | None = None, progress: str | None = None) -> list[subprocess.CompletedProcess]:
    """Run ``python script *script_args`` once per task of ``cluster``, each with its ``TF_CONFIG``.

    Returns one ``CompletedProcess`` per task in :func:`tasks` order (``.stdout`` holds its
    stdout and stderr, ``.returncode`` its exit code; -9 means killed by SIGKILL).
    With ``check`` (default) the first task that fails stops all the others and raises
    :class:`~course_utils.scripts.CommandError` with its output; with ``check=False`` every task
    runs to its end, so you can read how each one ended. ``threads`` is the OpenMP/MKL thread
    count per task. On timeout all tasks are killed and ``CommandError`` is raised.
    ``progress``: a label for a bar of finished tasks shown while they run.
    """
    require_script(script)
    order = tasks(cluster)
    envs = [{"TF_CONFIG": tf_config(cluster, job, i)} for job, i in order]
    base = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), **(env or {})}
    cmd = [sys.executable, str(script), *map(str, script_args)]
    return run_commands([cmd] * len(order), timeout_s=timeout_s, env=base, envs=envs, check=check,
                        progress=progress)
