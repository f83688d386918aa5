"""Exercises 10: shard a model with FSDP2's ``fully_shard`` and count what one rank holds.

The student writes ``shard_model(model, mesh)`` (``fully_shard`` on every ``Linear`` layer, then
on the root) and ``local_bytes(model)`` (the bytes of this rank's shards of the parameters). The
check looks at which modules became ``FSDPModule``, compares the student's byte count with the
shards' real sizes and with the unsharded model, and trains one step, whose gathered weights must
equal one process's step on the whole batch.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule

from ..data import linear_regression, shard
from ..models import mlp
from . import first_mismatch, load_student, mlp_parameters, run_ranks, student_function


def _batch(sizes: list[int], n: int, seed: int, rows=slice(None)):
    X, y, _ = linear_regression(n, sizes[0], seed=seed)
    return torch.from_numpy(X[rows]), torch.from_numpy(y[rows]).expand(-1, sizes[-1])


def sharding_rank(rank: int, world_size: int, student_file: str, *, sizes: list[int], n: int, lr: float,
                  seed: int) -> dict:
    """Harness (one rank): the student's ``shard_model`` and ``local_bytes``, then one SGD step."""
    student = load_student(student_file)
    shard_model, local_bytes = student_function(student, "shard_model"), student_function(student, "local_bytes")
    model = mlp(sizes, seed=seed)
    shard_model(model, init_device_mesh("cpu", (world_size,)))
    layers = [m for m in model if isinstance(m, nn.Linear)]
    result = dict(root=isinstance(model, FSDPModule), layers=[isinstance(m, FSDPModule) for m in layers],
                  counted=local_bytes(model),
                  held=sum(_local(p).numel() * p.element_size() for p in model.parameters()))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = _batch(sizes, n, seed, shard(n, rank, world_size))
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    result["weights"] = [_full(p).detach().clone() for p in model.parameters()]
    return result


def _local(p: torch.Tensor) -> torch.Tensor:
    return p.to_local() if hasattr(p, "to_local") else p


def _full(p: torch.Tensor) -> torch.Tensor:
    return p.full_tensor() if hasattr(p, "full_tensor") else p


def reference_weights(sizes: list[int], n: int, lr: float, seed: int) -> list[torch.Tensor]:
    """One SGD step on the whole batch in one process."""
    with torch.random.fork_rng():
        model = mlp(sizes, seed=seed)
    x, y = _batch(sizes, n, seed)
    nn.functional.mse_loss(model(x), y).backward()
    torch.optim.SGD(model.parameters(), lr=lr).step()
    return [p.detach() for p in model.parameters()]


def check_sharding(student_file: str, *, world_size: int = 2, sizes: tuple[int, ...] = (6, 16, 16, 2), n: int = 8,
                   lr: float = 0.1, seed: int = 0) -> None:
    """Run the student's ``shard_model``/``local_bytes`` on ``world_size`` ranks; fail with the likely cause."""
    sizes = list(sizes)
    results = run_ranks(sharding_rank, student_file, world_size, sizes=sizes, n=n, lr=lr, seed=seed)
    full_bytes = sum(p.numel() * p.element_size() for _, p in mlp_parameters(sizes))
    got = results[0]
    if not got["root"] and not any(got["layers"]):
        raise AssertionError("no module was sharded: shard_model still does nothing. Call fully_shard(layer, "
                             "mesh=mesh) on every Linear layer, then fully_shard(model, mesh=mesh).")
    if not all(got["layers"]):
        raise AssertionError(f"only {sum(got['layers'])} of {len(got['layers'])} Linear layers are FSDP modules: "
                             "wrap every layer before the root. A layer of its own is gathered only while it "
                             "runs; wrapped only through the root, the whole model is gathered at once.")
    if not got["root"]:
        raise AssertionError("the layers are sharded but the model itself is not: finish with "
                             "fully_shard(model, mesh=mesh), which drives the forward and owns any parameter "
                             "outside the layers.")
    names = [name for name, _ in mlp_parameters(sizes)]
    mismatch = first_mismatch(got["weights"], reference_weights(sizes, n, lr, seed), names, atol=1e-6, rtol=1e-5)
    if mismatch is not None:
        raise AssertionError(f"after one step the gathered `{mismatch[0]}` differs from one process's step by "
                             f"{mismatch[1]:.3g}: shard_model should only apply fully_shard, nothing else.")
    for rank, result in enumerate(results):
        counted, held = result["counted"], result["held"]
        if counted == held:
            continue
        if counted == full_bytes:
            hint = ("that is the whole model: a sharded parameter is a DTensor, whose numel() is its global "
                    "size. Count p.to_local(), the shard this rank holds.")
        elif counted * 4 == held:
            hint = "that is a count of numbers, not bytes: multiply each shard's numel() by p.element_size()."
        else:
            hint = "count every parameter's local shard, p.to_local().numel() * p.element_size()."
        raise AssertionError(f"rank {rank}: local_bytes says {counted!r}, but the rank holds {held} bytes of "
                             f"parameters (the unsharded model has {full_bytes}); {hint}")
