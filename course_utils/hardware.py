"""What machine are we on? Cores, memory, GPUs, bf16 support, and seeding.

Where chapters run, and at which sizes, is decided by :mod:`course_utils.placement`; what a GPU can
do by :mod:`course_utils.gpu_facts`.

Nothing here imports TensorFlow or JAX. PyTorch is imported only by the functions that ask it
about GPUs, and only if it is installed, so this module also works in the MXNet environment.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import math
import os
import platform
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

from . import gpu_facts

PROFILES = ("cpu", "gpu")        # COURSE_PROFILE's values (course_utils.placement reads it)
PROFILE_ENV = "COURSE_PROFILE"


CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")
_UNLIMITED_BYTES = 2**60  # cgroup v1 writes "no limit" as a huge number (9223372036854771712)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _cgroup_dirs(controller: str, root: Path, proc_cgroup: Path) -> list[Path]:
    """The cgroup folders whose ``controller`` limits apply to this process: its own cgroup and each
    ancestor, in the v2 hierarchy (``controller`` "") or the v1 one mounted at ``root/controller``.

    Limits nest (a child cannot exceed its parent), so the caller takes the smallest. Inside a
    container the process's path may not exist in the mounted hierarchy; then its root is used.
    """
    text = _read(proc_cgroup) or ""
    dirs: list[Path] = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controller == "" and controllers == "":                 # cgroup v2: "0::/path"
            hybrid = not (root / "cgroup.controllers").exists() and (root / "unified").is_dir()
            base = root / "unified" if hybrid else root             # v1 + v2 side by side: v2 there
        elif controller and controller in controllers.split(","):  # cgroup v1: "4:memory:/path"
            names = [controllers, controller]                       # mounted as "cpu,cpuacct" or "cpu"
            base = next((root / n for n in names if (root / n).is_dir()), root / controller)
        else:
            continue
        rel = Path(path.lstrip("/"))
        for up in [rel, *rel.parents]:
            if (base / up).is_dir() and base / up not in dirs:
                dirs.append(base / up)
    return dirs


def cgroup_cpu_limit(root: Path | None = None, proc_cgroup: Path | None = None) -> float | None:
    """CPUs this process's cgroup may use (quota / period, e.g. 2.0 or 0.5), or None if unlimited.

    Reads ``cpu.max`` ("200000 100000"; "max 100000" = no limit) on cgroup v2, else
    ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (quota -1 = no limit) on cgroup v1. ``root`` and
    ``proc_cgroup`` default to /sys/fs/cgroup and /proc/self/cgroup.
    """
    root, proc_cgroup = root or CGROUP_ROOT, proc_cgroup or PROC_CGROUP
    limits = []
    for folder in _cgroup_dirs("", root, proc_cgroup):
        fields = (_read(folder / "cpu.max") or "").split()
        if len(fields) == 2 and fields[0] != "max":
            limits.append(int(fields[0]) / int(fields[1]))
    for folder in _cgroup_dirs("cpu", root, proc_cgroup):
        quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
        if quota and period and int(quota) > 0 and int(period) > 0:
            limits.append(int(quota) / int(period))
    return min(limits) if limits else None


def cgroup_memory_limit(root: Path | None = None, proc_cgroup: Path | None = None) -> int | None:
    """Bytes this process's cgroup may use, or None if unlimited.

    Reads ``memory.max`` ("max" = no limit) on cgroup v2, else ``memory.limit_in_bytes`` on v1.
    """
    root, proc_cgroup = root or CGROUP_ROOT, proc_cgroup or PROC_CGROUP
    limits = []
    for folder in _cgroup_dirs("", root, proc_cgroup):
        value = _read(folder / "memory.max")
        if value and value.isdigit():
            limits.append(int(value))
    for folder in _cgroup_dirs("memory", root, proc_cgroup):
        value = _read(folder / "memory.limit_in_bytes")
        if value and value.isdigit() and int(value) < _UNLIMITED_BYTES:
            limits.append(int(value))
    return min(limits) if limits else None


def host_cpu_cores() -> int:
    """Cores this process may be scheduled on (taskset/cpuset affinity; ignores CPU quotas), >= 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def cpu_cores() -> int:
    """Cores this process can keep busy: the affinity mask, capped by the cgroup's CPU quota
    (rounded up; at least 1). On mybinder.org the mask shows the host's dozens of cores while the
    quota allows one or two."""
    quota = cgroup_cpu_limit()
    cores = host_cpu_cores()
    return max(1, min(cores, math.ceil(quota))) if quota else cores


