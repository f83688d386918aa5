"""Exercises 02: graders for sharding a dataset, combining unequal shards' gradients, the
forget-to-divide bug, and averaging every rank's gradients with one all-reduce (one bucket, as DDP does).

Q1-Q3 run in the notebook's process: the checks call the student's function on several inputs,
among them uneven splits (``n`` not a multiple of the ranks, fewer samples than ranks) and ranks
holding unequal numbers of samples, and name the classic mistake a result matches.

Q4: the student writes ``average_gradients(model, world_size)``: after ``backward()`` on each rank's
shard, make every ``p.grad`` the mean over the ranks with a single ``dist.all_reduce`` on one
flat buffer. On equal shards that mean is the gradient of the whole batch in one process, which
is what the check compares it with; the harness also records every collective the student calls.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from course_utils.data import linear_regression, shard
from course_utils.models import mlp

from .compare import first_mismatch, mlp_parameters, same
from .feedback import call_student, check_number, explain
from .hardware import recorded_collectives
from .mutant import Mutant
from .ranks import run_ranks
from .student import load_student, student_function

# --- Q1: every sample on exactly one rank, with its label ---------------------------------------------

def _dataset(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` samples whose features and label say which sample they are: ``X[i] = (i, -i)``, ``y[i] = 1000 + i``."""
    ids = np.arange(n, dtype=float)
    return np.column_stack([ids, -ids]), 1000 + ids


def check_shard(student_shard: Callable, cases: Sequence[tuple[int, int]] = ((10, 3),), *, seed: int = 0) -> None:
    """Fail unless ``shard(X, y, rank, world_size)`` gives, over the ranks, every ``(n, world_size)``
    case's samples exactly once, each with its own label, in shards whose sizes differ by at most one."""
    state = np.random.get_state()
    np.random.seed(seed)   # an answer that draws from np.random gives the same verdict every time
    try:
        for n, world_size in cases:
            X, y = _dataset(n)
            parts = [_one_shard(student_shard, X, y, rank, world_size) for rank in range(world_size)]
            _check_cover(parts, n, world_size)
    finally:
        np.random.set_state(state)


def _one_shard(student_shard: Callable, X: np.ndarray, y: np.ndarray, rank: int, world_size: int) -> np.ndarray:
    """The sample ids of one rank's shard, after checking it holds whole rows of X with their labels."""
    call = f"shard(X, y, rank={rank}, world_size={world_size}) with {len(X)} samples"
    part = call_student(student_shard, "shard", X.copy(), y.copy(), rank, world_size)
    if part is None:
        raise AssertionError(f"{call} returned None: shard still does nothing. Return (X_r, y_r).")
    if not isinstance(part, (tuple, list)) or len(part) != 2:
        raise AssertionError(f"{call} returned {type(part).__name__}: return a tuple (X_r, y_r).")
    Xr, yr = np.asarray(part[0], dtype=float), np.asarray(part[1], dtype=float)
    if Xr.ndim != 2 or Xr.shape[1] != X.shape[1]:
        raise AssertionError(f"{call}: X_r has shape {Xr.shape}; it must keep whole rows of X, shape (samples, "
                             f"{X.shape[1]}).")
    if yr.shape != (len(Xr),):
        raise AssertionError(f"{call}: X_r has {len(Xr)} samples but y_r has shape {yr.shape}: shard y with the "
                             "same indices as X, one label per sample.")
    ids = Xr[:, 0]
    if not (np.array_equal(Xr[:, 1], -ids) and np.all(ids == np.round(ids)) and np.all((ids >= 0) & (ids < len(X)))):
        raise AssertionError(f"{call}: X_r holds rows that are not rows of X: select rows, keep them whole.")
    if not np.array_equal(yr, y[ids.astype(int)]):
        raise AssertionError(f"{call}: a label got separated from its features: index X and y with the same "
                             "indices.")
    return ids.astype(int)


