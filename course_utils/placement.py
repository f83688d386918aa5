"""Where a chapter's work runs: one decision, made in one place, printed in one line.

Every chapter starts with ``PLAN = placement.plan(world_size)`` and prints it. The plan says

- where single-process cells run (``PLAN.device``: "cuda" or "cpu") and at which sizes
  (``PLAN.sizes(cpu=..., gpu=...)``);
- where the ranks of multi-process cells run (``PLAN.backend``, ``PLAN.rank_devices``) and at which
  sizes (``PLAN.rank_sizes(cpu=..., gpu=...)``): sizes follow the device the ranks actually use.

The rules, for ``world_size`` ranks with ``g`` GPUs visible:

=====================  =====================  ==========================================
                       single-process cells   ranks
=====================  =====================  ==========================================
g = 0                  cpu, cpu sizes         cpu, gloo, cpu sizes
1 <= g < world_size    cuda, gpu sizes        cpu, gloo, cpu sizes (NCCL needs a GPU per rank)
g >= world_size        cuda, gpu sizes        cuda:0 .. cuda:N-1, nccl, gpu sizes
COURSE_PROFILE=cpu     cpu, cpu sizes         cpu, gloo, cpu sizes (GPUs left unused)
=====================  =====================  ==========================================

Why the ranks go to the CPU when there are fewer GPUs than ranks: NCCL refuses two ranks on one
GPU ("Duplicate GPU detected"); gloo accepts CUDA tensors but stages them through host memory, so
two processes taking turns on one GPU measure neither the GPU nor a network, and each holds its own
CUDA context. What the multi-rank cells teach (which numbers must be equal, who talks to whom) is
the same on any device, so they run where that is honest, at sizes that finish there.

The rule "NCCL only when every rank has its own GPU" is written once, in :func:`ranks_get_gpus`.
``launch.run(worker, n, plan=PLAN)`` starts the ranks where the plan says (with nccl, rank ``r`` on
``PLAN.rank_devices[r]``, made its current CUDA device). Inside a launched worker, :func:`rank_device`
reads that device back (nccl: its own GPU; gloo: the CPU), and :func:`local_device` decides the
same for a script started by torchrun. :func:`simulated_node_gpus` gives each simulated "node" its own GPUs.

Imports no framework; PyTorch is asked about GPUs only when the plan is made (and only if installed).
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from . import hardware

if TYPE_CHECKING:
    import torch

T = TypeVar("T")


@dataclass(frozen=True)
class Plan:
    """Where a chapter's cells run. Build it with :func:`plan`; ``print(PLAN)`` says it in one line."""

    world_size: int                 # the most ranks the chapter's multi-process cells start
    gpus: int                       # CUDA GPUs visible to PyTorch
    device: str                     # single-process cells: "cuda" or "cpu"
    backend: str                    # multi-process cells: "nccl" or "gloo"
    rank_devices: tuple[str, ...]   # one per rank: "cuda:0", "cuda:1", ... or "cpu"
    gpus_unused: bool = False       # COURSE_PROFILE=cpu on a machine with GPUs
    framework: str = "PyTorch"      # whose GPUs were counted (chapters 05-08 count their framework's own)

    @property
    def profile(self) -> str:
        """The size profile of single-process cells: "gpu" when they run on a GPU, else "cpu"."""
        return "gpu" if self.device == "cuda" else "cpu"

    @property
    def rank_profile(self) -> str:
        """The size profile of multi-process cells: "gpu" only when every rank has its own GPU."""
        return "gpu" if self.backend == "nccl" else "cpu"

    @property
    def rank_device(self) -> str:
        """The device type the ranks use, for code that moves tensors: "cuda" or "cpu"."""
        return "cuda" if self.backend == "nccl" else "cpu"

    def sizes(self, *, cpu: T, gpu: T) -> T:
        """The value for single-process cells: ``PLAN.sizes(cpu=512, gpu=8192)``."""
        return gpu if self.profile == "gpu" else cpu

    def rank_sizes(self, *, cpu: T, gpu: T) -> T:
        """The value for multi-process cells, chosen by where the ranks run (never GPU sizes on CPU ranks)."""
        return gpu if self.rank_profile == "gpu" else cpu

    def __str__(self) -> str:
        if self.framework != "PyTorch":
            return self._other_framework()
        ranks = f"{self.world_size} ranks" if self.world_size > 1 else ""
        if self.device == "cpu":
            text = "plan: everything on the CPU at CPU sizes"
            text += f"; {ranks} over gloo" if ranks else ""
            if self.gpus_unused:
                text += f" (COURSE_PROFILE=cpu: {_count(self.gpus, 'GPU')} left unused)"
            return text
        text = f"plan: single-process cells on cuda at GPU sizes ({_count(self.gpus, 'GPU')})"
        if not ranks:
            return text
        if self.backend == "nccl":
            return text + f"; {ranks} on {self.rank_devices[0]}..{self.rank_devices[-1]} over nccl at GPU sizes"
        return (text + f"; {ranks} on the CPU over gloo at CPU sizes "
                f"(NCCL needs one GPU per rank: {self.gpus} < {self.world_size})")

    def _other_framework(self) -> str:
        """The plan for a framework that is not PyTorch: its own GPU count, no process-group backend."""
        text = f"plan ({self.framework} sees {_count(self.gpus, 'GPU')}): "
        if self.device == "cpu":
            text += "everything on the CPU at CPU sizes"
            return text + (" (COURSE_PROFILE=cpu: GPUs left unused)" if self.gpus_unused else "")
        text += "single-device work on the GPU at GPU sizes"
        if self.world_size == 1:
            return text
        if self.rank_profile == "gpu":
            return text + "; replicas on the GPUs at GPU sizes"
        return text + f"; replicas on CPU devices at CPU sizes (one GPU per replica needs {self.world_size}+ GPUs)"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def gpu_count() -> int:
    """CUDA GPUs PyTorch can use here (0 without PyTorch or CUDA)."""
    return len(hardware.gpus())


