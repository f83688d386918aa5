"""Exercises 14: online-softmax merging, and ring attention's forward pass written by the student.

Q1, ``merge(out_a, lse_a, out_b, lse_b)``: combine attention over two blocks of keys into attention
over both (:func:`check_merge`, one process). Q3, ``ring_forward(q, k, v)``: rank ``r`` holds the
queries, keys and values of positions ``r·c .. (r+1)·c - 1`` of one sequence; pass K/V round the
ring, attend to every block at or before its own (the causal mask on its own block), merge. The
check (:func:`check_ring_forward`) runs it on gloo ranks and compares every rank's output with its
part of ``scaled_dot_product_attention(is_causal=True)`` on the whole sequence.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import load_student, run_ranks, student_function


def block_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool):
    """Attention of queries q (B, H, c, hd) to one block of keys/values: (output, log-sum-exp (B, H, c))."""
    scores = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    if causal:
        scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
    lse = scores.logsumexp(-1)
    return (scores - lse[..., None]).exp() @ v, lse


def _qkv(shape: tuple, seed: int):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator, dtype=torch.float64) for _ in range(3)]


def check_merge(merge, *, shape: tuple = (2, 3, 5, 4), keys: tuple = (6, 7), seed: int = 0) -> None:
    """``merge`` of attention over two key blocks must equal attention over their concatenation."""
    q, _, _ = _qkv(shape, seed)
    k, v = _qkv((*shape[:2], sum(keys), shape[3]), seed + 1)[:2]
    ka, kb = k.split(list(keys), dim=2)
    va, vb = v.split(list(keys), dim=2)
    (oa, la), (ob, lb) = block_attention(q, ka, va, False), block_attention(q, kb, vb, False)
    want_out, want_lse = block_attention(q, k, v, False)
    got = merge(oa, la, ob, lb)
    if got is None or got is Ellipsis or not isinstance(got, tuple) or len(got) != 2:
        raise AssertionError(f"merge returned {type(got).__name__}: return a tuple (out, lse).")
    out, lse = got
    if not torch.allclose(lse, want_lse, atol=1e-10):
        hint = "the merged log-sum-exp is logaddexp(lse_a, lse_b): the log of the sum of both blocks' exp-sums"
        if torch.allclose(lse, torch.maximum(la, lb)):
            hint = "the max of the two log-sum-exps is not their sum in log space: use torch.logaddexp"
        raise AssertionError(f"lse is wrong: {hint}.")
    if not torch.allclose(out, want_out, atol=1e-10):
        hint = ("weight each block's output by its share of the total, exp(lse_block - lse_merged), "
                "then add the two")
        if torch.allclose(out, (oa + ob) / 2, atol=1e-10):
            hint = ("the plain average weighs both blocks equally; a block with larger scores must count more: "
                    "weight by exp(lse_block - lse_merged)")
        elif torch.allclose(out, oa + ob, atol=1e-10):
            hint = ("each output is normalised over its own block only: rescale by exp(lse_block - lse_merged) "
                    "before adding")
        raise AssertionError(f"out is wrong: {hint}.")


def ring_rank(rank: int, world_size: int, student_file: str, *, shape: tuple, seed: int):
    """Harness (one rank): the student's ``ring_forward`` on this rank's chunk of q, k, v."""
    ring_forward = student_function(load_student(student_file), "ring_forward")
    q, k, v = (t.chunk(world_size, dim=2)[rank].contiguous() for t in _qkv(shape, seed))
    return ring_forward(q, k, v)


def _with_later_chunks(q, k, v, rank: int, c: int) -> torch.Tensor:
    """The output of a ring that masks the own chunk but also merges every later rank's chunk."""
    scores = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    future = torch.zeros_like(scores, dtype=torch.bool)
    future[..., rank * c:(rank + 1) * c] = torch.ones(c, c, dtype=torch.bool).triu(1)
    return scores.masked_fill(future, float("-inf")).softmax(-1) @ v