def host_memory_gib() -> float | None:
    """Total memory of the machine in GiB (/proc/meminfo), or None where it cannot be read."""
    for line in (_read(Path("/proc/meminfo")) or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 2**20
    return None


def memory_gib() -> float | None:
    """Memory this process may use in GiB: the machine's, capped by the cgroup's memory limit
    (Binder: 1-2 GB on a host of hundreds). None where neither can be read."""
    host, limit = host_memory_gib(), cgroup_memory_limit()
    if limit is None:
        return host
    return limit / 2**30 if host is None else min(host, limit / 2**30)


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, or the platform's processor string."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_flags() -> set[str]:
    """The CPU feature flags from /proc/cpuinfo (empty where unavailable)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _torch():
    """PyTorch if installed, else None (never raises)."""
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    return torch


def gpus() -> list[str]:
    """Names of the CUDA GPUs PyTorch can use ([] when none, or when torch is not installed)."""
    torch = _torch()
    if torch is None or not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def bf16_supported(device: str = "cpu") -> bool:
    """Does ``device`` ("cpu" or "cuda") compute bfloat16 natively (not by slow emulation)?

    On the CPU this means the AVX512-BF16 or AMX-BF16 instructions; on CUDA, Ampere (sm80) or newer
    (:func:`course_utils.gpu_facts.native_bf16`). Not ``torch.cuda.is_bf16_supported()``: by default
    that counts emulation, and says True on a T4 or V100.
    """
    if device == "cpu":
        return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())
    if device == "cuda":
        gpu = gpu_facts.current()
        return gpu is not None and gpu_facts.native_bf16(gpu)
    raise ValueError(f"device must be 'cpu' or 'cuda', not {device!r}")


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and (if imported) PyTorch's and TensorFlow's random generators.

    Frameworks that are not imported yet are not imported here.
    """
    random.seed(seed)
    if "numpy" in sys.modules or importlib.util.find_spec("numpy"):
        import numpy as np

        np.random.seed(seed)
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(seed)
    if "tensorflow" in sys.modules:
        sys.modules["tensorflow"].random.set_seed(seed)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


FRAMEWORKS = ("torch", "tensorflow-cpu", "tensorflow", "keras", "jax", "mxnet", "onnxruntime")


@dataclass
class Report:
    """A snapshot of the machine and the installed frameworks (versions read without importing).

    ``cpu_cores`` and ``memory_gib`` are what this process may use (cgroup limits applied);
    ``host_cpu_cores`` and ``host_memory_gib`` what the machine shows, printed where they differ.
    """

    python: str
    platform: str
    cpu_model: str
    cpu_cores: int
    memory_gib: float | None
    cpu_bf16: bool
    gpus: list[str]
    profile: str
    frameworks: dict[str, str] = field(default_factory=dict)
    host_cpu_cores: int | None = None
    host_memory_gib: float | None = None

    def __str__(self) -> str:
        def gib(x: float | None) -> str:
            return f"{x:.1f} GiB" if x else "unknown"

        cores, mem = str(self.cpu_cores), gib(self.memory_gib)
        if self.host_cpu_cores and self.host_cpu_cores != self.cpu_cores:
            cores += f" (cgroup CPU quota; the host shows {self.host_cpu_cores})"
        if self.host_memory_gib and self.memory_gib and gib(self.host_memory_gib) != mem:
            mem += f" (cgroup memory limit; the host has {gib(self.host_memory_gib)})"
        rows = [
            ("python", self.python),
            ("platform", self.platform),
            ("CPU", self.cpu_model),
            ("CPU cores", cores),
            ("memory", mem),
            ("CPU bf16", "native" if self.cpu_bf16 else "emulated (slow)"),
            ("GPUs", ", ".join(self.gpus) if self.gpus else "none"),
            ("profile", self.profile),
        ] + [(name, version) for name, version in self.frameworks.items()]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _profile() -> str:
    """The size profile single-process cells use here (placement's decision)."""
    from . import placement  # placement imports this module

    return placement.plan(1).profile


def report() -> Report:
    """Collect a :class:`Report` of this machine. Print it for a readable table."""
    found = {name: v for name in FRAMEWORKS if (v := _version(name))}
    return Report(
        python=platform.python_version(),
        platform=f"{platform.system()} {platform.machine()}",
        cpu_model=cpu_model(),
        cpu_cores=cpu_cores(),
        memory_gib=memory_gib(),
        cpu_bf16=bf16_supported("cpu"),
        gpus=gpus(),
        profile=_profile(),
        frameworks=found,
        host_cpu_cores=host_cpu_cores(),
        host_memory_gib=host_memory_gib(),
    )
