"""Exercises 11: save and resume a DDP job with Distributed Checkpoint, bitwise equal.

The student writes ``save(model, optimizer, step, folder)`` and ``load(model, optimizer, folder)
-> step`` with ``torch.distributed.checkpoint``. The check trains a DDP model with Adam on 2 gloo
ranks, saves after ``save_at`` steps and trains on; then a fresh model and optimizer (other initial
weights, no Adam state) load the checkpoint and train the remaining steps. The resumed weights
must equal the uninterrupted run's bit for bit — which needs the weights, Adam's moments and step
counts, and the step number.
"""
from __future__ import annotations

import gc
import tempfile
from pathlib import Path

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..data import linear_regression, shard
from ..models import mlp
from . import load_student, run_ranks, student_function


def _snapshot(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Copies of the weights and of Adam's per-parameter state (moments, step counts)."""
    return dict(weights=[p.detach().clone() for p in model.parameters()],
                adam=[{k: v.clone() for k, v in optimizer.state[p].items()} for p in model.parameters()])


def _train(model, optimizer, X, y, steps: range) -> None:
    for step in steps:
        rows = slice(4 * step % len(X), 4 * step % len(X) + 4)   # batch `step`: 4 samples of the shard
        nn.functional.mse_loss(model(X[rows]), y[rows]).backward()
        optimizer.step()
        optimizer.zero_grad()


def checkpoint_rank(rank: int, world_size: int, student_file: str, *, folder: str, sizes: list[int], n: int,
                    steps: int, save_at: int, seed: int) -> dict:
    """Harness (one rank): train, save with the student's ``save``, train on; then a fresh model loads
    with the student's ``load`` and finishes. Returns snapshots at each point."""
    student = load_student(student_file)
    save, load = student_function(student, "save"), student_function(student, "load")
    X, y, _ = linear_regression(n, sizes[0], seed=seed)
    rows = shard(n, rank, world_size)
    X, y = torch.from_numpy(X[rows]), torch.from_numpy(y[rows]).expand(-1, sizes[-1])

    def fresh(init_seed):
        model = DistributedDataParallel(mlp(sizes, seed=init_seed))
        return model, torch.optim.Adam(model.parameters(), lr=0.01)

    model, optimizer = fresh(seed)
    _train(model, optimizer, X, y, range(save_at))
    saved = _snapshot(model, optimizer)
    save(model, optimizer, save_at, folder)
    _train(model, optimizer, X, y, range(save_at, steps))
    uninterrupted = _snapshot(model, optimizer)["weights"]

    model, optimizer = fresh(seed + 1)   # other initial weights: loading must replace them
    returned = load(model, optimizer, folder)
    loaded = _snapshot(model, optimizer)
    _train(model, optimizer, X, y, range(save_at, steps))
    result = dict(saved=saved, loaded=loaded, returned=returned, uninterrupted=uninterrupted,
                  resumed=_snapshot(model, optimizer)["weights"])
    del model, optimizer
    gc.collect()
    return result


def check_checkpoint(student_file: str, *, world_size: int = 2, sizes: tuple[int, ...] = (4, 8, 1), n: int = 32,
                     steps: int = 6, save_at: int = 3, seed: int = 0) -> None:
    """Run the student's ``save``/``load`` on ``world_size`` ranks; fail with the likely cause."""
    with tempfile.TemporaryDirectory(prefix="ex11_checkpoint_") as folder:
        results = run_ranks(checkpoint_rank, student_file, world_size, folder=folder, sizes=list(sizes), n=n,
                            steps=steps, save_at=save_at, seed=seed)
        files = sorted(p.name for p in Path(folder).iterdir())
    if not files:
        raise AssertionError("save wrote nothing into the folder: it still does nothing. Use "
                             "torch.distributed.checkpoint.save(state, checkpoint_id=folder) with the model's "
                             "and the optimizer's state (get_state_dict) and the step.")
    for rank, r in enumerate(results):
        if not all(torch.equal(a, b) for a, b in zip(r["loaded"]["weights"], r["saved"]["weights"])):
            raise AssertionError(f"rank {rank}: after load, the model does not hold the saved weights. dcp.load "
                                 "fills the state dict you give it, in place; then apply it to the model "
                                 "(set_state_dict, or model.load_state_dict).")
        adam_restored = all(got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
                            for got, want in zip(r["loaded"]["adam"], r["saved"]["adam"]))
        if not adam_restored:
            raise AssertionError(f"rank {rank}: after load, Adam's moments and step counts are not the saved ones, "
                                 "so the resumed run takes different steps. Save and load the optimizer's state "
                                 "with the model's: get_state_dict(model, optimizer).")
        if r["returned"] != save_at:
            raise AssertionError(f"rank {rank}: load returned {r['returned']!r}, but the checkpoint was taken after "
                                 f"step {save_at}: save the step with the state and return it from load.")
        if not all(torch.equal(a, b) for a, b in zip(r["resumed"], r["uninterrupted"])):
            worst = max(float((a - b).abs().max()) for a, b in zip(r["resumed"], r["uninterrupted"]))
            raise AssertionError(f"rank {rank}: the resumed run ends {worst:.3g} away from the uninterrupted one; "
                                 "it must be bitwise equal.")