def check_ring_forward(student_file: str, *, world_size: int = 2, shape: tuple = (2, 3, 16, 4), seed: int = 0) -> None:
    """Run the student's ``ring_forward`` on ``world_size`` ranks; ``shape`` is the whole sequence's
    (B, H, T, hd). Each rank's output must equal its part of full causal attention."""
    if shape[2] % world_size:
        raise ValueError(f"sequence length {shape[2]} must divide over {world_size} ranks")
    results = run_ranks(ring_rank, student_file, world_size, shape=shape, seed=seed)
    q, k, v = _qkv(shape, seed)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True).chunk(world_size, dim=2)
    everything = F.scaled_dot_product_attention(q, k, v).chunk(world_size, dim=2)
    for rank, got in enumerate(results):
        if got is None or got is Ellipsis:
            raise AssertionError(f"rank {rank}: ring_forward returned {got!r}: it still does nothing.")
        if not isinstance(got, torch.Tensor) or got.shape != want[rank].shape:
            raise AssertionError(f"rank {rank}: ring_forward must return a tensor shaped like q, "
                                 f"{tuple(want[rank].shape)}; got {getattr(got, 'shape', type(got).__name__)}.")
        if torch.allclose(got, want[rank], atol=1e-9):
            continue
        c = shape[2] // world_size
        qs, ks, vs = (t[:, :, rank * c:(rank + 1) * c] for t in (q, k, v))
        own = block_attention(qs, ks, vs, True)[0]
        hint = "compare step by step with chunk-by-chunk attention on one process"
        if torch.allclose(got, own, atol=1e-9):
            hint = ("that is attention to this rank's own chunk only: pass K and V round the ring (send to "
                    "rank + 1, receive from rank - 1) and merge in every earlier chunk")
        elif torch.allclose(got, everything[rank], atol=1e-9):
            hint = ("that is attention without the causal mask: skip chunks that come from later ranks, and "
                    "mask the future within this rank's own chunk")
        elif torch.allclose(got, _with_later_chunks(qs, k, v, rank, c), atol=1e-9):
            hint = ("the chunks of later ranks are merged in: they hold future positions; attend only to K/V "
                    "that came from ranks before this one (and to the own chunk, masked)")
        elif torch.allclose(got, block_attention(q[:, :, rank * c:(rank + 1) * c], k[:, :, :(rank + 1) * c],
                                                 v[:, :, :(rank + 1) * c], False)[0], atol=1e-9):
            hint = "the earlier chunks are right but the own chunk needs the causal mask (causal=True)"
        elif rank == 0:
            hint = ("rank 0 holds the first chunk and needs nothing from the others; if it is wrong, check which "
                    "chunk each step's K/V came from: at step s it is rank (rank - s) % world_size's")
        raise AssertionError(f"rank {rank} of {world_size}: the output differs from full causal attention by up to "
                             f"{(got - want[rank]).abs().max().item():.2g}: {hint}.")


def check_zigzag(zigzag, world_size: int) -> None:
    """``zigzag(rank, world_size)`` must hand out every one of the 2t chunks once and give every rank
    the same number of causal (query chunk, key chunk) blocks, 2t + 1."""
    from ..context_parallel import pairs

    t = world_size
    held = {rank: zigzag(rank, t) for rank in range(t)}
    if any(h is None or h is Ellipsis for h in held.values()):
        raise AssertionError("zigzag returned nothing: return a list of two chunk ids for the rank.")
    flat = sorted(c for h in held.values() for c in h)
    if flat != list(range(2 * t)):
        raise AssertionError(f"with {t} ranks the chunks held are {flat}: every chunk 0..{2 * t - 1} must be "
                             "held by exactly one rank.")
    work = [sum(len(pairs(held[r], held[src])) for src in range(t)) for r in range(t)]
    if work != [2 * t + 1] * t:
        hint = "pair an early chunk with a late one, so that each rank's two causal rows add up to the same"
        if all(sorted(held[r]) == [2 * r, 2 * r + 1] for r in range(t)):
            hint = "that is the contiguous layout, the unbalanced one: " + hint
        raise AssertionError(f"with {t} ranks the blocks each rank computes are {work}, not {2 * t + 1} each: {hint}.")
