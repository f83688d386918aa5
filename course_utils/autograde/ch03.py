"""Exercises 03: a DDP training loop — DistributedSampler, set_epoch and no_sync accumulation.

The student writes ``train(ddp_model, optimizer, dataset, *, epochs, batch_size, accumulate,
seed)``: each rank draws its share of ``dataset`` through a ``DistributedSampler`` shuffled with
``seed`` and reshuffled every epoch, runs micro-batches of ``batch_size``, and steps the optimizer
once per ``accumulate`` micro-batches with a single gradient all-reduce (the others' backward
inside ``no_sync()``). The check records what every rank drew, counts all-reduces and optimizer
steps, and compares the final weights with one process training on the same global batches.
"""
from __future__ import annotations

import gc

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Dataset, DistributedSampler

from ..bench import count_allreduces
from ..data import linear_regression
from ..models import mlp
from . import first_mismatch, load_student, mlp_parameters, run_ranks, same, student_function


def regression(sizes: list[int], n: int, seed: int):
    """``(X, y)``: ``n`` samples of ``sizes[0]`` features, and as many targets as the model has outputs."""
    X, y, _ = linear_regression(n, sizes[0], seed=seed)
    return X, np.tile(y, (1, sizes[-1]))


class RecordingDataset(Dataset):
    """``(x, y)`` pairs of a regression dataset that remember every index they were asked for."""

    def __init__(self, X, y):
        self.X, self.y, self.seen = torch.from_numpy(X), torch.from_numpy(y), []

    def __len__(self) -> int:
        return len(self.X)

    def __getitem__(self, i):
        self.seen.append(int(i))
        return self.X[i], self.y[i]


def training_rank(rank: int, world_size: int, student_file: str, *, sizes: list[int], n: int, epochs: int,
                  batch_size: int, accumulate: int, lr: float, seed: int) -> dict:
    """Harness (one rank): the student's ``train`` on a DDP model; what it drew, sent and stepped."""
    train = student_function(load_student(student_file), "train")
    dataset = RecordingDataset(*regression(sizes, n, seed))
    ddp_model = DistributedDataParallel(mlp(sizes, seed=seed))
    allreduces = count_allreduces(ddp_model)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=lr)
    steps = [0]
    real_step = optimizer.step

    def counted_step(*args, **kwargs):
        steps[0] += 1
        return real_step(*args, **kwargs)

    optimizer.step = counted_step
    train(ddp_model, optimizer, dataset, epochs=epochs, batch_size=batch_size, accumulate=accumulate, seed=seed)
    weights = [p.detach().clone() for p in ddp_model.module.parameters()]
    result = dict(seen=dataset.seen, allreduces=allreduces[0], steps=steps[0], weights=weights)
    del ddp_model, optimizer   # a Python comm hook must be gone before the process group (bench docs)
    gc.collect()
    return result


def rank_orders(n: int, world_size: int, epochs: int, seed: int) -> list[list[list[int]]]:
    """``orders[epoch][rank]``: the indices a shuffled, seeded, set_epoch'ed DistributedSampler draws."""
    dataset = range(n)
    orders = []
    for epoch in range(epochs):
        samplers = [DistributedSampler(dataset, num_replicas=world_size, rank=r, shuffle=True, seed=seed)
                    for r in range(world_size)]
        for s in samplers:
            s.set_epoch(epoch)
        orders.append([list(s) for s in samplers])
    return orders


