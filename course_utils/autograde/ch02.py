"""Exercises 02: average every rank's gradients with one all-reduce (one bucket, as DDP does).

The student writes ``average_gradients(model, world_size)``: after ``backward()`` on each rank's
shard, make every ``p.grad`` the mean over the ranks with a single ``dist.all_reduce`` on one
flat buffer. On equal shards that mean is the gradient of the whole batch in one process, which
is what the check compares it with.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from ..data import linear_regression, shard
from ..models import mlp
from . import first_mismatch, load_student, mlp_parameters, run_ranks, same, student_function


def _problem(sizes: list[int], n: int, seed: int, rows=slice(None)):
    """The model (same initial weights everywhere) and the ``rows`` of a regression dataset."""
    X, y, _ = linear_regression(n, sizes[0], seed=seed)
    return mlp(sizes, seed=seed), torch.from_numpy(X[rows]), torch.from_numpy(y[rows]).expand(-1, sizes[-1])


def gradients_rank(rank: int, world_size: int, student_file: str, *, sizes: list[int], n: int, seed: int):
    """Harness (one rank): gradients of this rank's shard, then the student's ``average_gradients``.

    Returns ``(local, averaged, calls)``: the gradients before and after the student's call (lists
    of tensors, one per parameter) and the element count of every ``dist.all_reduce`` it made.
    """
    calls: list[int] = []
    real_all_reduce = dist.all_reduce

    def counted_all_reduce(tensor, *args, **kwargs):
        calls.append(tensor.numel())
        return real_all_reduce(tensor, *args, **kwargs)

    dist.all_reduce = counted_all_reduce   # before the student's file is loaded: catches every import style
    try:
        average = student_function(load_student(student_file), "average_gradients")
        model, x, y = _problem(sizes, n, seed, shard(n, rank, world_size))
        nn.functional.mse_loss(model(x), y).backward()
        local = [p.grad.clone() for p in model.parameters()]
        average(model, world_size)
        return local, [None if p.grad is None else p.grad.clone() for p in model.parameters()], calls
    finally:
        dist.all_reduce = real_all_reduce


def reference_gradients(sizes: list[int], n: int, seed: int) -> list[torch.Tensor]:
    """The gradients of the mean loss over all ``n`` samples, in one process."""
    with torch.random.fork_rng():   # leave the caller's random state as it was
        model, x, y = _problem(sizes, n, seed)
    nn.functional.mse_loss(model(x), y).backward()
    return [p.grad for p in model.parameters()]


def check_average_gradients(student_file: str, *, world_size: int = 2, sizes: tuple[int, ...] = (6, 8, 1),
                            n: int = 16, seed: int = 0) -> None:
    """Run the student's ``average_gradients`` on ``world_size`` ranks; fail with the likely cause."""
    if n % world_size:
        raise ValueError(f"n={n} must divide evenly over {world_size} ranks (equal shards)")
    sizes = list(sizes)
    results = run_ranks(gradients_rank, student_file, world_size, sizes=sizes, n=n, seed=seed)
    want = reference_gradients(sizes, n, seed)
    names = [name for name, _ in mlp_parameters(sizes)]
    for rank, (local, got, calls) in enumerate(results):
        if first_mismatch(got, want, names, atol=1e-6, rtol=1e-5) is not None:
            hint = diagnose(local, got, want, names, calls, world_size)
            raise AssertionError(f"rank {rank} of {world_size}: {hint}")
    calls = results[0][2]
    if len(calls) != 1:
        raise AssertionError(
            f"The averages are right, but you called dist.all_reduce {len(calls)} times (one per parameter?). "
            "Each call is a message with its own latency; put every gradient into one flat tensor "
            "(torch.cat of p.grad.flatten()), all-reduce that once, and copy the slices back.")


def diagnose(local: list, got: list, want: list, names: list[str], calls: list[int], world_size: int) -> str:
    """What a rank's gradients after the student's call say about the mistake."""
    if same(got, local):
        if not calls:
            return ("average_gradients changed no gradient and called no all_reduce: it still does "
                    "nothing. Write its body: one flat tensor of all the gradients, one dist.all_reduce, "
                    "divide by world_size, copy back into each p.grad.")
        return ("you all-reduced, but every p.grad is still this rank's own gradient: the result never "
                "went back. torch.cat makes a copy; all_reduce changes only the tensor you pass it, so "
                "copy its slices back into the gradients (p.grad.copy_(...)).")
    if same(got, [w * world_size for w in want]):
        return (f"forgot to divide by world size: every gradient is {world_size}x the average, the sum over "
                "the ranks (all_reduce sums). Divide by world_size after the all_reduce.")
    if same(got, [g / world_size for g in local]):
        return ("divided by world_size, but the gradients never met: nothing was summed over the ranks. "
                "all_reduce the buffer before dividing.")
    if same(got, [w / world_size for w in want]):
        return f"divided by world_size twice: every gradient is 1/{world_size} of the average."
    averaged = [name for name, g, w in zip(names, got, want) if same([g], [w])]
    untouched = [name for name, g, loc in zip(names, got, local) if same([g], [loc])]
    if averaged and untouched:
        return (f"{', '.join(averaged)} averaged, but {', '.join(untouched)} still hold this rank's own "
                "gradient: every parameter's gradient must go into the buffer.")
    name, error = first_mismatch(got, want, names, atol=1e-6, rtol=1e-5)
    return (f"the gradient of `{name}` differs from the one-process gradient by up to {error:.3g} "
            "(it must be the mean over the ranks, to float32 rounding).")
