"""Exercises 16: composing parallelism — a planner question, a count, and a 2-D layout written by hand.

Q1, ``pick(ranked, limit_gb)``: the fastest layout of a planner's list that fits a memory limit
(:func:`check_pick`). Q2, ``tp_all_reduces(n_layer, pp, microbatches)``: the all-reduces one
tensor-parallel rank issues per step (:func:`check_tp_all_reduces`). Q3, ``build_2d(model, mesh)``
in a file: tensor parallel over ``mesh["tp"]`` and FSDP2 over ``mesh["dp"]``, graded by training
on 4 gloo ranks against one process (:func:`check_build_2d`).
"""
from __future__ import annotations

import torch

from . import load_student, run_ranks, student_function


def _reference_pick(ranked: list, limit_gb: float):
    fits = [r for r in ranked if r.reason is None and r.memory_gb <= limit_gb]
    return max(fits, key=lambda r: r.mfu) if fits else None


def check_pick(pick, ranked: list, limit_gb: float) -> None:
    """``pick(ranked, limit_gb)`` must return the highest-MFU prediction that can run and needs at most
    ``limit_gb`` per GPU (or None if there is none)."""
    want = _reference_pick(ranked, limit_gb)
    got = pick(list(ranked), limit_gb)
    if got is Ellipsis:
        raise AssertionError("pick returned `...`: return one of the planner's predictions (or None).")
    if got is want:
        return
    if got is None:
        fitting = sum(r.reason is None and r.memory_gb <= limit_gb for r in ranked)
        raise AssertionError(f"pick returned None, but {fitting} layouts can run within {limit_gb} GB.")
    if getattr(got, "reason", None) is not None:
        raise AssertionError(f"that layout cannot run: {got.reason}. Keep only predictions whose reason is None.")
    if got.memory_gb > limit_gb:
        raise AssertionError(f"that layout needs {got.memory_gb:.1f} GB per GPU, over the {limit_gb} GB limit: "
                             f"filter on memory_gb too.")
    if want is not None and got.mfu < want.mfu:
        hint = "the list is sorted by MFU over *all* layouts; after filtering, take the highest MFU"
        raise AssertionError(f"a faster layout fits: MFU {want.mfu:.1%} ({want.layout}) beats {got.mfu:.1%}: {hint}.")
    raise AssertionError(f"pick returned {got!r}; expected {want!r}.")


def check_tp_all_reduces(tp_all_reduces) -> None:
    """``tp_all_reduces(n_layer, pp, microbatches)``: 4 per block of the stage per microbatch."""
    for n_layer, pp, m in ((4, 2, 4), (8, 1, 1), (12, 4, 8), (6, 3, 2)):
        want = 4 * (n_layer // pp) * m
        got = tp_all_reduces(n_layer, pp, m)
        if got is Ellipsis or got is None:
            raise AssertionError("tp_all_reduces returned nothing: return a number.")
        if got == want:
            continue
        hint = "2 all-reduces per block forward and 2 backward, for each block of the rank's stage, every microbatch"
        if got == 2 * (n_layer // pp) * m:
            hint = "that counts the forward only: the backward all-reduces the inputs' gradients, 2 more per block"
        elif got == 4 * n_layer * m:
            hint = "a pipeline rank holds n_layer / pp blocks, not all of them"
        elif got == 4 * (n_layer // pp):
            hint = "tensor parallelism runs for every microbatch: multiply by their number"
        raise AssertionError(f"tp_all_reduces({n_layer}, {pp}, {m}) = {got}, expected {want}: {hint}.")


def _batches(config, steps: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    shape = (8, config.block_size)
    return [(torch.randint(config.vocab_size, shape, generator=generator),
             torch.randint(config.vocab_size, shape, generator=generator)) for _ in range(steps)]


def _loss(logits, targets):
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


def build_2d_rank(rank: int, world_size: int, student_file: str, *, steps: int, seed: int):
    """Harness (one rank): the student's ``build_2d`` on a (dp 2, tp 2) mesh, trained with SGD on this
    data-parallel rank's half of each batch. Returns the full parameters by name, and the mesh
    dimensions a query weight is laid out over (FSDP's first), or None if it is a plain tensor."""
    from torch.distributed.tensor import DTensor

    from course_utils import composed
    from course_utils.gpt import GPT, GPTConfig

    build_2d = student_function(load_student(student_file), "build_2d")
    config = GPTConfig(vocab_size=16, block_size=8, n_layer=2, n_head=4, d_model=16)
    layout = composed.Layout(dp=2, tp=2)
    mesh = composed.make_mesh(layout)
    model = build_2d(GPT(config, seed=seed), mesh)
    if model is None or model is Ellipsis:
        return model
    query = model.blocks[0].attn.q.weight
    dims = tuple(query.device_mesh.mesh_dim_names) if isinstance(query, DTensor) else None
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for x, y in _batches(config, steps, seed):
        dp_rank = layout.coords(rank)["dp"]
        _loss(model(composed.batch_slice(x, dp_rank, 2)), composed.batch_slice(y, dp_rank, 2)).backward()
        optimizer.step()
        optimizer.zero_grad()
    return {n: (p.full_tensor() if isinstance(p, DTensor) else p).detach() for n, p in model.named_parameters()}, dims


def _single(steps: int, seed: int) -> dict:
    from course_utils.gpt import GPT, GPTConfig

    config = GPTConfig(vocab_size=16, block_size=8, n_layer=2, n_head=4, d_model=16)
    model = GPT(config, seed=seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for x, y in _batches(config, steps, seed):
        _loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    return {n: p.detach() for n, p in model.named_parameters()}


def _sharded_hint(message: str) -> str:
    if "DTensor" in message and ("mixed" in message or "Shard" in message):
        return ("\nApply tensor parallelism first (parallelize_gpt over mesh['tp']), then fully_shard each block and "
                "the model over mesh['dp']: FSDP2 shards what tensor parallelism left on the rank.")
    return ""


def check_build_2d(student_file: str, *, steps: int = 2, seed: int = 0) -> None:
    """Train the student's 2-D layout on 4 gloo ranks: every parameter must equal one process's."""
    try:
        results = run_ranks(build_2d_rank, student_file, 4, steps=steps, seed=seed)
    except AssertionError as failure:
        raise AssertionError(f"{failure}{_sharded_hint(str(failure))}") from None
    want = _single(steps, seed)
    for rank, result in enumerate(results):
        if result is None or result is Ellipsis:
            raise AssertionError(f"rank {rank}: build_2d returned {result!r}: it still does nothing; return the model.")
        got, dims = result
        worst = max(want, key=lambda n: (got[n] - want[n]).abs().max().item())
        diff = (got[worst] - want[worst]).abs().max().item()
        if diff <= 1e-5:
            continue
        hint = "split the model over mesh['tp'] with parallelize_gpt, then fully_shard blocks and model over mesh['dp']"
        if dims is None or "dp" not in dims:
            hint = ("each data-parallel rank trained on its own half and nothing averaged the gradients: fully_shard "
                    "the blocks and the model over mesh['dp']")
        elif dims[0] != "dp":
            hint = ("the mesh dimensions are swapped: the two ranks of mesh['tp'] read the same data and split the "
                    "heads between them; the two of mesh['dp'] read different halves and must average (FSDP)")
        raise AssertionError(f"rank {rank}: {worst} differs from one process by {diff:.2g}: {hint}.")
