"""Exercises 09: model parallelism — pipeline arithmetic, tensor-parallel shards, a pipeline step by hand,
and an MLP block split over ranks with DTensor.

Q1 ``microbatches_for_bubble``, Q2 ``tp_local_shapes``, Q3 ``activations_held``: plain functions, checked
case by case against a reference and told which classic mistake their wrong number comes from.

Q4 ``pipeline_step(stage, x, target, act_shape)`` in a file: rank 0 holds the first layers and the
input, rank 1 the last layers and the target. Rank 0 sends its activations forward; rank 1 computes
the mean squared error, runs backward and sends the gradient of the activations it received back;
rank 0 runs backward from that gradient. The harness records every ``dist.send``/``dist.recv``; the
check compares what went over the wire and every layer's gradient with the whole model in one process.

Q5 ``tensor_parallel_mlp(mlp, mesh)`` in a file: ``Linear(d, 4d)``, GELU, ``Linear(4d, d)`` split over
a 1-D mesh, column-parallel then row-parallel. The check reads every parameter's placements and local
shape, counts the forward's collectives (exactly one all-reduce, of the output's size) and compares
the output and every gradient after a backward with one process.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from course_utils.models import mlp

from .compare import first_mismatch, mlp_parameters
from .mutant import Mutant
from .ranks import run_ranks
from .student import load_student, student_function, time_limit

# ---------------------------------------------------------------------------------------------------
# Calling a student's plain function: its exceptions and endless loops become feedback
# ---------------------------------------------------------------------------------------------------


def call(fn: Callable, *args: Any, name: str, expect_error: str = "", timeout_s: float = 2.0) -> Any:
    """``fn(*args)``; what it raises (other than an expected ValueError) or an endless loop → AssertionError.

    With ``expect_error`` (the rule, in words) a ValueError is the right answer: returns the ValueError,
    and returning a value or raising another exception raises AssertionError saying the rule."""
    shown = f"{name}({', '.join(map(repr, args))})"
    try:
        with time_limit(timeout_s):
            value = fn(*args)
    except TimeoutError:
        raise AssertionError(f"{shown} did not return within {timeout_s:g} s: a loop that never ends"
                             + (f". {expect_error}: check the input before any loop." if expect_error
                                else ".")) from None
    except ValueError as error:
        if expect_error:
            return error
        raise AssertionError(f"{shown} raised ValueError: {error}, but that input is valid.") from None
    except Exception as error:   # noqa: BLE001 - whatever the student's code raises, said plainly
        raise AssertionError(f"{shown} raised {type(error).__name__}: {error}"
                             + (f", not ValueError: {expect_error}." if expect_error else ".")) from None
    if expect_error:
        raise AssertionError(f"{shown} returned {value!r}; it must raise ValueError: {expect_error}.")
    if value is Ellipsis or value is None:
        raise AssertionError(f"{shown} returned {value!r}: replace the `...` with your answer.")
    return value


# ---------------------------------------------------------------------------------------------------
# Q1: the fewest microbatches for a bubble
# ---------------------------------------------------------------------------------------------------


def bubble(stages: int, microbatches: int) -> float:
    """Idle fraction of a pipeline step: ``(p - 1) / (m + p - 1)`` (as ``costmodel.pipeline_bubble``)."""
    return (stages - 1) / (microbatches + stages - 1)


def _fewest_microbatches(stages: int, target: float) -> int:
    m = 1
    while bubble(stages, m) > target:
        m += 1
    return m


def check_microbatches_for_bubble(fn: Callable, cases: Sequence[tuple[int, float]],
                                  invalid: Sequence[float] = ()) -> None:
    """``fn(stages, target)`` must be the smallest m with bubble ≤ target for every ``(stages, target)`` in
    ``cases``, and raise ValueError for every target in ``invalid`` (with 4 stages)."""
    for stages, target in cases:
        want = _fewest_microbatches(stages, target)
        try:
            got = call(fn, stages, target, name="microbatches_for_bubble")
        except AssertionError as failure:
            if stages > 1:
                raise
            raise AssertionError(f"{failure} One stage has no bubble at all: at least one microbatch "
                                 "(m = 1) is the answer.") from None
        if got == want and isinstance(got, numbers.Real) and not isinstance(got, bool):
            continue   # (4.0 is as good as 4)
        shown = f"microbatches_for_bubble({stages}, {target}) = {got!r}, expected {want}"
        if isinstance(got, bool) or not isinstance(got, numbers.Real) or not math.isfinite(got) or got != int(got):
            raise AssertionError(f"{shown}: return a whole number of microbatches (an int).")
        got = int(got)
        if got < 1:
            raise AssertionError(f"{shown}: a step has at least one microbatch; with one stage there is no "
                                 "bubble at all, so 1 is enough.")
        if got < want:
            raise AssertionError(f"{shown}: with m = {got} the bubble is {bubble(stages, got):.4g}, above the "
                                 "target. The bubble is (p − 1)/(m + p − 1).")
        if abs(got - (stages - 1) / target) <= 1:
            raise AssertionError(f"{shown}: you solved (p − 1)/m ≤ target, but the bubble is (p − 1)/(m + p − 1): "
                                 "the p − 1 fill/drain slots count in the step too.")
        if bubble(stages, got - 1) == target:
            raise AssertionError(f"{shown}: m = {got - 1} already reaches the target — its bubble is exactly "
                                 f"{target}, and a bubble equal to the target is allowed (≤ target). A closed "
                                 "formula with math.ceil can also land one too high through float rounding "
                                 "(e.g. 27.000000000000004): check the candidates with costmodel.pipeline_bubble.")
        raise AssertionError(f"{shown}: m = {want} already reaches the target; return the smallest m.")
    for target in invalid:
        call(fn, 4, target, name="microbatches_for_bubble",
             expect_error="a target must lie strictly between 0 and 1 (no finite m reaches a bubble of 0; "
                          "`if not 0 < target < 1:` also refuses NaN, which every comparison calls False)")


# ---------------------------------------------------------------------------------------------------
# Q2: what each rank holds under column- then row-parallel
# ---------------------------------------------------------------------------------------------------


def _tp_shapes(d_in: int, hidden: int, d_out: int, world_size: int) -> dict[str, tuple[int, ...]]:
    h = hidden // world_size
    return {"0.weight": (h, d_in), "0.bias": (h,), "2.weight": (d_out, h), "2.bias": (d_out,)}


def _shape_hint(key: str, got: Any, d_in: int, hidden: int, d_out: int, t: int) -> str:
    """Why ``got`` is the wrong local shape of parameter ``key``: the classic cause, else the rule."""
    h = hidden // t
    known = {
        "0.weight": {(d_in, h): "nn.Linear stores its weight as (out_features, in_features): transpose it",
                     (hidden, d_in // t): "the first Linear is column-parallel: split by its output features "
                                          "(weight rows), not its inputs",
                     (hidden, d_in): "the first Linear is column-parallel: each rank holds hidden / world_size "
                                     "rows of its weight"},
        "0.bias": {(hidden,): "the first bias is split with the outputs it is added to: hidden / world_size "
                              "entries per rank"},
        "2.weight": {(d_out // t, hidden): "the second Linear is row-parallel: split by its input features "
                                           "(weight columns), which are the first layer's split outputs",
                     (h, d_out): "nn.Linear stores its weight as (out_features, in_features): transpose it",
                     (d_out, hidden): "the second Linear is row-parallel: each rank holds hidden / world_size "
                                      "columns of its weight"},
        "2.bias": {(d_out // t,): "the second bias is not split: it is added once after the all-reduce "
                                  "that sums the partial outputs (Replicate)"},
    }
    try:
        return known[key].get(tuple(got), "")
    except TypeError:
        return ""


def check_tp_local_shapes(fn: Callable, cases: Sequence[tuple[int, int, int, int]],
                          uneven: Sequence[tuple[int, int, int, int]] = ()) -> None:
    """``fn(d_in, hidden, d_out, world_size)``: one rank's local shapes (tuples) under colwise then rowwise,
    for every case; a ValueError for every case in ``uneven`` (hidden not divisible by world_size)."""
    for case in cases:
        want = _tp_shapes(*case)
        got = call(fn, *case, name="tp_local_shapes")
        shown = f"tp_local_shapes{case}"
        if not isinstance(got, dict) or set(got) != set(want):
            keys = sorted(got) if isinstance(got, dict) else type(got).__name__
            raise AssertionError(f"{shown} returned {keys}: return a dict with the keys {sorted(want)}.")
        for key in want:
            if got[key] == want[key]:
                continue
            if isinstance(got[key], (list, tuple)) and tuple(got[key]) == want[key]:
                raise AssertionError(f"{shown}[{key!r}] is {got[key]!r}: give each shape as a tuple.")
            hint = _shape_hint(key, got[key], *case) or ("colwise splits the first layer's outputs (weight rows "
                                                        "and bias); rowwise splits the second layer's inputs "
                                                        "(weight columns) and keeps its bias whole")
            raise AssertionError(f"{shown}[{key!r}] is {got[key]!r}, expected {want[key]}: {hint}.")
    for case in uneven:
        call(fn, *case, name="tp_local_shapes",
             expect_error="hidden does not divide evenly over the ranks, and we want equal shards")


# ---------------------------------------------------------------------------------------------------
# Q3: activations a stage holds at once
# ---------------------------------------------------------------------------------------------------


def _held(schedule: str, stages: int, microbatches: int, stage: int) -> int:
    return microbatches if schedule == "gpipe" else min(microbatches, stages - stage)


def check_activations_held(fn: Callable, cases: Sequence[tuple[str, int, int]],
                           invalid: Sequence[tuple[str, int, int, int]] = ()) -> None:
    """``fn(schedule, stages, microbatches, stage)`` for every stage of every ``(schedule, p, m)`` in
    ``cases``; a ValueError for every call in ``invalid``."""
    for schedule, p, m in cases:
        want = [_held(schedule, p, m, s) for s in range(p)]
        got = [call(fn, schedule, p, m, s, name="activations_held") for s in range(p)]
        if got == want:
            continue
        shown = f"activations_held({schedule!r}, {p}, {m}, stage) for stages 0…{p - 1} = {got}, expected {want}"
        if schedule == "gpipe":
            hint = "GPipe runs all m forwards before the first backward: every stage holds all m microbatches"
        elif got == [p - s for s in range(p)]:
            hint = "a stage cannot hold more microbatches than there are: at most m"
        elif got == [min(m, p - s - 1) for s in range(p)] or got == [p - s - 1 for s in range(p)]:
            hint = "off by one: 1F1B stage s runs p − s forwards (counting its own) before its first backward"
        elif got == [min(m, s + 1) for s in range(p)] or got == [s + 1 for s in range(p)]:
            hint = "reversed: the first stage holds the most, as it starts p − 1 forwards before the last one"
        elif got == [m] * p:
            hint = "that is GPipe's number: 1F1B starts a backward as soon as the last stage has one"
        else:
            hint = "1F1B stage s runs p − s warm-up forwards, then one forward per backward: min(m, p − s)"
        raise AssertionError(f"{shown}: {hint}.")
    for args in invalid:
        call(fn, *args, name="activations_held",
             expect_error="the schedule is 'gpipe' or '1f1b' and the stage one of 0 … stages − 1")


# ---------------------------------------------------------------------------------------------------
# Q4: a two-stage pipeline step with send/recv
# ---------------------------------------------------------------------------------------------------

NO_GRAD_HINT = ("The activation rank 1 received has no gradient after backward: make it a leaf that "
                "requires grad (act.requires_grad_()) before stage 1 uses it, so backward fills act.grad.")


def _problem(sizes: list[int], batch: int, split: int, seed: int):
    """The model, cut into two stages after module ``split``, an input batch and its target."""
    model = mlp(sizes, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, sizes[0], generator=generator)
    target = torch.randn(batch, sizes[-1], generator=generator)
    return model, model[:split], model[split:], x, target


@contextmanager
def _recording_messages(log: list):
    """Record every ``dist.send``/``dist.recv`` and ``dist.isend``/``dist.irecv`` in ``log``: (kind, peer,
    the tensor sent, copied at the call; or the tensor received, which holds the message once waited on)."""
    import torch.distributed as dist

    real_send, real_recv, real_isend, real_irecv = dist.send, dist.recv, dist.isend, dist.irecv

    def isend(tensor, dst=None, *args, **kwargs):
        log.append(("send", dst, tensor.detach().clone() if isinstance(tensor, torch.Tensor) else None))
        return real_isend(tensor, dst, *args, **kwargs)

    def irecv(tensor, src=None, *args, **kwargs):
        log.append(("recv", src, tensor))
        return real_irecv(tensor, src, *args, **kwargs)

    def send(tensor, dst=None, *args, **kwargs):
        log.append(("send", dst, tensor.detach().clone() if isinstance(tensor, torch.Tensor) else None))
        return real_send(tensor, dst, *args, **kwargs)

    def recv(tensor, src=None, *args, **kwargs):
        result = real_recv(tensor, src, *args, **kwargs)
        log.append(("recv", src, tensor.detach().clone()))
        return result

    dist.send, dist.recv, dist.isend, dist.irecv = send, recv, isend, irecv
    try:
        yield
    finally:
        dist.send, dist.recv, dist.isend, dist.irecv = real_send, real_recv, real_isend, real_irecv


def stage_rank(rank: int, world_size: int, student_file: str, *, sizes: list[int], batch: int, split: int,
               seed: int):
    """Harness (one rank): the student's ``pipeline_step`` on this rank's stage; returns ``(gradients of
    the stage's parameters, what pipeline_step returned, the messages it sent and received)``."""
    _, first, last, x, target = _problem(sizes, batch, split, seed)
    stage = first if rank == 0 else last
    with torch.no_grad():
        act_shape = tuple(first(x).shape)   # what rank 1 must allocate to receive the activations
    log: list = []
    with _recording_messages(log):   # also for a file that imports send/recv by name
        step = student_function(load_student(student_file), "pipeline_step")
        returned = step(stage, x if rank == 0 else None, target if rank == 1 else None, act_shape)
    grads = [None if p.grad is None else p.grad.clone() for p in stage.parameters()]
    return grads, returned if isinstance(returned, (float, int, type(None))) else repr(returned)[:80], log


def reference(sizes: list[int], batch: int, split: int, seed: int):
    """The whole model in one process: ``(gradients of stage 0, gradients of stage 1, loss, activations,
    gradient of the loss with respect to the activations)``."""
    with torch.random.fork_rng():
        model, first, last, x, target = _problem(sizes, batch, split, seed)
    act = first(x)
    act.retain_grad()
    loss = nn.functional.mse_loss(last(act), target)
    loss.backward()
    return ([p.grad for p in first.parameters()], [p.grad for p in last.parameters()], loss.item(),
            act.detach(), act.grad)


def _check_messages(log0: list, log1: list, act: torch.Tensor, act_grad: torch.Tensor) -> None:
    """Rank 0 sends the activations and receives their gradient; rank 1 the other way round; nothing else."""
    kinds0 = [(k, 1 if p is None else p) for k, p, _ in log0]   # recv(src=None) takes any peer: the other one
    kinds1 = [(k, 0 if p is None else p) for k, p, _ in log1]
    if kinds0 != [("send", 1), ("recv", 1)] or kinds1 != [("recv", 0), ("send", 0)]:
        raise AssertionError(f"rank 0 called {kinds0 or 'nothing'} and rank 1 {kinds1 or 'nothing'} (dist.send/"
                             "dist.recv, peer); "
                             "a 2-stage step is: rank 0 sends the activations to rank 1 and receives their "
                             "gradient from it; rank 1 receives, and sends the gradient back — one of each.")
    sent_forward, sent_back = log0[0][2], log1[1][2]
    if not torch.allclose(sent_forward, act, atol=1e-6):
        raise AssertionError("rank 0 did not send its stage's output: send stage(x), the activations rank 1 "
                             "continues from.")
    if tuple(sent_back.shape) == tuple(act.shape) and torch.allclose(sent_back, act, atol=1e-6):
        raise AssertionError("rank 1 sent back the activations themselves, not their gradient: after "
                             "loss.backward(), send act.grad (d loss / d activations) to rank 0.")
    if tuple(sent_back.shape) != tuple(act_grad.shape) or not torch.allclose(sent_back, act_grad, atol=1e-6,
                                                                              rtol=1e-5):
        raise AssertionError("rank 1 sent back a tensor that is not d loss / d activations: send act.grad, the "
                             "gradient backward left on the activations it received.")


def check_pipeline_step(student_file: str, *, sizes: tuple[int, ...] = (6, 16, 16, 3), batch: int = 8,
                        split: int = 2, seed: int = 0) -> None:
    """Run the student's ``pipeline_step`` on 2 ranks; fail with the likely cause."""
    sizes = list(sizes)
    try:
        (grads0, returned0, log0), (grads1, returned1, log1) = run_ranks(
            stage_rank, student_file, 2, sizes=sizes, batch=batch, split=split, seed=seed)
    except AssertionError as failure:
        text = str(failure)   # e.g. dist.send(act.grad, ...) with act.grad None
        if ".grad" in text and ("NoneType" in text or "of type torch.Tensor" in text or "None" in text):
            raise AssertionError(f"{failure}\n{NO_GRAD_HINT}") from None
        raise
    want0, want1, loss, act, act_grad = reference(sizes, batch, split, seed)
    names = [name for name, _ in mlp_parameters(sizes)]
    names0, names1 = names[:len(want0)], names[len(want0):]
    if all(g is None for g in grads0 + grads1) and not log0 and not log1:
        raise AssertionError("pipeline_step left every gradient empty: it still does nothing. Rank 0: forward, "
                             "send the activations; rank 1: receive, forward, loss, backward, send the "
                             "activations' gradient back; rank 0: receive it, backward.")
    if (mismatch := first_mismatch(grads1, want1, names1, atol=1e-6, rtol=1e-5)) is not None:
        name, error = mismatch
        got = grads1[names1.index(name)]
        ratio = float((got.flatten() @ want1[names1.index(name)].flatten()) /
                      want1[names1.index(name)].flatten().square().sum()) if got is not None else 0.0
        hint = ("Rank 1 must run the rest of the model on exactly what rank 0 sent and use the mean squared "
                "error against the target.")
        if got is not None and abs(ratio - act.shape[0] * sizes[-1]) < 1e-3 * ratio:
            hint = ("The loss was summed over the elements: use their mean, F.mse_loss(out, target) (reduction "
                    "'mean'), as the whole model's loss does.")
        raise AssertionError(f"stage 1 (rank 1): the gradient of `{name}` is off by {error:.3g}. {hint}")
    if log0 or log1:   # (batch_isend_irecv is not recorded: then the gradients below tell)
        _check_messages(log0, log1, act, act_grad)
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


# ---------------------------------------------------------------------------------------------------
# Q5: an MLP block, column- then row-parallel, with DTensor
# ---------------------------------------------------------------------------------------------------

# name -> (placement, what it means)
TP_PLACEMENTS = {
    "0.weight": ("Shard(dim=0)", "the first Linear must be column-parallel (ColwiseParallel): its (4d, d) "
                                 "weight split by rows, Shard(0), so each rank computes its own 4d/t hidden "
                                 "units from the whole input without communicating"),
    "0.bias": ("Shard(dim=0)", "the first bias is split with the hidden units it is added to: Shard(0)"),
    "2.weight": ("Shard(dim=1)", "the second Linear must be row-parallel (RowwiseParallel): its (d, 4d) weight "
                                 "split by columns, Shard(1), so it takes the first layer's split hidden units "
                                 "as they are and one all-reduce sums the partial outputs"),
    "2.bias": ("Replicate()", "the second bias must be Replicate: it is added once, after the all-reduce"),
}


def tp_block(d: int, seed: int) -> nn.Sequential:
    """``Sequential(Linear(d, 4d), GELU(), Linear(4d, d))``, the same weights in every process."""
    return mlp([d, 4 * d, d], nn.GELU, seed=seed)


def _tp_data(d: int, batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """An input (batch, d) and the weights (batch, d) of the loss ``(out * w).sum()``."""
    generator = torch.Generator().manual_seed(seed + 1)
    return torch.randn(batch, d, generator=generator), torch.randn(batch, d, generator=generator)


def _describe_param(p: torch.Tensor, mesh) -> dict:
    from torch.distributed.tensor import DTensor

    if not isinstance(p, DTensor):
        return dict(dtensor=False, shape=tuple(p.shape), full=p.detach().clone())
    return dict(dtensor=True, placements=tuple(repr(x) for x in p.placements), local=tuple(p.to_local().shape),
                mesh=p.device_mesh.mesh.tolist(), given_mesh=mesh.mesh.tolist(),
                full=p.full_tensor().detach().clone())


def _full(t: torch.Tensor | None) -> torch.Tensor | None:
    from torch.distributed.tensor import DTensor

    if t is None:
        return None
    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().clone()


def _first_line(error: BaseException) -> str:
    import re

    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {re.sub(r'[[][^]]*[.](?:cc|cpp|h):[0-9]+[]] ', '', text)[:200]}"


def tp_rank(rank: int, world_size: int, student_file: str, *, d: int, batch: int, seed: int) -> dict:
    """Harness (one rank): the student's ``tensor_parallel_mlp`` on a 1-D mesh of all ranks; then one
    forward (its collectives recorded) and one backward of ``(out * w).sum()`` on the same input on every
    rank. Returns the parameters' layouts, the output, the gradients (whole) and the collectives."""
    from torch.distributed.device_mesh import init_device_mesh

    from course_utils.commcount import Collectives

    split = student_function(load_student(student_file), "tensor_parallel_mlp")
    mesh = init_device_mesh("cpu", (world_size,))
    model = split(tp_block(d, seed), mesh)
    if not isinstance(model, nn.Module):
        return dict(returned=repr(model)[:80])
    params = {name: _describe_param(p, mesh) for name, p in model.named_parameters()}
    x, w = _tp_data(d, batch, seed)
    x.requires_grad_()
    result: dict[str, Any] = dict(params=params)
    try:
        with Collectives() as forward:
            out = model(x)
        result["calls"] = [tuple(call) for call in forward.calls]
        result["out"] = _full(out)
        if tuple(out.shape) != tuple(w.shape):
            raise ValueError(f"the output on rank {rank} has shape {tuple(out.shape)}, not {tuple(w.shape)}")
        (out * w).sum().backward()
        result["grads"] = {name: _full(p.grad) for name, p in model.named_parameters()}
        result["x_grad"] = _full(x.grad)
    except Exception as error:   # noqa: BLE001 - the layout's failure, in words, for the check to explain
        result["error"] = _first_line(error)
    return result


def _reference_tp(d: int, batch: int, seed: int) -> dict:
    with torch.random.fork_rng():
        model = tp_block(d, seed)
    x, w = _tp_data(d, batch, seed)
    x.requires_grad_()
    out = model(x)
    (out * w).sum().backward()
    return dict(params={n: p.detach() for n, p in model.named_parameters()}, out=out.detach(),
                grads={n: p.grad for n, p in model.named_parameters()}, x_grad=x.grad)


def _check_layout(params: dict, want: dict, world_size: int) -> None:
    """Every parameter a DTensor on the given mesh, with the Megatron placements, local shapes and values."""
    if set(params) != set(want):
        raise AssertionError(f"the returned module has parameters {sorted(params)}; return the MLP you were "
                             f"given (parameters {sorted(want)}), split in place.")
    plain = [name for name in TP_PLACEMENTS if not params[name]["dtensor"]]
    if len(plain) == len(TP_PLACEMENTS):
        raise AssertionError("no parameter is a DTensor: every rank still holds the whole MLP, replicated — no "
                             "tensor parallelism. Split it over `mesh` with parallelize_module(mlp, mesh, "
                             "{'0': ColwiseParallel(), '2': RowwiseParallel()}).")
    if plain:
        layer = "second" if plain[0].startswith("2") else "first"
        raise AssertionError(f"`{plain[0]}` is not a DTensor: the {layer} Linear was not parallelized, so every "
                             f"rank holds all of it. Split both Linears: "
                             f"{TP_PLACEMENTS[plain[0]][1]}.")
    for name, (placement, meaning) in TP_PLACEMENTS.items():
        p = params[name]
        if p["mesh"] != p["given_mesh"]:
            raise AssertionError(f"`{name}` lives on the mesh {p['mesh']}, not on the `mesh` argument "
                                 f"({p['given_mesh']}): parallelize over the mesh you are given.")
        if p["placements"] != (placement,):
            if p["placements"] == ("Replicate()",) and placement != "Replicate()":
                meaning = f"it is replicated — every rank holds all of it, no tensor parallelism; {meaning}"
            raise AssertionError(f"`{name}` is placed ({', '.join(p['placements'])},), expected ({placement},): "
                                 f"{meaning}.")
    for name, w in want.items():
        full = params[name]["full"]
        dim = {"Shard(dim=0)": 0, "Shard(dim=1)": 1}.get(TP_PLACEMENTS[name][0])
        local = list(w.shape)
        if dim is not None:
            local[dim] //= world_size
        if params[name]["local"] != tuple(local):
            raise AssertionError(f"`{name}` holds a local shard of shape {params[name]['local']} on a rank, "
                                 f"expected {tuple(local)}: split it evenly over the {world_size} ranks.")
        if tuple(full.shape) != tuple(w.shape) or not torch.allclose(full, w):
            raise AssertionError(f"`{name}`'s values changed: distribute the MLP's own weights, do not "
                                 "create or re-initialize them.")


def _check_forward_collectives(calls: list, out_bytes: int, world_size: int) -> None:
    """Exactly one all-reduce of the output's size over all ranks, and nothing else."""
    kinds = [c[0] for c in calls]
    if not calls:
        raise AssertionError("the forward communicated nothing: the row-parallel Linear's partial outputs must "
                             "be summed by one all-reduce (RowwiseParallel does it).")
    others = [k for k in kinds if k != "all_reduce"]
    if others:
        extra = ", ".join(f"{kinds.count(k)} {k}" for k in dict.fromkeys(others))
        raise AssertionError(f"the forward ran {extra} besides the all-reduce: the hidden activations were "
                             "gathered (or re-split). Keep the first layer's output sharded (ColwiseParallel's "
                             "default) and let the row-parallel layer use it as it is: one all-reduce, "
                             "nothing else.")
    if len(calls) > 1:
        raise AssertionError(f"the forward ran {len(calls)} all-reduces; tensor parallelism over one MLP needs "
                             "exactly one, after the row-parallel Linear (RowwiseParallel issues it): remove "
                             "the extra one.")
    kind, size, group_size = calls[0][:3]
    if size != out_bytes or group_size != world_size:
        raise AssertionError(f"the forward's all-reduce moved {size} bytes over {group_size} ranks; expected the "
                             f"output's {out_bytes} bytes over all {world_size} ranks.")


def check_tensor_parallel_mlp(student_file: str, *, world_size: int = 2, d: int = 8, batch: int = 4,
                              seed: int = 0) -> None:
    """Split ``Linear(d, 4d), GELU, Linear(4d, d)`` with the student's ``tensor_parallel_mlp`` on
    ``world_size`` gloo ranks; check placements, local shapes, the forward's collectives, the output and
    every gradient (and the input's) against one process; fail with the likely cause."""
    results = run_ranks(tp_rank, student_file, world_size, d=d, batch=batch, seed=seed)
    want = _reference_tp(d, batch, seed)
    for got in results:   # the layout and the communication, on every rank
        if "returned" in got:
            raise AssertionError(f"tensor_parallel_mlp returned {got['returned']}: it still does nothing. Split "
                                 "the MLP over `mesh` (parallelize_module with ColwiseParallel on '0' and "
                                 "RowwiseParallel on '2') and return it.")
        _check_layout(got["params"], want["params"], world_size)
        if "error" in got:
            raise AssertionError(f"the forward or backward of your split MLP failed: {got['error'].rstrip('.')}. "
                                 "The layers must fit together: column-parallel first (output sharded), "
                                 "row-parallel second (input sharded, output all-reduced); and the module takes "
                                 "the plain input tensor every rank holds and returns a plain tensor (the styles "
                                 "do that; by hand, convert with DTensor.from_local / .to_local or "
                                 "distribute_module's input_fn / output_fn).")
        _check_forward_collectives(got["calls"], want["out"].numel() * want["out"].element_size(), world_size)
    for rank, result in enumerate(results):
        names = ["output", "input's gradient", *(f"gradient of `{n}`" for n in want["grads"])]
        mismatch = first_mismatch([result["out"], result["x_grad"], *result["grads"].values()],
                                  [want["out"], want["x_grad"], *want["grads"].values()], names,
                                  atol=1e-5, rtol=1e-4)
        if mismatch is not None:
            name, error = mismatch
            raise AssertionError(f"rank {rank}: the {name} differs from one process by {error:.3g}: each rank "
                                 "must run the same model on the same input, split column- then row-parallel, "
                                 "and the backward must reach every shard.")


# ---------------------------------------------------------------------------------------------------
# The planted wrong answers (tools/mutants.py, tests/test_mutants.py)
# ---------------------------------------------------------------------------------------------------

_BUBBLE_HEAD = "def microbatches_for_bubble(stages, target):\n    import math\n\n"
_BUBBLE_CHECK = ("    if not 0 < target < 1:\n"
                 "        raise ValueError(f\"target must be between 0 and 1 (exclusive), got {target}\")\n")
_TP_HEAD = ("%%writefile work/ex09_tp.py\n"
            "import torch.distributed as dist\n"
            "from torch.distributed.tensor import Replicate\n"
            "from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module\n\n\n"
            "def tensor_parallel_mlp(mlp, mesh):\n")

MUTANTS = {
    "q1": (
        Mutant("closed formula, float rounding", "float rounding", source=_BUBBLE_HEAD + _BUBBLE_CHECK +
               "    return max(1, math.ceil((stages - 1) * (1 - target) / target))\n"),
        Mutant("strict <: bubble equal to the target refused", "a bubble equal to the target is allowed",
               source=_BUBBLE_HEAD + _BUBBLE_CHECK + "    m = 1\n"
               "    while costmodel.pipeline_bubble(stages, m) >= target:\n        m += 1\n    return m\n"),
        Mutant("bubble taken as (p-1)/m", "you solved (p − 1)/m ≤ target", source=_BUBBLE_HEAD + _BUBBLE_CHECK +
               "    return max(1, math.ceil((stages - 1) / target))\n"),
        Mutant("no microbatch for one stage", "at least one microbatch",
               edits=(("max(1, math.ceil((stages - 1) * (1 - target) / target))",
                       "math.ceil((stages - 1) * (1 - target) / target)"),)),
        Mutant("target of 1 accepted", "microbatches_for_bubble(4, 1) returned 1; it must raise ValueError",
               edits=(("if not 0 < target < 1:", "if not 0 < target <= 1:"),)),
        Mutant("target 0 or below not refused", "microbatches_for_bubble(4, 0) raised ZeroDivisionError",
               edits=(("if not 0 < target < 1:", "if target >= 1:"),)),
        Mutant("truncated instead of rounded up", "above the target", source=_BUBBLE_HEAD + _BUBBLE_CHECK +
               "    return max(1, int((stages - 1) * (1 - target) / target))\n"),
    ),
    "q2": (
        Mutant("d_in must divide too", "tp_local_shapes(10, 64, 6, 4) raised",
               edits=(("    if hidden % world_size:", "    if hidden % world_size or d_in % world_size:"),)),
        Mutant("second bias split", "the second bias is not split",
               edits=(('"2.bias": (d_out,)', '"2.bias": (d_out // world_size,)'),)),
        Mutant("first bias whole", "the first bias is split with the outputs",
               edits=(('"0.bias": (h,)', '"0.bias": (hidden,)'),)),
        Mutant("first weight transposed", "(out_features, in_features): transpose it",
               edits=(('"0.weight": (h, d_in)', '"0.weight": (d_in, h)'),)),
        Mutant("both layers colwise", "the second Linear is row-parallel",
               edits=(('"2.weight": (d_out, h)', '"2.weight": (d_out // world_size, hidden)'),)),
        Mutant("row then col", "the first Linear is column-parallel",
               edits=(('"0.weight": (h, d_in)', '"0.weight": (hidden, d_in // world_size)'),
                      ('"2.weight": (d_out, h)', '"2.weight": (d_out // world_size, hidden)'))),
        Mutant("uneven split not refused", "tp_local_shapes(64, 250, 10, 4) returned",
               edits=(("if hidden % world_size:", "if hidden < world_size:"),)),
        Mutant("lists, not tuples", "give each shape as a tuple",
               edits=(('"2.bias": (d_out,)', '"2.bias": [d_out]'),)),
    ),
    "q3": (
        Mutant("1F1B without the cap at m", "cannot hold more microbatches than there are",
               edits=(("min(microbatches, stages - stage)", "stages - stage"),)),
        Mutant("1F1B off by one", "off by one",
               edits=(("min(microbatches, stages - stage)", "min(microbatches, stages - stage - 1)"),)),
        Mutant("1F1B reversed", "reversed: the first stage holds the most",
               edits=(("min(microbatches, stages - stage)", "min(microbatches, stage + 1)"),)),
        Mutant("GPipe holds one per stage", "GPipe runs all m forwards",
               edits=(("return microbatches  ", "return stages  "),)),
        Mutant("1F1B like GPipe", "that is GPipe's number",
               edits=(("min(microbatches, stages - stage)", "microbatches"),)),
        Mutant("stage out of range accepted", "activations_held('gpipe', 2, 4, 2) returned 4",
               edits=(("if not 0 <= stage < stages:", "if stage < 0:"),)),
        Mutant("unknown schedule returns None", "activations_held('zero-bubble', 2, 4, 0) returned None",
               edits=(('raise ValueError(f"schedule must be', 'return None  # (f"schedule must be'),)),
    ),
    "q4": (
        Mutant("activations sent back instead of their gradient", "sent back the activations themselves",
               edits=(("dist.send(act.grad, dst=0)", "dist.send(act.detach(), dst=0)"),)),
        Mutant("received activation not a leaf requiring grad", "act.requires_grad_()",
               edits=(("    act.requires_grad_()                     # a leaf: backward fills act.grad\n", ""),)),
        Mutant("no backward on stage 0", "stage 0 (rank 0) got no gradient",
               edits=(("        act.backward(grad)\n", ""),)),
        Mutant("stage 0 backward from its own loss", "not from a loss of its own",
               edits=(("act.backward(grad)", "act.sum().backward()"),)),
        Mutant("summed loss", "The loss was summed over the elements",
               edits=(("F.mse_loss(stage(act), target)", "F.mse_loss(stage(act), target, reduction=\"sum\")"),)),
        Mutant("loss returned as a tensor", "return None on rank 0 and the loss as a float",
               edits=(("    return loss.item()\n", "    return loss\n"),)),
        Mutant("gradient averaged over the batch before sending", "not d loss / d activations",
               edits=(("dist.send(act.grad, dst=0)", "dist.send(act.grad / len(act), dst=0)"),)),
    ),
    "q5": (
        Mutant("both layers colwise", "the second Linear must be row-parallel",
               edits=(('"2": RowwiseParallel()', '"2": ColwiseParallel()'),)),
        Mutant("row then col", "the first Linear must be column-parallel",
               edits=(('"0": ColwiseParallel()', '"0": RowwiseParallel()'),
                      ('"2": RowwiseParallel()', '"2": ColwiseParallel()'))),
        Mutant("both layers rowwise (Shard(1) on the first weight)", "the first Linear must be column-parallel",
               edits=(('"0": ColwiseParallel()', '"0": RowwiseParallel()'),)),
        Mutant("no tensor parallelism: everything replicated", "no parameter is a DTensor",
               edits=(("return parallelize_module(mlp, mesh, plan)", "return mlp"),)),
        Mutant("only the first layer parallelized", "the second Linear was not parallelized",
               source=_TP_HEAD + "    return parallelize_module(mlp, mesh, "
               "{\"0\": ColwiseParallel(output_layouts=Replicate())})\n"),
        Mutant("hidden activations gathered", "the hidden activations were gathered",
               source=_TP_HEAD + "    return parallelize_module(mlp, mesh, {\n"
               "        \"0\": ColwiseParallel(output_layouts=Replicate()),\n"
               "        \"2\": RowwiseParallel(input_layouts=Replicate())})\n"),
        Mutant("extra all-reduce of the output", "remove the extra one",
               source=_TP_HEAD + "    plan = {\"0\": ColwiseParallel(), \"2\": RowwiseParallel()}\n"
               "    parallelize_module(mlp, mesh, plan)\n\n"
               "    def average(module, inputs, output):   # keep the ranks in sync\n"
               "        output = output.clone()\n"
               "        dist.all_reduce(output)\n"
               "        return output / mesh.size()\n\n"
               "    mlp.register_forward_hook(average)\n"
               "    return mlp\n"),
        Mutant("its own 2-rank mesh (works on 2 ranks only)", "parallelize over the mesh you are given",
               source=_TP_HEAD.replace("import torch.distributed as dist\n",
                                       "from torch.distributed.device_mesh import init_device_mesh\n")
               + "    mesh = init_device_mesh(\"cpu\", (2,))\n"
               "    return parallelize_module(mlp, mesh, {\"0\": ColwiseParallel(), \"2\": RowwiseParallel()})\n"),
        Mutant("forgot to return the module", "tensor_parallel_mlp returned None",
               edits=(("return parallelize_module(mlp, mesh, plan)", "parallelize_module(mlp, mesh, plan)"),)),
        Mutant("gathered output given to a row-parallel layer", "must fit together",
               source=_TP_HEAD + "    return parallelize_module(mlp, mesh, {\n"
               "        \"0\": ColwiseParallel(output_layouts=Replicate()),\n"
               "        \"2\": RowwiseParallel()})\n"),
    ),
}
