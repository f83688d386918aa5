"""An MXNet parameter-server job on one machine: scheduler, servers and workers as subprocesses.

MXNet's distributed kvstore (``mx.kv.create("dist_sync")``) runs on ps-lite: one **scheduler**
that introduces everybody, **servers** that hold the parameters and add up the workers' gradients,
and **workers** that train. Every process runs the same script; the environment (``DMLC_ROLE``,
``DMLC_PS_ROOT_URI``/``_PORT``, ``DMLC_NUM_SERVER``, ``DMLC_NUM_WORKER``) says which part it
plays. A scheduler or server process runs its loop inside ``import mxnet`` and exits when the
workers are done. :func:`run` starts all of them on 127.0.0.1 and kills and reaps them whatever
happens. MXNet is not imported here (this module works in any environment).
"""
from __future__ import annotations

import os
import subprocess
import sys

from .scripts import LOCALHOST, free_port, require_script, run_commands


def roles(workers: int, servers: int = 1) -> list[str]:
    """The ``DMLC_ROLE`` of each process, in start order: scheduler, servers, workers."""
    for name, n in (("workers", workers), ("servers", servers)):
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {n!r}")
    return ["scheduler"] + ["server"] * servers + ["worker"] * workers


def run(script: str | os.PathLike, *script_args: str, workers: int = 2, servers: int = 1,
        timeout_s: float = 120.0, env: dict[str, str] | None = None) -> list[subprocess.CompletedProcess]:
    """Run ``python script *script_args`` as the scheduler, ``servers`` servers and ``workers``
    workers of one ps-lite job on 127.0.0.1 (a free port), in that order; return their
    ``CompletedProcess`` in the same order (``.stdout`` holds stdout and stderr).

    The first process that fails stops all the others and raises
    :class:`~course_utils.scripts.CommandError`; so does the timeout. Every process is reaped.
    Workers get their rank from the scheduler, in the order they connect: not by start order.
    """
    require_script(script)
    order = roles(workers, servers)
    base = {"DMLC_PS_ROOT_URI": LOCALHOST, "DMLC_PS_ROOT_PORT": str(free_port()),
            "DMLC_NUM_SERVER": str(servers), "DMLC_NUM_WORKER": str(workers),
            "DMLC_NODE_HOST": LOCALHOST,            # every node announces 127.0.0.1, not a LAN address
            **(env or {})}
    cmd = [sys.executable, str(script), *map(str, script_args)]
    return run_commands([cmd] * len(order), timeout_s=timeout_s, env=base,
                        envs=[{"DMLC_ROLE": role} for role in order])
