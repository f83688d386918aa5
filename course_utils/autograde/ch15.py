"""Exercises 15: capacity, the load-balancing loss, and expert parallelism's dispatch and combine.

Q1, ``keep_within_capacity(expert, n_expert, capacity)``: which assignments an expert accepts
(:func:`check_keep`). Q2, ``load_balancing_loss(probs, expert, n_expert)``: Switch Transformer's
loss (:func:`check_balancing_loss`). Q3, ``expert_parallel(tokens, expert, local_experts)`` in a
file: send each token to the rank holding its expert, run the experts, bring the outputs back
(:func:`check_expert_parallel`, on gloo ranks, against one process).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import load_student, run_ranks, student_function


def _reference_keep(expert: torch.Tensor, n_expert: int, capacity: int) -> torch.Tensor:
    offered = F.one_hot(expert, n_expert)
    return (offered.cumsum(0) * offered).sum(-1) <= capacity


def check_keep(keep_within_capacity, *, n: int = 40, n_expert: int = 4, capacity: int = 7, seed: int = 0) -> None:
    """``keep_within_capacity`` must keep, for each expert, its first ``capacity`` assignments."""
    generator = torch.Generator().manual_seed(seed)
    expert = torch.randint(0, n_expert, (n,), generator=generator)
    want = _reference_keep(expert, n_expert, capacity)
    got = keep_within_capacity(expert.clone(), n_expert, capacity)
    if got is None or got is Ellipsis:
        raise AssertionError("keep_within_capacity returned nothing: return a bool tensor, one entry per assignment.")
    got = torch.as_tensor(got)
    if got.shape != want.shape or got.dtype != torch.bool:
        raise AssertionError(f"return a bool tensor of shape {tuple(want.shape)}; got {got.dtype} {tuple(got.shape)}.")
    if torch.equal(got, want):
        return
    hint = "an assignment is kept if fewer than `capacity` earlier assignments went to the same expert"
    if torch.equal(got, _reference_keep(expert.flip(0), n_expert, capacity).flip(0)):
        hint = "that keeps the last assignments of each expert; the earliest have priority"
    elif torch.equal(got, _reference_keep(expert, n_expert, capacity + 1)):
        hint = "off by one: each expert keeps `capacity` assignments, not capacity + 1 (positions 0..capacity-1)"
    elif torch.equal(got, _reference_keep(expert, n_expert, capacity - 1)):
        hint = "off by one: each expert keeps `capacity` assignments, not capacity - 1"
    elif torch.equal(got, torch.arange(n) < capacity):
        hint = "that counts all assignments together; count each expert's queue separately (cumsum of a one-hot)"
    raise AssertionError(f"{int((got != want).sum())} of {n} assignments decided wrongly: {hint}.")


def _reference_loss(probs: torch.Tensor, expert: torch.Tensor, n_expert: int) -> torch.Tensor:
    fraction = torch.bincount(expert, minlength=n_expert).to(probs.dtype) / len(expert)
    return n_expert * (fraction * probs.mean(0)).sum()


def check_balancing_loss(load_balancing_loss, *, n: int = 30, n_expert: int = 5, top_k: int = 2,
                         seed: int = 0) -> None:
    """``load_balancing_loss(probs, expert, n_expert)`` must equal E · Σ f_i P_i, with a gradient to probs."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, n_expert, generator=generator, dtype=torch.float64) * 2
    probs = logits.softmax(-1).requires_grad_()
    expert = probs.detach().topk(top_k, dim=-1).indices.T.reshape(-1)
    want = _reference_loss(probs.detach(), expert, n_expert)
    got = load_balancing_loss(probs, expert.clone(), n_expert)
    if got is None or got is Ellipsis:
        raise AssertionError("load_balancing_loss returned nothing: return a scalar tensor.")
    if not isinstance(got, torch.Tensor) or got.numel() != 1:
        raise AssertionError(f"return a scalar tensor; got {type(got).__name__} {getattr(got, 'shape', '')}.")
    value = got.detach().double().reshape(())
    if not torch.allclose(value, want):
        hint = "E · Σ_i f_i · P_i: f_i the fraction of assignments offered to expert i, P_i its mean probability"
        fraction = torch.bincount(expert, minlength=n_expert).double() / len(expert)
        if torch.allclose(value, want / n_expert):
            hint = "missing the factor E (n_expert): without it an even router scores 1/E, not 1"
        elif torch.allclose(value, want * len(expert)):
            hint = "f_i must be a fraction of the assignments (divide the counts by their number), not a count"
        elif torch.allclose(value, n_expert * (probs.detach().mean(0) ** 2).sum()):
            hint = "f_i is the fraction of assignments the expert was offered (count them), not its mean probability"
        elif torch.allclose(value, n_expert * (fraction * probs.detach().sum(0)).sum()):
            hint = "P_i is the mean of the probabilities over tokens, not their sum"
        raise AssertionError(f"the loss is {value.item():.6g}, expected {want.item():.6g}: {hint}.")
    if got.grad_fn is None:
        raise AssertionError("the value is right but it has no gradient: compute P from `probs` itself (no "
                             ".detach(), no .item()), since the loss trains the router through P.")
    even = torch.full((8, 4), 0.25, dtype=torch.float64)
    balanced = load_balancing_loss(even, torch.arange(4).repeat(2), 4)
    if not torch.allclose(balanced.detach().double().reshape(()), torch.tensor(1.0, dtype=torch.float64)):
        raise AssertionError(f"an even router must score 1; yours scores {balanced.item():.6g}.")