def ranks_get_gpus(ranks: int, gpus: int, profile: str | None = None) -> bool:
    """THE rule of the course for where ranks run: on GPUs, over NCCL, only when each of ``ranks``
    processes has its own GPU among the ``gpus`` visible, and ``profile`` (``COURSE_PROFILE``: "cpu",
    "gpu" or None) is not "cpu"; otherwise on the CPU, over gloo.

    NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), and gloo ranks taking turns on one
    GPU measure neither the GPU nor a network. :func:`plan`, :func:`local_backend`,
    :func:`simulated_node_gpus` and :func:`course_utils.launch.run` all ask this function; nothing
    else in the course compares a GPU count with a number of ranks (tests/test_one_device_rule.py).
    """
    return profile != "cpu" and ranks >= 1 and gpus >= ranks


def plan(world_size: int = 1, *, gpus: int | None = None, env: Mapping[str, str] | None = None,
         framework: str = "PyTorch") -> Plan:
    """Decide where a chapter's work runs (see the module docstring for the rules).

    ``world_size``: the most ranks any multi-process cell of the chapter starts (1 if none).
    ``gpus``: how many CUDA GPUs are visible; by default PyTorch is asked (tests pass a number).
    ``env``: where to read ``COURSE_PROFILE`` (default ``os.environ``; ``{}`` shows the rules unset).
    ``framework``: whose GPUs ``gpus`` counts, for a chapter whose work runs in another framework
    (TensorFlow, MXNet, onnxruntime: the course installs their CPU builds, so they may see none
    where PyTorch sees some, and their sizes must follow *their* device). Its ranks are "replicas":
    GPU sizes when there is one GPU per replica, as ``MirroredStrategy`` over the GPUs needs.
    ``COURSE_PROFILE=cpu`` keeps everything on the CPU; ``COURSE_PROFILE=gpu`` insists on a GPU
    and fails with a clear message where PyTorch sees none (another framework without GPUs runs
    on the CPU: a GPU machine runs chapters 05-08 with the CPU builds the course installs).
    """
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise ValueError(f"world_size must be an integer >= 1 (the most ranks a cell starts), got {world_size!r}")
    requested = requested_profile(env)
    visible = gpu_count() if gpus is None else gpus
    if visible < 0:
        raise ValueError(f"gpus must be >= 0, got {visible}")
    if requested == "gpu" and visible == 0 and framework == "PyTorch":   # another framework's CPU build: the CPU
        raise ValueError(f"{hardware.PROFILE_ENV}=gpu, but PyTorch sees no CUDA GPU (torch.cuda.is_available() "
                         f"is False or CUDA_VISIBLE_DEVICES hides them). Unset {hardware.PROFILE_ENV} to run on "
                         "the CPU, or install a CUDA build of PyTorch (see the README).")
    on_gpu = visible > 0 and requested != "cpu"
    if world_size > 1 and ranks_get_gpus(world_size, visible, requested):   # one process: no ranks to place
        backend, rank_devices = "nccl", tuple(f"cuda:{r}" for r in range(world_size))
    else:
        backend, rank_devices = "gloo", ("cpu",) * world_size
    return Plan(world_size=world_size, gpus=visible, device="cuda" if on_gpu else "cpu", backend=backend,
                rank_devices=rank_devices, gpus_unused=visible > 0 and not on_gpu, framework=framework)


