"""Compare what a student's ranks computed with the same computation in one process.

Tensors are compared in float64 within a tolerance; the first one that differs is named, so that
the feedback can say which parameter or gradient diverged and by how much.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def first_mismatch(got: Sequence, want: Sequence, names: Sequence[str], *, atol: float,
                   rtol: float = 0.0) -> tuple[str, float] | None:
    """The first ``(name, max |got - want|)`` where two lists of tensors differ, else None.

    A missing tensor (None) or a shape mismatch counts as an infinite difference.
    """
    import torch

    for name, g, w in zip(names, got, want):
        if g is None or tuple(g.shape) != tuple(w.shape):
            return name, float("inf")
        g, w = g.detach().double(), w.detach().double()
        if not torch.allclose(g, w, atol=atol, rtol=rtol):
            return name, float((g - w).abs().max())
    return None


def same(got: Sequence, want: Sequence, *, atol: float = 1e-6, rtol: float = 1e-5) -> bool:
    """Whether two lists of tensors match (same length, shapes, values within tolerance)."""
    return len(got) == len(want) and first_mismatch(got, want, [""] * len(got), atol=atol, rtol=rtol) is None


def mlp_parameters(sizes: Sequence[int]) -> list[tuple[str, Any]]:
    """``mlp(sizes).named_parameters()`` built on the meta device: names and shapes, no memory, and no
    random numbers drawn (the caller's random state stays as it was)."""
    import torch

    from course_utils.models import mlp

    with torch.device("meta"):
        return list(mlp(list(sizes), seed=None).named_parameters())
