"""Exercises 13: the FLOPs of a data-parallel training step, counted on every rank and summed.

The student writes ``job_flops(model, idx)``: count the FLOPs of one training step (forward and
backward of the GPT's loss on this rank's token windows ``idx``) with ``accounting.count_flops``,
then all-reduce the count so that every rank returns the whole job's. The check compares it with
one process counting the step on all ranks' windows at once (FLOPs add up over the batch).
"""
from __future__ import annotations

from .. import accounting
from ..data import char_tokens, token_windows, zen_of_python
from ..gpt import GPT, GPTConfig
from . import load_student, run_ranks, student_function


def _problem(n_layer: int, d_model: int, block: int, batch: int, seed: int):
    import torch

    ids, vocab = char_tokens(zen_of_python())
    config = GPTConfig(vocab_size=len(vocab), block_size=block, n_layer=n_layer, n_head=4, d_model=d_model)
    return GPT(config, seed=seed), torch.from_numpy(token_windows(ids, batch, block, seed=seed)[0])


def flops_rank(rank: int, world_size: int, student_file: str, *, n_layer: int, d_model: int, block: int,
               batch: int, seed: int):
    """Harness (one rank): the student's ``job_flops`` on this rank's share of the windows."""
    job_flops = student_function(load_student(student_file), "job_flops")
    model, idx = _problem(n_layer, d_model, block, batch, seed)
    return job_flops(model, idx[rank::world_size])


def check_job_flops(student_file: str, *, world_size: int = 2, n_layer: int = 2, d_model: int = 64,
                    block: int = 32, batch: int = 8, seed: int = 0) -> None:
    """Run the student's ``job_flops`` on ``world_size`` ranks; every rank must return the job's count."""
    if batch % world_size:
        raise ValueError(f"batch={batch} must divide evenly over {world_size} ranks")
    results = run_ranks(flops_rank, student_file, world_size, n_layer=n_layer, d_model=d_model, block=block,
                        batch=batch, seed=seed)
    model, idx = _problem(n_layer, d_model, block, batch, seed)

    def step():
        _, loss = model(idx, idx)
        loss.backward()

    total = accounting.count_flops(step)
    forward = accounting.count_flops(lambda: model(idx))
    c = model.config
    weights_only = 6 * accounting.matmul_params(c.vocab_size, c.n_layer, c.d_model) * idx.numel()
    for rank, got in enumerate(results):
        if got is None or got is Ellipsis:
            raise AssertionError(f"rank {rank}: job_flops returned {got!r}: it still does nothing. Count one "
                                 "training step with accounting.count_flops, then all-reduce the count.")
        if not isinstance(got, int | float) and not hasattr(got, "item"):
            raise AssertionError(f"rank {rank}: job_flops returned a {type(got).__name__}; return a number.")
        got = got.item() if hasattr(got, "item") else got
        if got == total:
            continue
        hint = "expected the job's total"
        if got * world_size == total:
            hint = "that is one rank's share: all-reduce the counts (a sum over the ranks) to get the job's"
        elif got == forward or got * world_size == forward:
            hint = "that is the forward pass only: the training step's backward costs twice as much again"
        elif got == weights_only or got * world_size == weights_only:
            hint = ("attention's own matmuls are missing: count with accounting.count_flops, which runs "
                    "attention on the math kernel FlopCounterMode can see")
        elif abs(got - total) <= 1e-6 * total:
            hint = ("close but not exact: float32 has a 24-bit significand, so counts above 16,777,216 are "
                    "rounded; all-reduce an int64 (or float64) tensor")
        raise AssertionError(f"rank {rank} of {world_size}: job_flops returned {got:,.0f}, but one training step "
                             f"of the job is {total:,} FLOPs: {hint}.")
