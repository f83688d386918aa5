"""Data parallel training from scratch: every rank computes gradients on its shard, then they average.

This is what ``DistributedDataParallel`` does, in 30 readable lines (chapter 02 takes it apart;
chapter 03 replaces it with DDP). :func:`train` is a worker for ``course_utils.launch.run``; with
``world_size=1`` it is ordinary large-batch training, which is the point: the two must agree.
"""
from __future__ import annotations

import time

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.flop_counter import FlopCounterMode

from .data import shard
from .models import mlp
from .placement import rank_device


def average_gradients(model: torch.nn.Module, world_size: int, divide: bool = True) -> None:
    """All-reduce every gradient (a sum over ranks), then divide by ``world_size`` to average.

    ``divide=False`` is the classic bug: the update is ``world_size`` times too large.
    """
    for p in model.parameters():
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
        if divide:
            p.grad /= world_size


def global_batches(n: int, batch_size: int, steps: int, seed: int = 0) -> list[np.ndarray]:
    """Indices of each step's global batch: a fresh seeded permutation per epoch, cut in batches."""
    if batch_size > n:
        raise ValueError(f"batch_size {batch_size} is larger than the dataset ({n} samples)")
    rng = np.random.default_rng(seed)
    batches: list[np.ndarray] = []
    while len(batches) < steps:
        order = rng.permutation(n)
        batches += [order[i:i + batch_size] for i in range(0, n - batch_size + 1, batch_size)]
    return batches[:steps]


def train(rank: int, world_size: int, X: np.ndarray, y: np.ndarray, *, sizes: list[int],
          steps: int, batch_size: int, lr: float, optimizer: str = "sgd", divide: bool = True,
          seed: int = 0, clip_norm: float | None = None) -> dict:
    """Launched worker: train ``mlp(sizes)`` on ``(X, y)`` by gradient averaging over the ranks.

    Each step takes one global batch of ``batch_size`` samples; rank ``r`` computes on its shard
    (features *and* labels, same indices) of ``batch_size / world_size`` samples. Integer ``y`` is a
    classification (cross-entropy), float ``y`` a regression (mean squared error). ``clip_norm``:
    clip the averaged gradient to this global L2 norm before the step (``clip_grad_norm_``).

    Returns ``state`` (final parameters), ``losses`` (global mean loss per step), and what this
    rank spent: ``flops`` (matmul flops, forward + backward), ``cpu_s`` and ``wall_s`` seconds.
    Runs on the rank's device (its own GPU under nccl, else the CPU); ``state`` comes back on the CPU.
    """
    if batch_size % world_size:
        raise ValueError(f"batch_size {batch_size} must divide evenly over {world_size} ranks, "
                         "or the average of the ranks' mean losses is not the global mean")
    device = rank_device()
    model = mlp(sizes, seed=seed).to(device)  # same seed: same initial weights on every rank
    opt = (torch.optim.SGD(model.parameters(), lr=lr) if optimizer == "sgd"
           else torch.optim.Adam(model.parameters(), lr=lr))
    X_t, y_t = torch.from_numpy(X).to(device), torch.from_numpy(y).to(device)
    loss_fn = torch.nn.functional.cross_entropy if y.dtype.kind == "i" else torch.nn.functional.mse_loss
    losses, flops = [], 0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for batch in global_batches(len(X), batch_size, steps, seed):
        mine = batch[shard(len(batch), rank, world_size)]  # this rank's shard of the global batch
        opt.zero_grad()
        with FlopCounterMode(display=False) as counter:
            loss = loss_fn(model(X_t[mine]), y_t[mine])
            loss.backward()
        flops += counter.get_total_flops()
        if world_size > 1:
            average_gradients(model, world_size, divide)
            dist.all_reduce(loss := loss.detach(), op=dist.ReduceOp.SUM)
            loss /= world_size
        if clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
        opt.step()
        losses.append(loss.item())
    return {"state": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}, "losses": losses,
            "flops": flops, "cpu_s": time.process_time() - cpu0, "wall_s": time.perf_counter() - wall0}
