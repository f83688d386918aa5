"""Exercises 00: graders for a GFLOP/s rate, a device-agnostic batch and a first all-reduce worker.

Q1 ``matmul_gflops(n, seconds)`` and Q2 ``make_batch(n, features, device)`` run in the notebook's
process: their checks call the student's function on several inputs (a student's exception becomes
feedback, :func:`call_student`) and name the classic mistake when the result matches one
(:func:`explain`). Q3's worker ``sum_of_squares(rank, world_size)`` runs on gloo ranks; the harness
records every ``torch.distributed`` call it makes, so that the right number computed without
communicating, or with another collective, still fails.

(:mod:`grading.feedback` holds :func:`call_student` and :func:`explain`, for chapters 00-03.)
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

from course_utils.measure import matmul_gflops as reference_gflops

from .feedback import call_student, check_number, explain
from .mutant import Mutant
from .ranks import run_ranks
from .student import load_student, student_function

# --- Q1: the rate of a matrix product ---------------------------------------------------------------

GFLOPS_CASES = ((1000, 1.0), (4096, 0.5), (3, 7e-9), (250, 3.0e-3))
GFLOPS_MISTAKES = (
    (lambda n, s: n**3 / s / 1e9,
     "you counted n³ flops: each of the n³ multiply-adds is 2 flops (a multiply and an add), 2 n³ in all."),
    (lambda n, s: 2 * n**2 / s / 1e9,
     "you counted 2 n² flops: the product does n multiply-adds for each of its n² outputs, 2 n³ flops."),
    (lambda n, s: 2 * n**3 / s,
     "that is flop/s, the rate in flops per second: divide by 1e9 to get GFLOP/s."),
    (lambda n, s: 2 * n**3 / s / 1e6, "that is MFLOP/s (1e6 flop/s): a GFLOP is 1e9 flops."),
    (lambda n, s: 2 * n**3 / s / 2**30,
     "a GFLOP is 10⁹ flops, not 2³⁰ (binary prefixes are for bytes, GiB): divide by 1e9."),
    (lambda n, s: 2 * n**3 * s / 1e9,
     "you multiplied by the seconds: a rate divides the work by the time it took."),
    (lambda n, s: s / (2 * n**3) * 1e9, "that is seconds per GFLOP: the rate is flops / seconds, not the inverse."),
)


def check_matmul_gflops(matmul_gflops: Callable, cases: Sequence[tuple[int, float]] = GFLOPS_CASES) -> None:
    """Fail unless ``matmul_gflops(n, seconds)`` is ``2 n³ / seconds / 1e9`` on every ``(n, seconds)``."""
    calls = [f"matmul_gflops({n}, {s})" for n, s in cases]
    got = [check_number(call_student(matmul_gflops, "matmul_gflops", n, s), call) for (n, s), call in zip(cases, calls)]
    want = [reference_gflops(n, s) for n, s in cases]
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if not math.isclose(g, w, rel_tol=1e-9)]
    if not bad:
        return
    i = bad[0]
    why = explain(got, cases, GFLOPS_MISTAKES) or "the rate is 2 n³ flops / seconds / 1e9."
    raise AssertionError(f"`{calls[i]}` returned {got[i]:.6g}, expected {want[i]:.6g} GFLOP/s: {why}")


# --- Q2: a batch made on the device it is meant for -------------------------------------------------

class _Ops(TorchDispatchMode):
    """Records the name of every aten op run under it (``aten._to_copy`` is a ``.to()`` copy)."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func._overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def _batch(make_batch: Callable, n: int, features: int, device) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """``make_batch(n, features, device)`` as ``(x, y, ops)``; fail unless it is two tensors."""
    call = f"make_batch({n}, {features}, {device!r})"
    with _Ops() as seen:
        batch = call_student(make_batch, "make_batch", n, features, device)
    if batch is None:
        raise AssertionError(f"`{call}` returned None: make_batch still does nothing. Create x with "
                             "torch.randn(n, features, device=device) and return (x, y).")
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise AssertionError(f"`{call}` returned {type(batch).__name__}: return a tuple (x, y).")
    x, y = batch
    if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
        raise AssertionError(f"`{call}` returned ({type(x).__name__}, {type(y).__name__}): x and y must be tensors.")
    return x, y, seen.ops


def _check_values(x: torch.Tensor, y: torch.Tensor, n: int, features: int) -> None:
    """Shapes, labels and distribution of a batch made on the CPU."""
    call = f"make_batch({n}, {features}, 'cpu')"
    if tuple(x.shape) != (n, features):
        raise AssertionError(f"{call}: x has shape {tuple(x.shape)}, expected ({n}, {features}): "
                             "one row per sample, one column per feature.")
    if tuple(y.shape) in ((1, features), (features,)):
        raise AssertionError(f"{call}: y has shape {tuple(y.shape)}: you summed over the samples (dim=0). "
                             "Each label sums its own sample's features: dim=1.")
    if tuple(y.shape) == (n,):
        raise AssertionError(f"{call}: y has shape ({n},), expected ({n}, 1): pass keepdim=True so the "
                             "label stays a column.")
    if tuple(y.shape) != (n, 1):
        raise AssertionError(f"{call}: y has shape {tuple(y.shape)}, expected ({n}, 1).")
    if torch.allclose(y, x.mean(dim=1, keepdim=True), atol=1e-6):
        raise AssertionError(f"{call}: y is the mean of the features; the label is their sum (x.sum).")
    if not torch.allclose(y, x.sum(dim=1, keepdim=True), atol=1e-5):
        raise AssertionError(f"{call}: y is not x.sum(dim=1, keepdim=True): the labels must come from the "
                             "features of this x, not from another random draw.")
    if x.min() >= 0:
        raise AssertionError(f"{call}: every feature is >= 0: torch.rand draws uniform numbers in [0, 1); "
                             "the features are standard normal, torch.randn.")
    mean, std = float(x.mean()), float(x.std())
    if abs(mean) > 0.1 or abs(std - 1) > 0.1:
        raise AssertionError(f"{call}: the features have mean {mean:.3f} and std {std:.3f}; torch.randn draws "
                             "mean 0 and std 1. Use torch.randn(n, features, device=device) as is.")


def _check_device(make_batch: Callable, device) -> None:
    """The batch lands on ``device`` (a device with no data, ``meta``), created there: no copy."""
    x, y, ops = _batch(make_batch, 4, 3, device)
    call = f"make_batch(4, 3, {device!r})"
    want = torch.device(device).type
    if x.device.type != want or y.device.type != want:
        raise AssertionError(f"`{call}` gave x on {x.device.type} and y on {y.device.type}, not on the device you "
                             f"were given ({want}): create them with torch.randn(..., device=device).")
    if "_to_copy" in ops or "copy_" in ops:
        raise AssertionError(f"`{call}` created the batch on the CPU and copied it to {want} (.to() or .cuda()): "
                             "a copy per batch costs a transfer. Create it there: torch.randn(..., device=device).")


def check_make_batch(make_batch: Callable, n: int = 4000, features: int = 3, *, seed: int = 0) -> None:
    """Fail unless ``make_batch`` returns ``x ~ randn(n, features)`` and ``y = x.sum(1, keepdim=True)``,
    made directly on the device it is given (checked on ``meta``, as a string and a ``torch.device``).

    ``n * features`` samples are enough to tell ``randn`` (mean 0, std 1) from ``rand`` (mean 0.5).
    """
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        x, y, _ = _batch(make_batch, n, features, "cpu")
        _check_values(x, y, n, features)
    _check_device(make_batch, "meta")
    _check_device(make_batch, torch.device("meta"))


# --- Q3: a worker that all-reduces rank ** 2 ----------------------------------------------------------

OTHER_COLLECTIVES = ("reduce", "broadcast", "all_gather", "all_gather_into_tensor", "gather", "scatter",
                     "reduce_scatter", "reduce_scatter_tensor", "send", "recv", "isend", "irecv", "all_to_all",
                     "all_to_all_single", "all_gather_object", "broadcast_object_list")


@contextmanager
def recorded_collectives() -> Iterator[tuple[list[dict], list[str]]]:
    """Record the ``torch.distributed`` collectives called inside the block (they still run).

    Yields ``(all_reduces, others)``: each ``dist.all_reduce`` as ``{"op": "SUM", "numel": int,
    "float": bool, "before": [...], "after": [...]}`` (the tensor's values flattened, for tensors of
    up to 64 elements), and the names of the other collectives called (``"reduce"``,
    ``"all_gather"``...). Enter it before the student's file is loaded, so that ``from
    torch.distributed import all_reduce`` gets the recording version too.
    """
    all_reduces: list[dict] = []
    others: list[str] = []
    real = {name: getattr(dist, name) for name in ("all_reduce", *OTHER_COLLECTIVES) if hasattr(dist, name)}

    def values(tensor) -> list[float] | None:
        return tensor.detach().flatten().tolist() if tensor.numel() <= 64 else None

    def recorded_all_reduce(tensor, op=dist.ReduceOp.SUM, *args, **kwargs):
        before = values(tensor)
        out = real["all_reduce"](tensor, op, *args, **kwargs)
        all_reduces.append({"op": str(op).rsplit(".", 1)[-1], "numel": tensor.numel(), "before": before,
                            "float": tensor.is_floating_point(), "after": values(tensor)})
        return out

    def recorded(name):
        def call(*args, **kwargs):
            others.append(name)
            return real[name](*args, **kwargs)
        return call

    dist.all_reduce = recorded_all_reduce
    for name in real:
        if name != "all_reduce":
            setattr(dist, name, recorded(name))
    try:
        yield all_reduces, others
    finally:
        for name, fn in real.items():
            setattr(dist, name, fn)


def squares_rank(rank: int, world_size: int, student_file: str) -> dict:
    """Harness (one rank): ``sum_of_squares(rank, world_size)`` with the collectives it calls recorded.

    Returns ``{"value": float | None, "type": str, "all_reduces": [...], "others": [...]}``: what it
    returned (as a float when it is a number or a one-element tensor), the type it returned, and
    the collectives it called (:func:`recorded_collectives`).
    """
    with recorded_collectives() as (all_reduces, others):
        value = student_function(load_student(student_file), "sum_of_squares")(rank, world_size)
    number = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, torch.Tensor) and value.numel() == 1:
        number = float(value)
    return {"value": number, "type": type(value).__name__, "all_reduces": all_reduces, "others": others}


def check_sum_of_squares(student_file: str | os.PathLike, *, world_size: int = 3) -> None:
    """Run the student's ``sum_of_squares`` on ``world_size`` gloo ranks; fail with the likely cause.

    Every rank must all-reduce (once, a sum) a float tensor holding its own ``rank ** 2`` and
    return the result as a Python float: the right number computed without that all-reduce fails.
    """
    results = run_ranks(squares_rank, student_file, world_size, timeout_s=60, pg_timeout_s=10)
    total = float(sum(r**2 for r in range(world_size)))
    for diagnose in (_diagnose_calls, _diagnose_value):   # what every rank sent, then what it returned
        for rank, got in enumerate(results):
            problem = diagnose(rank, world_size, got, total)
            if problem:
                raise AssertionError(f"rank {rank} of {world_size}: {problem}")


def _diagnose_calls(rank: int, world_size: int, got: dict, total: float) -> str | None:
    """What is wrong with the collectives one rank's ``sum_of_squares`` called, or None."""
    calls, value, others = got["all_reduces"], got["value"], got["others"]
    if not calls:
        if others:
            used = ", ".join(f"dist.{name}" for name in dict.fromkeys(others))
            return (f"you used {used}, not dist.all_reduce: dist.reduce leaves the sum on its dst rank only, "
                    "and every rank must return it. Call dist.all_reduce(t): every rank gets the sum.")
        if value is None and got["type"] == "NoneType":
            return ("sum_of_squares returned None and called no collective: it still does nothing. Put "
                    "float(rank ** 2) in a tensor, dist.all_reduce it, and return its .item().")
        return (f"returned {value} but never communicated: no dist.all_reduce ran. A rank knows only its "
                "own rank ** 2 (computing the sum from world_size is not what a worker can do with real "
                "data): put rank ** 2 in a tensor and dist.all_reduce it.")
    if len(calls) > 1:
        return f"called dist.all_reduce {len(calls)} times: one all_reduce of one tensor gives every rank the sum."
    call = calls[0]
    if call["op"] != "SUM":
        return (f"all_reduce ran with op=ReduceOp.{call['op']}: the sum over the ranks is ReduceOp.SUM "
                "(the default; leave op out).")
    if call["before"] != [float(rank**2)]:
        if call["before"] == [float(rank)]:
            return f"put {rank}, its rank, into the all_reduce, not rank ** 2 = {rank**2}: square it."
        if call["before"] == [float((rank + 1) ** 2)]:
            return (f"put {(rank + 1) ** 2} into the all_reduce: ranks count from 0, so rank {rank} "
                    f"contributes {rank}**2 = {rank**2}.")
        return (f"put {call['before']} into dist.all_reduce: each rank must put its own rank ** 2 = "
                f"{float(rank**2)} (one number) into the tensor it all-reduces.")
    return None