def reference_weights(*, sizes: list[int], n: int, epochs: int, batch_size: int, accumulate: int, lr: float,
                      seed: int, world_size: int, zero_grad: bool = True) -> list[torch.Tensor]:
    """One process, one optimizer step per global batch: every rank's ``accumulate`` micro-batches."""
    X, y = map(torch.from_numpy, regression(sizes, n, seed))
    with torch.random.fork_rng():
        model = mlp(sizes, seed=seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    per_step = batch_size * accumulate
    for order in rank_orders(n, world_size, epochs, seed):
        for start in range(0, len(order[0]), per_step):
            rows = [i for rank_order in order for i in rank_order[start:start + per_step]]
            nn.functional.mse_loss(model(X[rows]), y[rows]).backward()
            optimizer.step()
            if zero_grad:
                optimizer.zero_grad()
    return [p.detach() for p in model.parameters()]


def check_ddp_training(student_file: str, *, world_size: int = 2, sizes: tuple[int, ...] = (4, 8, 1), n: int = 32,
                       epochs: int = 2, batch_size: int = 4, accumulate: int = 2, lr: float = 0.05,
                       seed: int = 0) -> None:
    """Run the student's ``train`` on ``world_size`` ranks; fail with the likely cause."""
    per_step = world_size * batch_size * accumulate
    if n % per_step:
        raise ValueError(f"n={n} must be a multiple of world_size * batch_size * accumulate = {per_step}")
    job = dict(sizes=list(sizes), n=n, epochs=epochs, batch_size=batch_size, accumulate=accumulate, lr=lr, seed=seed)
    results = run_ranks(training_rank, student_file, world_size, **job)
    orders = rank_orders(n, world_size, epochs, seed)
    for rank, result in enumerate(results):
        _check_draws(rank, world_size, result["seen"], [epoch[rank] for epoch in orders], n, epochs)
    micro_batches, steps = epochs * n // (world_size * batch_size), epochs * n // per_step
    got = results[0]
    if got["steps"] == micro_batches != steps:
        raise AssertionError(f"the optimizer stepped {got['steps']} times, once per micro-batch: step (and zero "
                             f"the gradients) once every {accumulate} micro-batches, {steps} steps in all.")
    if got["allreduces"] == micro_batches != steps:
        raise AssertionError(f"DDP all-reduced the gradients {got['allreduces']} times, after every micro-batch: "
                             f"run the backward of all but the last micro-batch of each step inside "
                             f"ddp_model.no_sync(), so that only {steps} all-reduces happen.")
    want = reference_weights(world_size=world_size, **job)
    names = [name for name, _ in mlp_parameters(sizes)]
    mismatch = first_mismatch(got["weights"], want, names, atol=1e-5, rtol=1e-4)
    if mismatch is None:
        return
    if same(got["weights"], reference_weights(world_size=world_size, **{**job, "lr": lr * accumulate}), atol=1e-5):
        raise AssertionError(f"the weights are those of a learning rate {accumulate}x too large: the gradients "
                             f"were summed over the {accumulate} micro-batches, not averaged. Divide each "
                             "micro-batch's loss by accumulate.")
    if same(got["weights"], reference_weights(world_size=world_size, zero_grad=False, **job), atol=1e-5):
        raise AssertionError("every step added the gradients of all earlier steps: zero the gradients after "
                             "each optimizer step (optimizer.zero_grad()).")
    name, error = mismatch
    raise AssertionError(f"the final `{name}` differs from one-process training on the same global batches by "
                         f"up to {error:.3g} (the loss is the mean squared error of each micro-batch).")


def _check_draws(rank: int, world_size: int, seen: list[int], want: list[list[int]], n: int, epochs: int) -> None:
    """Fail if rank ``rank`` did not draw, epoch by epoch, what a DistributedSampler gives it."""
    if not seen:
        raise AssertionError(f"rank {rank} drew no sample from the dataset: train still does nothing. "
                             "Build a DistributedSampler and a DataLoader over it, then loop over the epochs.")
    per_epoch = len(seen) // epochs
    if per_epoch == n:
        raise AssertionError(f"rank {rank} drew all {n} samples every epoch: each rank must draw only its "
                             f"1/{world_size} share. Give the DataLoader a DistributedSampler(dataset, "
                             "num_replicas=world_size, rank=rank, shuffle=True, seed=seed).")
    epochs_seen = [seen[i * per_epoch:(i + 1) * per_epoch] for i in range(epochs)]
    if epochs > 1 and all(e == epochs_seen[0] for e in epochs_seen) and want[0] != want[1]:
        raise AssertionError(f"sampler epoch not set: rank {rank} drew the samples in the same order in all "
                             f"{epochs} epochs. Call sampler.set_epoch(epoch) at the start of every epoch, "
                             "or every epoch repeats the first one's shuffle.")
    if epochs_seen != want:
        raise AssertionError(f"rank {rank} drew {epochs_seen[0][:6]}... in epoch 0, but DistributedSampler("
                             f"dataset, num_replicas={world_size}, rank={rank}, shuffle=True, seed=seed) gives "
                             f"{want[0][:6]}...: use that sampler (with the seed you were given), no other "
                             "shuffling, and a DataLoader without worker processes.")
