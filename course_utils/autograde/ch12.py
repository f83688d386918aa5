"""Exercises 12: a ring all-reduce built from point-to-point messages, equal to ``dist.all_reduce``.

The student writes ``ring_all_reduce(tensor)``: sum ``tensor`` over every rank, in place, using
only ``dist.send``/``recv``/``isend``/``irecv`` — a reduce-scatter (world_size - 1 steps, each
rank adding the chunk its left neighbour sends) then an all-gather (world_size - 1 steps passing
the finished chunks on). The check gives every rank its own tensor and compares each rank's result
with the sum of all of them.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from . import load_student, run_ranks, student_function

COLLECTIVES = ("all_reduce", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
               "reduce_scatter_tensor", "broadcast", "all_to_all", "all_to_all_single")


def rank_input(rank: int, numel: int, seed: int) -> torch.Tensor:
    """Rank ``rank``'s tensor: ``numel`` seeded values, different on every rank (float64, exact sums)."""
    generator = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.randint(-50, 50, (numel,), generator=generator).double()


def ring_rank(rank: int, world_size: int, student_file: str, *, numel: int, seed: int):
    """Harness (one rank): the student's ``ring_all_reduce`` on this rank's tensor.

    Returns ``(result, collectives)``: the tensor after the call and the names of the collectives
    the student called (which are not allowed here: they would do the work for them).
    """
    used: list[str] = []
    real = {name: getattr(dist, name) for name in COLLECTIVES if hasattr(dist, name)}

    def forbidden(name):
        def call(*args, **kwargs):
            used.append(name)
            return real[name](*args, **kwargs)
        return call

    for name in real:
        setattr(dist, name, forbidden(name))
    try:
        ring = student_function(load_student(student_file), "ring_all_reduce")
        tensor = rank_input(rank, numel, seed)
        ring(tensor)
        return tensor, used
    finally:
        for name, fn in real.items():
            setattr(dist, name, fn)


def check_ring_all_reduce(student_file: str, *, world_size: int = 4, numel: int = 10, seed: int = 0) -> None:
    """Run the student's ring on ``world_size`` ranks; every rank must hold the sum of all inputs."""
    results = run_ranks(ring_rank, student_file, world_size, numel=numel, seed=seed)
    inputs = [rank_input(r, numel, seed) for r in range(world_size)]
    total = torch.stack(inputs).sum(0)
    used = sorted({name for _, names in results for name in names})
    if used:
        raise AssertionError(f"you called dist.{', dist.'.join(used)}: the point is to build the all-reduce "
                             "yourself, from dist.send/recv (or isend/irecv) between ring neighbours only.")
    for rank, (result, _) in enumerate(results):
        if not torch.equal(result, total):
            hint = diagnose(result, inputs[rank], total, rank, world_size)
            raise AssertionError(f"rank {rank} of {world_size}: {hint}")


def diagnose(result: torch.Tensor, own: torch.Tensor, total: torch.Tensor, rank: int, world_size: int) -> str:
    """What one rank's result says about the mistake (``own``: its input, ``total``: the sum)."""
    if torch.equal(result, own):
        return ("the tensor is still this rank's own input: nothing was reduced. Write ring_all_reduce's body: "
                "world_size - 1 reduce-scatter steps, then world_size - 1 all-gather steps.")
    chunks = [list(t.tensor_split(world_size)) for t in (result, total)]
    done = [i for i, (r, t) in enumerate(zip(*chunks)) if torch.equal(r, t)]
    if done == [(rank + 1) % world_size]:
        return (f"only chunk {done[0]} holds the full sum: that is where a reduce-scatter ends on this rank. "
                "The all-gather is missing: world_size - 1 more steps, each sending on the chunk completed last.")
    if done:
        return (f"chunks {done} hold the full sum but the others do not: check which chunk each step sends "
                "and which it receives (in reduce-scatter step s, rank r sends chunk (r - s) % world_size "
                "to its right and adds the one from its left into chunk (r - s - 1) % world_size).")
    wrong = int((result != total).nonzero()[0])
    return (f"element {wrong} is {result[wrong].item():g}, but the sum over the ranks is {total[wrong].item():g}. "
            "Every element must be added exactly once from every rank.")
