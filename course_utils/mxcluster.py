"""An MXNet parameter-server job on one machine: scheduler, servers and workers as subprocesses.

MXNet's distributed kvstore (``mx.kv.create("dist_sync")``) runs on ps-lite: one **scheduler**
that introduces everybody, **servers** that hold the parameters and add up the workers' gradients,
and **workers** that train. Every process runs the same script; the environment (``DMLC_ROLE``,
``DMLC_PS_ROOT_URI``/``_PORT``, ``DMLC_NUM_SERVER``, ``DMLC_NUM_WORKER``) says which part it
plays. A scheduler or server process runs its loop inside ``import mxnet`` and exits when the
workers are done. :func:`run` starts all of them on 127.0.0.1 and kills and reaps them whatever
happens.

Chapter 07's device decisions are small functions of the MXNet build's facts — whether it was
built with CUDA (``mx.runtime.Features().is_enabled("CUDA")``) and how many GPUs it sees
(``mx.context.num_gpus()``): :func:`data_parallel_contexts` and :func:`gpu_try`. MXNet is not
imported here (this module works in any environment; the tests fake the facts).
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

from .subprocesses import LOCALHOST, free_port, require_script, run_commands

GPU_NOT_ENABLED = "MXNetError: GPU is not enabled"   # a CPU build's last word on mx.gpu()


def data_parallel_contexts(n: int, num_gpus: int) -> list[tuple[str, int]]:
    """``n`` contexts to split a batch over, as (kind, index): ``n`` GPUs where MXNet sees that
    many, else ``n`` CPU contexts (the same chip, separate copies and engine queues). Never fewer
    than ``n``: comparing one context with "several" that are one would prove nothing.
    Build them with ``getattr(mx, kind)(index)``."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 2:
        raise ValueError(f"n must be an integer >= 2 (contexts to compare with one), got {n!r}")
    from .placement import ranks_get_gpus  # the course's one rule: a device of its own for each replica

    kind = "gpu" if ranks_get_gpus(n, num_gpus) else "cpu"
    return [(kind, i) for i in range(n)]


@dataclass(frozen=True)
class GpuTry:
    """What a model initialised and run on ``mx.gpu()`` does: it ``runs`` (exit code 0), or the
    process fails, with ``last_line`` as its last output line where that is known."""

    runs: bool
    last_line: str | None

    def matches(self, returncode: int, last: str) -> bool:
        """Whether a run that ended with ``returncode`` and last output line ``last`` did this."""
        if self.runs:
            return returncode == 0
        return returncode != 0 and (self.last_line is None or last == self.last_line)


def gpu_try(cuda_build: bool, num_gpus: int) -> GpuTry:
    """What ``model.initialize(ctx=mx.gpu())`` and a forward pass do with this build and GPU count.

    A CPU build (the pip wheel ``mxnet``) refuses with :data:`GPU_NOT_ENABLED` on any machine; a
    CUDA build runs where it sees a GPU, and fails where it sees none (with a message from the
    CUDA runtime, not checked here).
    """
    if not cuda_build and num_gpus:
        raise ValueError(f"a CPU build of MXNet sees no GPUs, not {num_gpus}: check the facts")
    if not cuda_build:
        return GpuTry(runs=False, last_line=GPU_NOT_ENABLED)
    return GpuTry(runs=num_gpus >= 1, last_line=None)


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
    :class:`~course_utils.subprocesses.CommandError`; so does the timeout. Every process is reaped.
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
