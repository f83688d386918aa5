"""The few small PyTorch models used across chapters."""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


def mlp(sizes: list[int], activation: type[nn.Module] = nn.ReLU, seed: int | None = 0) -> nn.Sequential:
    """A multilayer perceptron with layer widths ``sizes``, e.g. ``mlp([64, 128, 10])``.

    With ``seed`` set, the initial weights are the same in every process that builds it — the
    starting point data parallel training needs on all ranks.
    """
    if len(sizes) < 2:
        raise ValueError(f"sizes needs an input and an output width, got {sizes}")
    if seed is not None:
        torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(activation())
    return nn.Sequential(*layers)


def count_params(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def max_param_diff(a: nn.Module | Sequence[torch.Tensor], b: nn.Module | Sequence[torch.Tensor]) -> float:
    """Largest absolute difference between matching parameters of two same-shaped models.

    ``a`` and ``b`` are models, or lists of their parameter tensors in the same order (what
    distributed workers send back).
    """
    pa, pb = (list(m.parameters()) if isinstance(m, nn.Module) else list(m) for m in (a, b))
    if len(pa) != len(pb) or any(x.shape != y.shape for x, y in zip(pa, pb)):
        raise ValueError("the two models do not have the same parameter shapes")
    return max((x.detach() - y.detach()).abs().max().item() for x, y in zip(pa, pb))
