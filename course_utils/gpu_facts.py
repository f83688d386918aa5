"""What a CUDA GPU can do, decided from its facts: name, compute capability, memory.

Every choice the course makes from a GPU (does it compute bfloat16 natively? can it run float8
matmuls? how big a benchmark fits?) is a small function of a :class:`GPU` here. A test hands it a
faked T4 or H100 from :data:`KNOWN`, so a machine without a GPU checks what each card would do, and a
chapter can print the decision for the cards learners have next to the one for its own machine.

Imports no framework; :func:`cuda_gpus` asks PyTorch (only if installed) about the real GPUs.
"""
from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, replace

GiB = 2**30


@dataclass(frozen=True)
class GPU:
    """One CUDA GPU as PyTorch describes it.

    ``capability``: (major, minor) compute capability, e.g. (7, 5) for a T4, (9, 0) for an H100.
    ``total_bytes``: its memory; ``free_bytes``: what is free now (None: unknown, taken as total).
    """

    name: str
    capability: tuple[int, int]
    total_bytes: int
    free_bytes: int | None = None

    @property
    def free(self) -> int:
        """Free bytes (the total when unknown)."""
        return self.total_bytes if self.free_bytes is None else self.free_bytes

    def with_free(self, free_bytes: int) -> GPU:
        """The same GPU with ``free_bytes`` free (for tests: a card another process half fills)."""
        return replace(self, free_bytes=free_bytes)


# The cards learners have, as PyTorch reports them (nominal memory; a few hundred MiB less is usable).
# Capabilities: NVIDIA's CUDA GPU list, https://developer.nvidia.com/cuda-gpus
KNOWN: dict[str, GPU] = {
    "T4": GPU("Tesla T4", (7, 5), 15 * GiB),                       # Colab's free GPU (Turing)
    "V100": GPU("Tesla V100-SXM2-16GB", (7, 0), 16 * GiB),         # Volta
    "A100": GPU("NVIDIA A100-SXM4-80GB", (8, 0), 80 * GiB),        # Ampere
    "L4": GPU("NVIDIA L4", (8, 9), 24 * GiB),                       # Ada
    "H100": GPU("NVIDIA H100 80GB HBM3", (9, 0), 80 * GiB),         # Hopper
    "H200": GPU("NVIDIA H200", (9, 0), 141 * GiB),                  # Hopper, more memory
}


def native_bf16(gpu: GPU) -> bool:
    """Does ``gpu`` compute bfloat16 in hardware? Ampere (sm80) and newer.

    Older cards (T4, V100) accept bf16 tensors, but PyTorch emulates the arithmetic, slowly:
    ``torch.cuda.is_bf16_supported()`` says True there unless asked ``including_emulation=False``.
    """
    return gpu.capability >= (8, 0)


def float8_matmul(gpu: GPU) -> bool:
    """Can ``torch._scaled_mm`` run on ``gpu``? It needs float8 tensor cores: Ada (sm89) or Hopper+.

    On a T4, V100 or A100 PyTorch raises "... only supported on CUDA devices with compute
    capability >= 9.0 or 8.9".
    """
    return gpu.capability >= (8, 9)


def largest_fitting(candidates: list[int], bytes_for: Callable[[int], int], gpu: GPU, fraction: float = 0.5) -> int:
    """The largest of ``candidates`` whose ``bytes_for(size)`` fits in ``fraction`` of ``gpu``'s free memory.

    ``fraction`` leaves room for the caching allocator, the CUDA context and whatever else runs.
    Raises ValueError (saying how much is free) when not even the smallest fits.
    """
    budget = fraction * gpu.free
    fitting = [c for c in sorted(candidates) if bytes_for(c) <= budget]
    if not fitting:
        raise ValueError(f"not even size {min(candidates)} fits: it needs {bytes_for(min(candidates)) / GiB:.1f} GiB, "
                         f"and {fraction:.0%} of {gpu.name}'s free {gpu.free / GiB:.1f} GiB is "
                         f"{budget / GiB:.1f} GiB. Free GPU memory (other notebooks, processes) or run on the CPU "
                         "with COURSE_PROFILE=cpu.")
    return fitting[-1]


def cuda_gpus() -> list[GPU]:
    """The CUDA GPUs PyTorch can use here, with their free memory ([] without PyTorch or a GPU)."""
    if importlib.util.find_spec("torch") is None:
        return []
    import torch

    if not torch.cuda.is_available():
        return []
    found = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        free, total = torch.cuda.mem_get_info(i)
        found.append(GPU(props.name, (props.major, props.minor), total, free))
    return found


def current() -> GPU | None:
    """The GPU single-process cells use (cuda:0 as PyTorch numbers them), or None without one."""
    found = cuda_gpus()
    return found[0] if found else None
