"""Exercises 09: one forward and backward pass of a 2-stage pipeline, written with send/recv.

The student writes ``pipeline_step(stage, x, target, act_shape)``. Rank 0 holds the first layers
(``stage``) and the input ``x``; rank 1 holds the last layers and the ``target``. Rank 0 sends its
activations forward; rank 1 computes the mean squared error, runs backward and sends the gradient
of the activations it received back; rank 0 runs backward from that gradient. The check compares
every layer's gradient, and the loss, with the whole model in one process.
"""
from __future__ import annotations

import torch
from torch import nn

from ..models import mlp
from . import first_mismatch, load_student, mlp_parameters, run_ranks, student_function

NO_GRAD_HINT = ("The activation rank 1 received has no gradient after backward: make it a leaf that "
                "requires grad (act.requires_grad_()) before stage 1 uses it, so backward fills act.grad.")


def _problem(sizes: list[int], batch: int, split: int, seed: int):
    """The model, cut into two stages after module ``split``, an input batch and its target."""
    model = mlp(sizes, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, sizes[0], generator=generator)
    target = torch.randn(batch, sizes[-1], generator=generator)
    return model, model[:split], model[split:], x, target


def stage_rank(rank: int, world_size: int, student_file: str, *, sizes: list[int], batch: int, split: int,
               seed: int):
    """Harness (one rank): the student's ``pipeline_step`` on this rank's stage; returns
    ``(gradients of the stage's parameters, what pipeline_step returned)``."""
    step = student_function(load_student(student_file), "pipeline_step")
    _, first, last, x, target = _problem(sizes, batch, split, seed)
    stage = first if rank == 0 else last
    with torch.no_grad():
        act_shape = tuple(first(x).shape)   # what rank 1 must allocate to receive the activations
    returned = step(stage, x if rank == 0 else None, target if rank == 1 else None, act_shape)
    return [None if p.grad is None else p.grad.clone() for p in stage.parameters()], returned


def reference(sizes: list[int], batch: int, split: int, seed: int):
    """The whole model in one process: ``(gradients of stage 0, gradients of stage 1, loss)``."""
    with torch.random.fork_rng():
        model, first, last, x, target = _problem(sizes, batch, split, seed)
    loss = nn.functional.mse_loss(model(x), target)
    loss.backward()
    return [p.grad for p in first.parameters()], [p.grad for p in last.parameters()], loss.item()


def check_pipeline_step(student_file: str, *, sizes: tuple[int, ...] = (6, 16, 16, 3), batch: int = 8,
                        split: int = 2, seed: int = 0) -> None:
    """Run the student's ``pipeline_step`` on 2 ranks; fail with the likely cause."""
    sizes = list(sizes)
    try:
        (grads0, returned0), (grads1, returned1) = run_ranks(stage_rank, student_file, 2, sizes=sizes,
                                                             batch=batch, split=split, seed=seed)
    except AssertionError as failure:
        text = str(failure)   # e.g. dist.send(act.grad, ...) with act.grad None
        if ".grad" in text and ("NoneType" in text or "of type torch.Tensor" in text):
            raise AssertionError(f"{failure}\n{NO_GRAD_HINT}") from None
        raise
    want0, want1, loss = reference(sizes, batch, split, seed)
    names = [name for name, _ in mlp_parameters(sizes)]
    names0, names1 = names[:len(want0)], names[len(want0):]
    if all(g is None for g in grads0 + grads1):
        raise AssertionError("pipeline_step left every gradient empty: it still does nothing. Rank 0: forward, "
                             "send the activations; rank 1: receive, forward, loss, backward, send the "
                             "activations' gradient back; rank 0: receive it, backward.")
    if (mismatch := first_mismatch(grads1, want1, names1, atol=1e-6, rtol=1e-5)) is not None:
        name, error = mismatch
        raise AssertionError(f"stage 1 (rank 1): the gradient of `{name}` is off by {error:.3g}. Rank 1 must run "
                             "the rest of the model on exactly what rank 0 sent and use the mean squared "
                             "error against the target.")
    if all(g is None for g in grads0):
        raise AssertionError("stage 0 (rank 0) got no gradient: rank 1 must send the gradient of the activations "
                             "it received back to rank 0, and rank 0 must call backward on its own activations "
                             "with it (act.backward(grad)).")
    if (mismatch := first_mismatch(grads0, want0, names0, atol=1e-6, rtol=1e-5)) is not None:
        name, error = mismatch
        raise AssertionError(f"stage 0 (rank 0): the gradient of `{name}` is off by {error:.3g}, while stage 1's "
                             "are right. Rank 0's backward must start from the gradient rank 1 sent "
                             "(act.backward(grad)), not from a loss of its own.")
    if returned0 is not None or not isinstance(returned1, float) or abs(returned1 - loss) > 1e-5 * max(1, loss):
        raise AssertionError(f"the gradients are right, but pipeline_step returned {returned0!r} on rank 0 and "
                             f"{returned1!r} on rank 1: return None on rank 0 and the loss as a float "
                             f"(loss.item(), here {loss:.6g}) on rank 1.")
