"""What machine are we on? Cores, GPUs, bf16 support, the size profile, and seeding.

Nothing here imports TensorFlow or JAX. PyTorch is imported only by the functions that ask it
about GPUs, and only if it is installed, so this module also works in the MXNet environment.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import random
import sys
from dataclasses import dataclass, field
from typing import TypeVar

PROFILES = ("cpu", "gpu")
PROFILE_ENV = "COURSE_PROFILE"


def cpu_cores() -> int:
    """Cores this process may run on (respects taskset/cgroup affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def memory_gib() -> float | None:
    """Total memory of the machine in GiB, or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


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

    On the CPU this means the AVX512-BF16 or AMX-BF16 instructions; on CUDA, Ampere or newer.
    """
    if device == "cpu":
        return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())
    if device == "cuda":
        torch = _torch()
        return bool(torch is not None and torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    raise ValueError(f"device must be 'cpu' or 'cuda', not {device!r}")


def best_device() -> str:
    """The device string for device-agnostic code: "cuda" if a GPU is usable, else "cpu"."""
    return "cuda" if gpus() else "cpu"


def profile() -> str:
    """The size profile notebooks use: "gpu" when a CUDA GPU is present, else "cpu".

    Set the environment variable ``COURSE_PROFILE`` to "cpu" or "gpu" to override (for example
    ``COURSE_PROFILE=cpu`` on a GPU machine to reproduce the stored outputs exactly).
    """
    chosen = os.environ.get(PROFILE_ENV, "").strip().lower()
    if chosen:
        if chosen not in PROFILES:
            raise ValueError(
                f"{PROFILE_ENV}={chosen!r} is not a profile; use one of {PROFILES} or unset it"
            )
        return chosen
    return "gpu" if gpus() else "cpu"


T = TypeVar("T")


def by_profile(*, cpu: T, gpu: T) -> T:
    """Pick the value for the current profile: ``by_profile(cpu=512, gpu=65536)``."""
    return {"cpu": cpu, "gpu": gpu}[profile()]


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
    """A snapshot of the machine and the installed frameworks (versions read without importing)."""

    python: str
    platform: str
    cpu_model: str
    cpu_cores: int
    memory_gib: float | None
    cpu_bf16: bool
    gpus: list[str]
    profile: str
    frameworks: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        mem = f"{self.memory_gib:.1f} GiB" if self.memory_gib else "unknown"
        rows = [
            ("python", self.python),
            ("platform", self.platform),
            ("CPU", self.cpu_model),
            ("CPU cores", str(self.cpu_cores)),
            ("memory", mem),
            ("CPU bf16", "native" if self.cpu_bf16 else "emulated (slow)"),
            ("GPUs", ", ".join(self.gpus) if self.gpus else "none"),
            ("profile", self.profile),
        ] + [(name, version) for name, version in self.frameworks.items()]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


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
        profile=profile(),
        frameworks=found,
    )
