"""Pretend PyTorch sees CUDA GPUs: a T4, V100, A100, L4, H100 or H200, one or several.

    from fake_cuda import fake_cuda
    def test_something(monkeypatch):
        fake_cuda(monkeypatch, "T4", count=1)

patches the parts of ``torch.cuda`` the course asks (is_available, device_count, get_device_name,
get_device_properties, get_device_capability, mem_get_info, is_bf16_supported) with what a real card
answers. ``is_bf16_supported`` behaves as PyTorch's: by default it counts emulation (True on a T4 or
V100), with ``including_emulation=False`` only sm80+. Nothing is ever allocated on the fake GPU.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch

from course_utils.gpu_facts import GPU, KNOWN

CARDS = ("T4", "V100", "A100", "L4", "H100", "H200")
COUNTS = (1, 2, 8)
SMS = {g.name: n for g, n in zip(KNOWN.values(), (40, 80, 108, 58, 132, 132))}   # streaming multiprocessors


def fake_cuda(monkeypatch, card: str | GPU, count: int = 1, free_bytes: int | None = None) -> GPU:
    """Make ``torch.cuda`` report ``count`` GPUs of kind ``card``; returns the faked :class:`GPU`."""
    gpu = KNOWN[card] if isinstance(card, str) else card
    if free_bytes is not None:
        gpu = gpu.with_free(free_bytes)

    def index(device=None) -> int:
        i = 0 if device is None else device if isinstance(device, int) else (torch.device(device).index or 0)
        if not 0 <= i < count:
            raise RuntimeError(f"CUDA error: invalid device ordinal {i} (fake: {count} GPUs)")
        return i

    def props(device=None):
        index(device)
        return SimpleNamespace(name=gpu.name, major=gpu.capability[0], minor=gpu.capability[1],
                               total_memory=gpu.total_bytes, multi_processor_count=SMS.get(gpu.name, 100))

    def mem_get_info(device=None) -> tuple[int, int]:
        index(device)
        return gpu.free, gpu.total_bytes

    def bf16(including_emulation: bool = True) -> bool:
        return gpu.capability >= (8, 0) or including_emulation

    cuda = torch.cuda
    monkeypatch.setattr(cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(cuda, "device_count", lambda: count)
    monkeypatch.setattr(cuda, "get_device_name", lambda device=None: props(device).name)
    monkeypatch.setattr(cuda, "get_device_properties", props)
    monkeypatch.setattr(cuda, "get_device_capability", lambda device=None: (props(device).major, props(device).minor))
    monkeypatch.setattr(cuda, "mem_get_info", mem_get_info)
    monkeypatch.setattr(cuda, "is_bf16_supported", bf16)
    return gpu
