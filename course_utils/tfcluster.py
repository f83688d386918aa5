"""A TensorFlow cluster on one machine: every task a subprocess on 127.0.0.1, always reaped.

A multi-worker TensorFlow job is one process per task. Each finds the others through the
environment variable ``TF_CONFIG``: the same ``cluster`` (job name -> list of "host:port") in
every task, plus this task's own ``{"type": ..., "index": ...}``. Here every host is 127.0.0.1
and every port is free; :func:`run` starts one process per task with its ``TF_CONFIG``, waits
with a timeout, and kills and reaps the whole process tree of every task, whatever happens.

TensorFlow is not imported here: the tasks import it. Every task starts through this module
(``python -m course_utils.tfcluster HIDDEN script args``), which marks :data:`UNUSED_BY_TASKS` as
not installed before the script runs: TensorFlow and Keras import those whenever they are
installed, and a task of this course never uses them.
"""
from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from collections.abc import Sequence

from .subprocesses import LOCALHOST, free_port, require_script, run_commands

JOBS = ("chief", "worker", "ps", "evaluator")

# Imported by `import tensorflow` whenever installed (JAX by tf.lite; scikit-learn with SciPy, pandas
# and matplotlib by Keras' scikit-learn wrapper, data adapters and plots), never used by a task:
# ~120 MB of memory per task on CPU, three quarters of it private (chapter 05 runs 3 TF processes).
UNUSED_BY_TASKS = ("jax", "sklearn", "pandas", "matplotlib")


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
        env: dict[str, str] | None = None, progress: str | None = None,
        hide: Sequence[str] = UNUSED_BY_TASKS) -> list[subprocess.CompletedProcess]:
    """Run ``python script *script_args`` once per task of ``cluster``, each with its ``TF_CONFIG``.

    Returns one ``CompletedProcess`` per task in :func:`tasks` order (``.stdout`` holds its
    stdout and stderr, ``.returncode`` its exit code; -9 means killed by SIGKILL).
    With ``check`` (default) the first task that fails stops all the others and raises
    :class:`~course_utils.subprocesses.CommandError` with its output; with ``check=False`` every task
    runs to its end, so you can read how each one ended. ``threads`` is the OpenMP/MKL thread
    count per task. On timeout all tasks are killed and ``CommandError`` is raised.
    ``progress``: a label for a bar of finished tasks shown while they run. ``hide``: top-level
    modules each task sees as not installed (pass ``()`` if a task needs one of them).
    """
    require_script(script)
    order = tasks(cluster)
    envs = [{"TF_CONFIG": tf_config(cluster, job, i)} for job, i in order]
    base = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), **(env or {})}
    cmd = task_command(script, *script_args, hide=hide)
    return run_commands([cmd] * len(order), timeout_s=timeout_s, env=base, envs=envs, check=check,
                        progress=progress)


def task_command(script: str | os.PathLike, *script_args: str,
                 hide: Sequence[str] = UNUSED_BY_TASKS) -> list[str]:
    """The command line that runs ``python script *script_args`` as :func:`run` runs each task:
    with the top-level modules in ``hide`` not installed (for a TensorFlow process started some
    other way, e.g. with :func:`~course_utils.subprocesses.run_command`)."""
    return [sys.executable, "-m", __name__, ",".join(hide), str(script), *map(str, script_args)]


def _start_task(hidden: str, script: str, *script_args: str) -> None:
    """Run ``python script *script_args`` with the comma-separated modules ``hidden`` not installed."""
    hide = [name for name in hidden.split(",") if name]
    for name in hide:
        sys.modules[name] = None   # `import name` raises ImportError; find_spec(name) is None
    sys.argv = [script, *script_args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))   # what `python script` puts first
    try:
        runpy.run_path(script, run_name="__main__")
    except ImportError as error:
        if error.name in hide:
            error.add_note(f"tfcluster.run hides {error.name} from its tasks to save memory; "
                           f"call it with hide=() if this task needs {error.name}.")
        raise


if __name__ == "__main__":
    _start_task(*sys.argv[1:])
