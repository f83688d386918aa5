"""An instrument for pipeline stages: how long a stage computes, and how many microbatches it holds.

Chapter 09 wraps each pipeline stage in :class:`StageMeter` to measure a schedule's bubble and its
memory without touching the stage's own code::

    meter = StageMeter(stage_module, device)
    stage = PipelineStage(meter, rank, world_size, device)     # the schedule sees an ordinary module
    ...                                                         # one pipeline step
    meter.busy_s, meter.max_held                                # seconds computed, most microbatches held
"""
from __future__ import annotations

import time

import torch
from torch import nn

from .measure import synchronize


class _Clock(torch.autograd.Function):
    """Identity; its backward calls ``meter.<event>()`` when the gradient reaches this point."""

    @staticmethod
    def forward(ctx, x, meter, event):
        ctx.meter, ctx.event = meter, event
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        getattr(ctx.meter, ctx.event)()
        return grad, None, None


class StageMeter(nn.Module):
    """Wraps a stage: seconds of compute (forward and backward) and microbatches in flight.

    ``held`` counts microbatches whose forward ran but whose backward has not: their activations
    are kept in memory; ``max_held`` is the most at once since :meth:`reset`. The backward is timed
    from the gradient reaching the output to it reaching the input (which is made to require a
    gradient, so even the first stage's backward ends there). ``busy_s`` sums both, in seconds.
    """

    def __init__(self, module: nn.Module, device: torch.device):
        super().__init__()
        self.module, self.device = module, device
        self.reset()

    def reset(self) -> None:
        self.busy_s, self.held, self.max_held = 0.0, 0, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._start()
        x = x if x.requires_grad else x.detach().requires_grad_()
        y = self.module(_Clock.apply(x, self, "_backward_end"))
        self._stop()
        self.held += 1
        self.max_held = max(self.max_held, self.held)
        return _Clock.apply(y, self, "_start")

    def _start(self) -> None:
        synchronize(self.device.type)
        self._t = time.perf_counter()

    def _stop(self) -> None:
        synchronize(self.device.type)
        self.busy_s += time.perf_counter() - self._t

    def _backward_end(self) -> None:
        self._stop()
        self.held -= 1