def cpu_plan(world_size: int) -> Plan:
    """The plan of a cell that runs its ranks on the CPU on purpose, whatever the machine has (it
    measures CPU time or CPU heap, or shows gloo's own behaviour): :func:`plan` for a machine with
    no GPU, so gloo ranks on "cpu" at CPU sizes. ``launch.run(worker, n, plan=cpu_plan(n))``."""
    return plan(world_size, gpus=0, env={})


def requested_profile(env: Mapping[str, str] | None = None) -> str | None:
    """``COURSE_PROFILE`` from ``env`` (default ``os.environ``), checked: "cpu", "gpu" or None (unset)."""
    chosen = (os.environ if env is None else env).get(hardware.PROFILE_ENV, "").strip().lower()
    if chosen and chosen not in hardware.PROFILES:
        raise ValueError(f"{hardware.PROFILE_ENV}={chosen!r} is not a profile; use one of "
                         f"{hardware.PROFILES} or unset it")
    return chosen or None


def local_backend(local_world_size: int, gpus: int | None = None) -> str:
    """The backend for a script started by torchrun with ``local_world_size`` processes on this
    machine (or simulated node): "nccl" when each has its own GPU, else "gloo" (the same rule
    as :func:`plan`, ``COURSE_PROFILE`` included)."""
    visible = gpu_count() if gpus is None else gpus
    return "nccl" if ranks_get_gpus(local_world_size, visible, requested_profile()) else "gloo"


def local_device(local_rank: int, local_world_size: int) -> tuple[str, torch.device]:
    """``(backend, torch.device)`` for a torchrun-started process: its own GPU with nccl, else the CPU
    with gloo. Sets the current CUDA device when it picks one (NCCL requires it)."""
    import torch

    backend = local_backend(local_world_size)
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        return backend, device
    return backend, torch.device("cpu")


def rank_device() -> torch.device:
    """The ``torch.device`` of this rank: with nccl the GPU :func:`course_utils.launch.run` made its
    current CUDA device (the plan's ``rank_devices[rank]``); with gloo, or outside a process group, the CPU."""
    import torch
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def simulated_node_gpus(nnodes: int, nproc_per_node: int, gpus: int | None = None,
                        visible: str | None = None) -> list[str]:
    """``CUDA_VISIBLE_DEVICES`` for each of ``nnodes`` simulated nodes on this one machine.

    Real nodes each have their own GPUs; simulated ones must not share them, or every node's
    local rank 0 takes the same ``cuda:0`` and NCCL fails ("Duplicate GPU detected"). With at least
    ``nnodes * nproc_per_node`` GPUs each node gets its own slice; otherwise every node gets none
    (""), and its processes use gloo on the CPU. ``visible`` is the current CUDA_VISIBLE_DEVICES
    (ids or UUIDs to slice; default: the environment's, else 0..gpus-1).
    """
    count = gpu_count() if gpus is None else gpus
    if visible is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [d.strip() for d in visible.split(",") if d.strip()] if visible else [str(i) for i in range(count)]
    ids = ids[:count]
    need = nnodes * nproc_per_node
    if not ranks_get_gpus(need, len(ids), requested_profile()):
        return [""] * nnodes
    return [",".join(ids[n * nproc_per_node:(n + 1) * nproc_per_node]) for n in range(nnodes)]


def data_parallel_device_ids(plan: Plan) -> list[int] | None:
    """``device_ids`` for ``nn.DataParallel``: every GPU CUDA shows, else None (no GPU: DataParallel then
    calls the module unchanged, on the CPU).

    Every GPU even under ``COURSE_PROFILE=cpu``: DataParallel has no CPU mode once CUDA is visible (it
    takes every GPU by default, and ``device_ids=[]`` fails), so the module must go to ``cuda:0``. Only
    hiding the GPUs (``CUDA_VISIBLE_DEVICES=``) keeps it on the CPU.
    """
    return list(range(plan.gpus)) if plan.gpus else None


def seed_data_parallel_error(gpus: int) -> type[Exception]:
    """What seed 001's model-parallel loop raises with ``gpus`` GPUs visible: it wraps a model left on
    the CPU in ``nn.DataParallel`` and feeds it ``Subset`` objects from ``random_split``.

    0 GPUs: DataParallel calls the module, which refuses the Subset (TypeError). 1 GPU: DataParallel
    moves the module to it and hands the Subset on (TypeError). 2 or more: before looking at the
    input it checks that the module is on cuda:0, and it is not (RuntimeError).
    """
    return RuntimeError if gpus >= 2 else TypeError