def _check_cover(parts: list[np.ndarray], n: int, world_size: int) -> None:
    """Every sample on exactly one rank; shard sizes differ by at most one."""
    counts = np.bincount(np.concatenate(parts), minlength=n) if n else np.zeros(0, int)
    lost, twice = np.flatnonzero(counts == 0).tolist(), np.flatnonzero(counts > 1).tolist()
    where = f"with {n} samples on {world_size} ranks"
    if lost and twice:
        raise AssertionError(f"{where}, samples {twice[:5]} landed on more than one rank and {lost[:5]} on none: "
                             "every rank must split the same order of the samples (no rank may shuffle on its "
                             "own, unseeded); take every world_size-th sample from rank.")
    if twice:
        raise AssertionError(f"{where}, samples {twice[:5]} landed on more than one rank: the shards overlap.")
    if lost:
        remainder = n % world_size
        if remainder and lost == list(range(n - remainder, n)):
            raise AssertionError(f"{where}, the last {remainder} samples (n % world_size) were dropped: "
                                 "n // world_size samples per rank loses the remainder; give it to some ranks.")
        raise AssertionError(f"{where}, samples {lost[:5]} landed on no rank: every sample must be on one rank.")
    sizes = [len(p) for p in parts]
    if max(sizes) - min(sizes) > 1:
        raise AssertionError(f"{where}, the shard sizes are {sizes}: they differ by more than one. Spread the "
                             "remainder, one extra sample for each of the first n % world_size ranks "
                             "(np.array_split, or every world_size-th sample).")


# --- Q2: the global gradient from ranks with unequal shards -----------------------------------------