def _experts(n_expert: int, d: int, seed: int) -> list[torch.nn.Linear]:
    generator = torch.Generator().manual_seed(seed)
    experts = []
    for _ in range(n_expert):
        layer = torch.nn.Linear(d, d).double()
        with torch.no_grad():
            layer.weight.copy_(torch.randn(d, d, generator=generator, dtype=torch.float64))
            layer.bias.copy_(torch.randn(d, generator=generator, dtype=torch.float64))
        experts.append(layer)
    return experts


def _problem(world_size: int, n: int, d: int, n_expert: int, seed: int, skew: bool):
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randn(world_size * n, d, generator=generator, dtype=torch.float64)
    expert = torch.randint(0, n_expert, (world_size * n,), generator=generator)
    if skew:   # nothing for the last rank's experts: a rank that receives no rows
        expert = expert % (n_expert - n_expert // world_size)
    return tokens, expert


def ep_rank(rank: int, world_size: int, student_file: str, *, n: int, d: int, n_expert: int, seed: int,
            skew: bool):
    """Harness (one rank): the student's ``expert_parallel`` on this rank's tokens."""
    expert_parallel = student_function(load_student(student_file), "expert_parallel")
    tokens, expert = _problem(world_size, n, d, n_expert, seed, skew)
    per_rank = n_expert // world_size
    local = _experts(n_expert, d, seed + 1)[rank * per_rank:(rank + 1) * per_rank]
    with torch.no_grad():
        return expert_parallel(tokens.chunk(world_size)[rank].clone(), expert.chunk(world_size)[rank].clone(), local)


def _all_to_all_hint(message: str) -> str:
    """What an all-to-all error usually means in this exercise."""
    if "Split sizes doesn't match" in message:
        return ("all_to_all_single(output, input, output_split_sizes, input_split_sizes): the input splits must add "
                "up to input's rows and the output splits to output's; on the way back the two lists swap places.")
    if "size % context->size" in message:
        return ("without split sizes all_to_all_single cuts its input into equal parts; pass the counts, since "
                "the router sends each rank a different number of rows.")
    if "doesn't match expected size" in message:
        return ("the rows a rank expects from a peer must be the number that peer sends: get them by exchanging the "
                "per-expert counts with all_to_all_single before the rows.")
    return ""


def check_expert_parallel(student_file: str, *, world_size: int = 2, n: int = 12, d: int = 4, n_expert: int = 4,
                          seed: int = 0, skew: bool = False) -> None:
    """Run the student's ``expert_parallel`` on ``world_size`` ranks, ``n`` tokens each: every rank's
    output must equal, row by row, its tokens passed through their experts in one process."""
    if n_expert % world_size:
        raise ValueError(f"{n_expert} experts do not split over {world_size} ranks")
    try:
        results = run_ranks(ep_rank, student_file, world_size, n=n, d=d, n_expert=n_expert, seed=seed, skew=skew)
    except AssertionError as failure:
        raise AssertionError(f"{failure}\n{_all_to_all_hint(str(failure))}".rstrip()) from None
    tokens, expert = _problem(world_size, n, d, n_expert, seed, skew)
    experts = _experts(n_expert, d, seed + 1)
    per_rank = n_expert // world_size
    with torch.no_grad():
        want = torch.stack([experts[e](x) for x, e in zip(tokens, expert.tolist())]).chunk(world_size)
        for rank, got in enumerate(results):
            if got is None or got is Ellipsis:
                raise AssertionError(f"rank {rank}: expert_parallel returned {got!r}: it still does nothing.")
            if not isinstance(got, torch.Tensor) or got.shape != want[rank].shape:
                raise AssertionError(f"rank {rank}: return a tensor shaped like tokens, {tuple(want[rank].shape)}; "
                                     f"got {getattr(got, 'shape', type(got).__name__)}.")
            if torch.allclose(got, want[rank]):
                continue
            mine_x, mine_e = tokens.chunk(world_size)[rank], expert.chunk(world_size)[rank]
            local = experts[rank * per_rank:(rank + 1) * per_rank]
            hint = ("each rank sends rank p the rows for p's experts (sorted by expert), with the counts exchanged "
                    "first so that every rank knows how many rows arrive, and for which of its experts")
            if torch.allclose(got, torch.stack([local[e % per_rank](x) for x, e in zip(mine_x, mine_e.tolist())])):
                hint = ("that applies this rank's own experts to its tokens: expert e lives on rank e // (E/t); "
                        "send the rows there with all_to_all_single")
            elif torch.allclose(got, want[rank][torch.argsort(mine_e, stable=True)]):
                hint = ("the right outputs in the wrong rows: they come back sorted by expert; put each one back at "
                        "its token's position (undo the sort)")
            raise AssertionError(f"rank {rank} of {world_size}: the output differs from one process by up to "
                                 f"{(got - want[rank]).abs().max().item():.2g}: {hint}.")
