"""Exercises 04: a float16 mixed-precision training step with a correct ``GradScaler``, under DDP.

The student writes ``amp_step(ddp_model, optimizer, scaler, x, y)``: forward and loss under
``torch.autocast`` in float16, backward on the *scaled* loss, ``scaler.step`` (which unscales and
skips a step whose gradients overflowed), ``scaler.update`` (which halves the scale after an
overflow and grows it after a run of good steps), and zeroed gradients. The check runs six steps
on 2 gloo ranks — the third one with targets so large that its float16 gradients overflow — and
compares weights and the loss scale after every step with the same recipe in one process.
"""
from __future__ import annotations

import gc

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..data import shard
from ..models import mlp
from . import load_student, run_ranks, student_function

# GradScaler's own errors, and what they mean for the step the student wrote
MISUSE_HINTS = {
    "No inf checks were recorded prior to update": (
        "scaler.update() found no scaler.step(optimizer) before it. Step through the scaler: it unscales "
        "the gradients and skips a step whose gradients overflowed; optimizer.step() alone applies "
        "gradients still multiplied by the scale."),
    "step() has already been called since the last update()": (
        "call scaler.update() after every scaler.step(optimizer): it halves the scale after an overflow "
        "and grows it after a run of good steps."),
    "_scale is None": "Scale the loss before backward: scaler.scale(loss).backward().",
}
SCALER = dict(init_scale=2.0**10, growth_interval=2)   # grows within a few steps, so update() shows
OVERFLOW_STEP = 2                                     # targets x 1e5: float16 gradients overflow


def batches(sizes: list[int], batch: int, steps: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``steps`` global batches ``(x, y)``; the one at :data:`OVERFLOW_STEP` has huge targets."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for step in range(steps):
        x = torch.randn(batch, sizes[0], generator=generator)
        y = torch.randn(batch, sizes[-1], generator=generator) * (1e5 if step == OVERFLOW_STEP else 1.0)
        out.append((x, y))
    return out


def reference_step(model, optimizer, scaler, x, y) -> float:
    """The recipe, in one process: what the student's step must do on every rank."""
    with torch.autocast(device_type=x.device.type, dtype=torch.float16):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    return loss.item()


def train(step_fn, model, sizes: list[int], *, batch: int, steps: int, lr: float, seed: int,
          rows=slice(None)) -> dict:
    """Run ``step_fn`` for ``steps`` batches (``rows`` of each: a rank's shard); weights and scales."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler("cpu", **SCALER)
    dtypes: list[torch.dtype] = []
    first = next(m for m in model.modules() if isinstance(m, nn.Linear))
    first.register_forward_hook(lambda module, inputs, output: dtypes.append(output.dtype))
    scales, losses = [], []
    for x, y in batches(sizes, batch, steps, seed):
        losses.append(step_fn(model, optimizer, scaler, x[rows], y[rows]))
        scales.append(scaler.get_scale())
    params = model.module.parameters() if hasattr(model, "module") else model.parameters()
    return dict(weights=[p.detach().clone() for p in params], scales=scales, dtypes=dtypes, losses=losses)


def amp_rank(rank: int, world_size: int, student_file: str, *, sizes: list[int], batch: int, steps: int,
             lr: float, seed: int) -> dict:
    """Harness (one rank): the student's ``amp_step`` on a DDP model and this rank's shards."""
    step_fn = student_function(load_student(student_file), "amp_step")
    model = DistributedDataParallel(mlp(sizes, seed=seed))
    result = train(step_fn, model, sizes, batch=batch, steps=steps, lr=lr, seed=seed,
                   rows=torch.from_numpy(shard(batch, rank, world_size)))
    del model
    gc.collect()
    return result


def check_amp_step(student_file: str, *, world_size: int = 2, sizes: tuple[int, ...] = (8, 16, 4), batch: int = 16,
                   steps: int = 6, lr: float = 0.05, seed: int = 0) -> None:
    """Run the student's ``amp_step`` for ``steps`` steps on ``world_size`` ranks; fail with the likely cause."""
    sizes = list(sizes)
    try:
        results = run_ranks(amp_rank, student_file, world_size, sizes=sizes, batch=batch, steps=steps, lr=lr,
                            seed=seed)
    except AssertionError as failure:
        hints = [hint for error, hint in MISUSE_HINTS.items() if error in str(failure)]
        raise AssertionError("\n".join([str(failure), *hints])) from None
    with torch.random.fork_rng():
        model = mlp(sizes, seed=seed)
    start = [p.detach().clone() for p in model.parameters()]
    want = train(reference_step, model, sizes, batch=batch, steps=steps, lr=lr, seed=seed)
    got = results[0]
    moved = max(float((w - s).abs().max()) for w, s in zip(got["weights"], start))
    moved_ref = max(float((w - s).abs().max()) for w, s in zip(want["weights"], start))
    if moved == 0 and got["scales"] == [SCALER["init_scale"]] * steps:
        raise AssertionError("amp_step changed no weight and left the scale alone: it still does nothing. Write "
                             "its body: forward and loss under autocast, scaled backward, scaler.step, "
                             "scaler.update, zero_grad.")
    if torch.float16 not in got["dtypes"]:
        raise AssertionError("the forward ran in float32: run the forward and the loss inside "
                             "torch.autocast(device_type=x.device.type, dtype=torch.float16).")
    if not all(torch.isfinite(w).all() for w in got["weights"]):
        raise AssertionError(f"the weights became inf/NaN: step {OVERFLOW_STEP}'s gradients overflowed float16 and "
                             "were applied anyway. Step through the scaler, scaler.step(optimizer): it unscales "
                             "the gradients and skips a step whose gradients are not finite.")
    if moved < moved_ref / 100:
        raise AssertionError(f"the weights moved {moved:.2g} at most, about 1/{SCALER['init_scale']:g} of what they "
                             "should: scaler.step divided gradients that were never scaled. Scale the loss "
                             "before backward: scaler.scale(loss).backward().")
    if got["scales"] != want["scales"]:
        after = got["scales"][OVERFLOW_STEP:]
        kept_halving = len(after) > 2 and all(b == a / 2 for a, b in zip(after, after[1:]))
        raise AssertionError(
            f"the loss scale after each step was {got['scales']}, expected {want['scales']}. "
            + ("Every step after the overflow overflowed too: the inf gradients were never cleared. Zero the "
               "gradients after each step (optimizer.zero_grad())." if kept_halving else
               "One scaler.step and one scaler.update per step, on the scaled loss's gradients."))
    for name, w, r in zip([n for n, _ in model.named_parameters()], got["weights"], want["weights"]):
        error = float((w - r).abs().max())
        if error > 2e-3 + 2e-2 * float(r.abs().max()):   # float16 sums in another order: loose on purpose
            raise AssertionError(f"the final `{name}` differs from one process by {error:.3g}. Did you zero the "
                                 "gradients after each step (optimizer.zero_grad())?")