def _diagnose_value(rank: int, world_size: int, got: dict, total: float) -> str | None:
    """What is wrong with the value one rank's ``sum_of_squares`` returned, or None."""
    value = got["value"]
    if value is not None and got["type"] not in ("float",):
        if got["type"] == "int":
            return (f"returned {int(value)}, an int: make the tensor a float tensor "
                    f"(torch.tensor([float(rank ** 2)])) so that .item() returns a Python float.")
        return f"returned a {got['type']}: return a Python float, the tensor's .item()."
    if value is None:
        return f"returned a {got['type']}, not a number: return the all-reduced tensor's .item() (a Python float)."
    if value != total:
        if value == total / world_size:
            return f"returned {value}: you divided the sum by world_size. Return the sum itself, {total}."
        if value == rank**2:
            return (f"returned {value}, this rank's own rank ** 2: return the tensor after the all_reduce "
                    "(it sums in place).")
        return f"returned {value}, expected the sum of rank ** 2 over {world_size} ranks, {total}."
    return None


MUTANTS = {
    "q1": (
        Mutant("n³ flops (forgot the 2)", "each of the n³ multiply-adds is 2 flops", edits=(("2 * n**3", "n**3"),)),
        Mutant("n² instead of n³", "n multiply-adds for each of its n² outputs", edits=(("n**3", "n**2"),)),
        Mutant("flop/s, not GFLOP/s", "that is flop/s", edits=((" / 1e9", ""),)),
        Mutant("MFLOP/s", "that is MFLOP/s", edits=(("1e9", "1e6"),)),
        Mutant("2³⁰ for giga", "not 2³⁰", edits=(("1e9", "2**30"),)),
        Mutant("times the seconds", "you multiplied by the seconds", edits=(("/ seconds", "* seconds"),)),
        Mutant("seconds per GFLOP", "seconds per GFLOP",
               edits=(("return 2 * n**3 / seconds / 1e9", "return seconds / (2 * n**3 / 1e9)"),)),
    ),
    "q2": (
        Mutant("made on the CPU, copied", "created the batch on the CPU and copied it",
               edits=(("torch.randn(n, features, device=device)", "torch.randn(n, features).to(device)"),)),
        Mutant("device ignored", "not on the device you were given",
               edits=(("torch.randn(n, features, device=device)", "torch.randn(n, features)"),)),
        Mutant("no keepdim", "pass keepdim=True", edits=((", keepdim=True", ""),)),
        Mutant("summed over the samples", "you summed over the samples (dim=0)", edits=(("dim=1", "dim=0"),)),
        Mutant("uniform features", "torch.rand draws uniform numbers", edits=(("torch.randn", "torch.rand"),)),
        Mutant("mean labels", "y is the mean of the features", edits=(("x.sum(", "x.mean("),)),
        Mutant("labels from another draw", "not from another random draw",
               edits=(("return x, x.sum(", "return x, torch.randn(n, features, device=device).sum("),)),
    ),
    "q3": (
        Mutant("the sum computed locally", "never communicated", source=(
            "%%writefile work/ex00_worker.py\nimport torch\nimport torch.distributed as dist\n\n\n"
            "def sum_of_squares(rank, world_size):\n    return float(sum(r**2 for r in range(world_size)))\n")),
        Mutant("all-reduce of a dummy, local answer", "each rank must put its own rank ** 2", source=(
            "%%writefile work/ex00_worker.py\nimport torch\nimport torch.distributed as dist\n\n\n"
            "def sum_of_squares(rank, world_size):\n    dist.all_reduce(torch.zeros(1))\n"
            "    return float(sum(r**2 for r in range(world_size)))\n")),
        Mutant("dist.reduce to rank 0", "dist.reduce leaves the sum on its dst rank only",
               edits=(("dist.all_reduce(t)", "dist.reduce(t, dst=0)"),)),
        Mutant("rank, not rank ** 2", "its rank, into the all_reduce, not rank ** 2",
               edits=(("float(rank**2)", "float(rank)"),)),
        Mutant("ranks counted from 1", "ranks count from 0", edits=(("float(rank**2)", "float((rank + 1)**2)"),)),
        Mutant("op=MAX", "ReduceOp.SUM", edits=(("dist.all_reduce(t)", "dist.all_reduce(t, op=dist.ReduceOp.MAX)"),)),
        Mutant("returns the tensor", "return a Python float", edits=(("return t.item()", "return t"),)),
        Mutant("an integer tensor", "an int: make the tensor a float tensor", edits=(("float(rank**2)", "rank**2"),)),
        Mutant("the mean, not the sum", "you divided the sum by world_size",
               edits=(("return t.item()", "return t.item() / world_size"),)),
    ),
}