def mean_loss_gradient(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The gradient of the mean squared error ``mean((X w - y)²)`` with respect to ``w`` (shape of ``w``)."""
    return 2 / len(X) * X.T @ (X @ w - y)


def check_global_gradient(global_gradient: Callable, counts: Sequence[int] = (7, 3), *, features: int = 3,
                          seed: int = 0) -> None:
    """Fail unless ``global_gradient(grads, counts)`` is the gradient of the mean loss over all samples.

    Rank ``r`` holds ``counts[r]`` samples of a seeded regression problem and computed ``grads[r]``,
    the gradient of its own mean loss (an array of ``features`` numbers). The inputs must be left
    as they were.
    """
    rng = np.random.default_rng(seed)
    X, y = rng.standard_normal((sum(counts), features)), rng.standard_normal(sum(counts))
    w = rng.standard_normal(features)
    cut = np.cumsum([0, *counts])
    grads = [mean_loss_gradient(w, X[a:b], y[a:b]) for a, b in zip(cut, cut[1:])]
    copies = [g.copy() for g in grads]
    call = f"global_gradient(grads, counts={list(counts)})"
    got = call_student(global_gradient, "global_gradient", grads, list(counts))
    if got is None:
        raise AssertionError(f"`{call}` returned None: global_gradient still does nothing. Return one array.")
    got = np.asarray(got, dtype=float)
    if any(not np.array_equal(g, c) for g, c in zip(grads, copies)):
        raise AssertionError(f"`{call}` changed the caller's grads in place (e.g. `total = grads[0]; total *= ...`): "
                             "those arrays are the ranks' gradients, still in use. Build a new array.")
    want = mean_loss_gradient(w, X, y)
    if got.shape != want.shape:
        raise AssertionError(f"`{call}` has shape {got.shape}, expected {want.shape} (one number per weight): "
                             "combine the ranks, axis 0 of np.stack(grads), not the weights.")
    if np.allclose(got, want, rtol=1e-9, atol=1e-12):
        return
    g, c = np.stack(grads), np.asarray(counts, dtype=float)[:, None]
    mistakes = (
        (g.mean(axis=0), "you weighted every rank equally: rank r's gradient stands for counts[r] samples, so weight "
                         "it by counts[r] / sum(counts)."),
        ((c * g).sum(axis=0), "you summed the weighted gradients but did not divide by the total number of "
                              "samples, sum(counts)."),
        ((c * g).sum(axis=0) / len(counts), "you divided by the number of ranks, not by the number of samples, "
                                            "sum(counts)."),
        ((c * g).sum(axis=0) / (counts[0] * len(counts)),
         "you multiplied one rank's count by the number of ranks: ranks can hold different numbers of samples, "
         "divide by sum(counts)."),
        (g.sum(axis=0), "you summed the gradients: weight each by its share of the samples, counts[r] / sum(counts)."),
    )
    why = next((message for wrong, message in mistakes if np.allclose(got, wrong, rtol=1e-9, atol=1e-12)),
               "weight each rank's gradient by its share of the samples, counts[r] / sum(counts).")
    raise AssertionError(f"`{call}` is off by up to {float(np.max(np.abs(got - want))):.3g}: {why}")


# --- Q3: the forget-to-divide bug -------------------------------------------------------------------

LR_CASES = ((0.1, 2), (0.01, 64), (0.5, 1), (3e-4, 8), (0.05, 3))
LR_MISTAKES = (
    (lambda lr, n: lr / n, "you divided: the summed gradient is world_size times the average, so each step is "
                           "world_size times larger, like a larger learning rate."),
    (lambda lr, n: lr, "summing changes the step: SGD moves by lr * gradient, and the sum is world_size times "
                       "the average gradient."),
    (lambda lr, n: lr * math.sqrt(n), "the square-root scaling rule is a heuristic for larger batches; this bug "
                                      "multiplies the gradient, and so the step, by exactly world_size."),
    (lambda lr, n: lr * (n - 1), "the all-reduce sums world_size gradients, not world_size - 1."),
    (lambda lr, n: lr * 2, "you multiplied by 2 whatever the world size: the factor is world_size."),
    (lambda lr, n: n, "you returned the world size alone: the step is lr times the summed gradient."),
)


def check_effective_lr(effective_lr: Callable, cases: Sequence[tuple[float, int]] = LR_CASES[:2]) -> None:
    """Fail unless ``effective_lr(lr, world_size)`` is the learning rate the bug trains like, ``lr * world_size``."""
    got = [check_number(call_student(effective_lr, "effective_lr", lr, n), f"effective_lr({lr}, {n})")
           for lr, n in cases]
    for (lr, n), g in zip(cases, got):
        if not math.isclose(g, lr * n, rel_tol=1e-9):
            why = explain(got, cases, LR_MISTAKES) or "SGD's step is lr * gradient, and the sum is world_size times it."
            raise AssertionError(f"`effective_lr({lr}, {n})` returned {g:.6g}, expected {lr * n:.6g}: {why}")


# --- Q4: average the gradients with one all-reduce --------------------------------------------------

def _problem(sizes: list[int], n: int, seed: int, rows=slice(None)):
    """The model (same initial weights everywhere) and the ``rows`` of a regression dataset."""
    X, y, _ = linear_regression(n, sizes[0], seed=seed)
    return mlp(sizes, seed=seed), torch.from_numpy(X[rows]), torch.from_numpy(y[rows]).expand(-1, sizes[-1])


def gradients_rank(rank: int, world_size: int, student_file: str, *, sizes: list[int], n: int, seed: int):
    """Harness (one rank): gradients of this rank's shard, then the student's ``average_gradients``.

    Returns ``(local, averaged, calls, others, moved)``: the gradients before and after the
    student's call (lists of tensors, one per parameter), the element count of every
    ``dist.all_reduce`` it made, the names of the other collectives it called, and whether it
    changed any weight (it must change only the gradients).
    """
    with recorded_collectives() as (all_reduces, others):   # before the student's file is loaded
        average = student_function(load_student(student_file), "average_gradients")
        model, x, y = _problem(sizes, n, seed, shard(n, rank, world_size))
        nn.functional.mse_loss(model(x), y).backward()
        local = [p.grad.clone() for p in model.parameters()]
        weights = [p.detach().clone() for p in model.parameters()]
        average(model, world_size)
    averaged = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
    moved = not same([p.detach() for p in model.parameters()], weights, atol=0, rtol=0)
    return local, averaged, [call["numel"] for call in all_reduces], others, moved


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
    for rank, (local, got, calls, _others, moved) in enumerate(results):
        if moved and same(got, local):
            raise AssertionError(f"rank {rank} of {world_size}: the weights changed and the gradients did not: you "
                                 "averaged the weights (p or p.data), not the gradients. Build the buffer from "
                                 "p.grad and copy the average back into p.grad.")
        if first_mismatch(got, want, names, atol=1e-6, rtol=1e-5) is not None:
            hint = diagnose(local, got, want, names, calls, world_size)
            raise AssertionError(f"rank {rank} of {world_size}: {hint}")
        if moved:
            raise AssertionError(f"rank {rank} of {world_size}: the gradients are right, but average_gradients "
                                 "changed the weights too: it must change only each p.grad (the optimizer's step "
                                 "moves the weights, after it).")
    calls, others = results[0][2], results[0][3]
    if others:
        used = ", ".join(f"dist.{name}" for name in dict.fromkeys(others))
        raise AssertionError(f"The averages are right, but you used {used}: an all-gather sends every rank "
                             f"all {world_size} copies of the gradients, (world_size - 1) times the bytes a ring "
                             "all-reduce sends. Sum them with one dist.all_reduce, then divide.")
    if len(calls) != 1:
        raise AssertionError(
            f"The averages are right, but you called dist.all_reduce {len(calls)} times (one per parameter?). "
            "Each call is a message with its own latency; put every gradient into one flat tensor "
            "(torch.cat of p.grad.flatten()), all-reduce that once, and copy the slices back.")
    total = sum(math.prod(p.shape) for _, p in mlp_parameters(sizes))
    if calls[0] != total:
        raise AssertionError(f"The averages are right, but your all_reduce sent {calls[0]} numbers, not the "
                             f"{total} gradients: all-reduce exactly the flat buffer of all gradients.")


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
    first = torch.cat([w.flatten() for w in want])
    if len(got) > 1 and all(g is not None and same([g.flatten()], [first[:g.numel()]]) for g in got):
        return ("every gradient got the first slice of the averaged buffer: the offset never advanced. "
                "After copying a gradient's slice, add its numel() to the offset.")
    averaged = [name for name, g, w in zip(names, got, want) if same([g], [w])]
    untouched = [name for name, g, loc in zip(names, got, local) if same([g], [loc])]
    if averaged and untouched:
        return (f"{', '.join(averaged)} averaged, but {', '.join(untouched)} still hold this rank's own "
                "gradient: every parameter's gradient must go into the buffer.")
    name, error = first_mismatch(got, want, names, atol=1e-6, rtol=1e-5)
    return (f"the gradient of `{name}` differs from the one-process gradient by up to {error:.3g} "
            "(it must be the mean over the ranks, to float32 rounding).")


_SHARD = "idx = np.arange(rank, len(X), world_size)"
_GLOBAL = "sum(c * g for c, g in zip(counts, grads)) / sum(counts)"
_Q4_HEAD = ("%%writefile work/ex02_worker.py\nimport torch\nimport torch.distributed as dist\n\n\n"
            "def average_gradients(model, world_size):\n")

MUTANTS = {
    "q1": (
        Mutant("floor-sized blocks", "were dropped", edits=((_SHARD, (
            "size = len(X) // world_size\n    idx = np.arange(rank * size, (rank + 1) * size)")),)),
        Mutant("ceil-sized blocks", "differ by more than one", edits=((_SHARD, (
            "size = -(-len(X) // world_size)\n    idx = np.arange(rank * size, min((rank + 1) * size, len(X)))")),)),
        Mutant("the last rank takes the rest", "they differ by more than one", edits=((_SHARD, (
            "size = len(X) // world_size\n"
            "    idx = np.arange(rank * size, len(X) if rank == world_size - 1 else (rank + 1) * size)")),)),
        Mutant("y not sharded", "shard y with the same indices as X",
               edits=(("return X[idx], y[idx]", "return X[idx], y"),)),
        Mutant("each rank shuffles on its own", "no rank may shuffle on its own",
               edits=((_SHARD, "idx = np.random.permutation(len(X))[rank::world_size]"),)),
        Mutant("X and y shuffled apart", "a label got separated from its features", edits=((
            "return X[idx], y[idx]",
            "return X[idx], y[np.random.default_rng(1).permutation(len(y))[rank::world_size]]"),)),
        Mutant("the last sample left out", "landed on no rank",
               edits=(("len(X), world_size", "len(X) - 1, world_size"),)),
    ),
    "q2": (
        Mutant("plain mean", "you weighted every rank equally", edits=((_GLOBAL, "sum(grads) / len(grads)"),)),
        Mutant("not normalised", "did not divide by the total number of samples", edits=((" / sum(counts)", ""),)),
        Mutant("divided by the ranks", "you divided by the number of ranks",
               edits=(("/ sum(counts)", "/ len(grads)"),)),
        Mutant("one rank's count times the ranks", "you multiplied one rank's count by the number of ranks",
               edits=(("/ sum(counts)", "/ (counts[0] * len(counts))"),)),
        Mutant("the wrong axis", "axis 0 of np.stack(grads)", edits=((
            _GLOBAL, "np.sum(np.stack(grads) * np.array(counts)[:, None], axis=1) / sum(counts)"),)),
        Mutant("accumulated in place", "changed the caller's grads in place", edits=((
            "return " + _GLOBAL, "total = grads[0]\n    total *= counts[0]\n"
            "    for c, g in zip(counts[1:], grads[1:]):\n        total += c * g\n    return total / sum(counts)"),)),
        Mutant("plain sum", "you summed the gradients", edits=((_GLOBAL, "sum(grads)"),)),
    ),
    "q3": (
        Mutant("divided", "you divided", edits=(("lr * world_size", "lr / world_size"),)),
        Mutant("unchanged", "summing changes the step", edits=(("lr * world_size", "lr"),)),
        Mutant("square root", "the square-root scaling rule", edits=(("lr * world_size", "lr * world_size ** 0.5"),)),
        Mutant("world_size - 1", "not world_size - 1", edits=(("lr * world_size", "lr * (world_size - 1)"),)),
        Mutant("times 2", "you multiplied by 2 whatever the world size", edits=(("lr * world_size", "lr * 2"),)),
        Mutant("world size alone", "you returned the world size alone", edits=(("lr * world_size", "world_size"),)),
    ),
    "q4": (
        Mutant("forgot to divide", "forgot to divide by world size", edits=(("    flat /= world_size\n", ""),)),
        Mutant("the result never went back", "the result never went back",
               edits=(("g.copy_(flat[offset:offset + g.numel()].view_as(g))", "g = flat[offset:offset + g.numel()]"),)),
        Mutant("no all_reduce", "never met", edits=(("    dist.all_reduce(flat)", "    pass"),)),
        Mutant("divided twice", "divided by world_size twice",
               edits=(("    flat /= world_size\n", "    flat /= world_size\n    flat /= world_size\n"),)),
        Mutant("one all_reduce per parameter", "times (one per parameter?)", source=_Q4_HEAD + (
            "    for p in model.parameters():\n        dist.all_reduce(p.grad)\n        p.grad /= world_size\n")),
        Mutant("every other parameter", "still hold this rank's own gradient", source=_Q4_HEAD + (
            "    for p in list(model.parameters())[::2]:\n        dist.all_reduce(p.grad)\n"
            "        p.grad /= world_size\n")),
        Mutant("the offset never advanced", "the offset never advanced",
               edits=(("        offset += g.numel()\n", ""),)),
        Mutant("the weights averaged, not the gradients", "you averaged the weights",
               edits=(("[p.grad for p in model.parameters()]", "[p.data for p in model.parameters()]"),)),
        Mutant("all_gather, then the mean", "you used dist.all_gather", edits=((
            "    dist.all_reduce(flat)                            # the sum over the ranks, in place\n"
            "    flat /= world_size\n",
            "    gathered = [torch.empty_like(flat) for _ in range(world_size)]\n"
            "    dist.all_gather(gathered, flat)\n    flat = torch.stack(gathered).mean(dim=0)\n"),)),
    ),
}
