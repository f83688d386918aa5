"""Exercises 10: how many ranks ZeRO needs, FSDP2's uneven shards, and sharding a model with ``fully_shard``.

- q1 ``min_ranks(n_params, gpu_gib, stage)``: :func:`check_min_ranks` compares it with a search over
  N using :func:`course_utils.costmodel.zero_bytes_per_rank`, on cases where N ranks fit *exactly*,
  where the unsharded part alone fills the GPU, and where no N fits; it names the classic slips
  (floor + 1, GB for GiB, a loop that never ends).
- q2 ``shard_rows``/``padding_rows``: :func:`check_shards` compares them with ``torch.chunk``.
- q3 ``shard_model(model, mesh)`` (``fully_shard`` on every ``Linear`` layer, then on the root) and
  ``local_bytes(model)``: :func:`check_sharding` runs them on gloo ranks with layers whose rows do
  not divide evenly, and checks which modules became ``FSDPModule``, that every rank sharded the
  same way, each parameter's placement and local shard shape (``torch.chunk`` rows of a 1-D mesh of
  all ranks), the all-gathers of one forward (one per layer, of its padded shard), the gradients
  after one backward and the weights after one SGD step against one process, and the byte count.
"""
from __future__ import annotations

import math
import os
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from course_utils.data import linear_regression, shard
from course_utils.models import mlp

from .compare import first_mismatch, mlp_parameters
from .mutant import Mutant
from .ranks import run_ranks
from .student import COURSE_CODE, load_student, student_function, time_limit

# --------------------------------------------------------------------------------------------------
# Calling a student's function in this process
# --------------------------------------------------------------------------------------------------


class _TooSlow(BaseException):
    """Raised inside a student's function that ran past its time limit."""


def _student_line(error: BaseException) -> str:
    """`` (line N of your code: ...)`` for the last frame outside the course's code and the libraries."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if not f.filename.startswith(COURSE_CODE) and "site-packages" not in f.filename
              and "/lib/python" not in f.filename]
    if not frames:
        return ""
    frame = frames[-1]
    return f" (line {frame.lineno} of your code: {(frame.line or '').strip()})"


def call_student(fn: Callable, call: str, *args: Any, limit_s: float = 5.0, expect: type | None = None) -> Any:
    """``fn(*args)``; whatever it raises (but ``expect``) or a run past ``limit_s`` s becomes feedback.

    ``call`` is how the message shows the call, e.g. ``"min_ranks(7e9, 80, 3)"``.
    """
    try:
        with time_limit(limit_s, _TooSlow):
            return fn(*args)
    except _TooSlow:
        raise AssertionError(f"{call} did not return within {limit_s:g} s: a loop that never ends? "
                             "(a loop over N must know when to stop)") from None
    except AssertionError:
        raise
    except Exception as error:   # noqa: BLE001 - a student's function may raise anything
        if expect is not None and isinstance(error, expect):
            raise
        raise AssertionError(f"{call} raised {type(error).__name__}: {error}{_student_line(error)}") from None


# --------------------------------------------------------------------------------------------------
# q1: min_ranks
# --------------------------------------------------------------------------------------------------


def _split_bytes(n_params: float, stage: int) -> tuple[float, float]:
    """(bytes every rank keeps whole, bytes split N ways) of ``n_params`` at ZeRO ``stage``, from the
    cost model: per rank = whole + split / N."""
    from course_utils.costmodel import zero_bytes_per_rank

    one, two = zero_bytes_per_rank(n_params, 1, stage), zero_bytes_per_rank(n_params, 2, stage)
    split = 2 * (one - two)
    return one - split, split


def reference_min_ranks(n_params: float, budget_bytes: float, stage: int) -> int | None:
    """Smallest N with ``zero_bytes_per_rank(n_params, N, stage) <= budget_bytes``; None if no N fits."""
    from course_utils.costmodel import zero_bytes_per_rank

    whole, split = _split_bytes(n_params, stage)
    if whole > budget_bytes or (split > 0 and whole >= budget_bytes):
        return None
    n = 1 if split == 0 else max(1, math.ceil(split / (budget_bytes - whole)))
    while n > 1 and zero_bytes_per_rank(n_params, n - 1, stage) <= budget_bytes:   # float rounding, both ways
        n -= 1
    while zero_bytes_per_rank(n_params, n, stage) > budget_bytes:
        n += 1
    return n


def _min_ranks_hint(got: Any, n_params: float, gpu_gib: float, stage: int, want: int) -> str:
    """Why ``got`` is not ``want``, in the words of the likely mistake."""
    budget = gpu_gib * 2**30
    whole, split = _split_bytes(n_params, stage)
    floor = max(1, math.floor(split / (budget - whole))) if split else 1
    if got == reference_min_ranks(n_params, gpu_gib * 1e9, stage):
        return "that is the answer for GB (10**9 bytes): a GiB is 2**30 bytes."
    if got == want + 1 and got == floor + 1:
        return (f"{want} ranks already fit exactly (the split part divides evenly): you added one too many; "
                "round up with math.ceil instead of adding 1 to a floor.")
    if got == floor and got < want:
        return (f"at N = {got} a rank holds more than {gpu_gib:g} GiB: round the number of ranks up "
                "(math.ceil), never down.")
    if stage != 3 and got == reference_min_ranks(n_params, budget, 3):
        return (f"you split all 16 B/param N ways, as ZeRO-3 does; at stage {stage} every rank keeps "
                f"{whole / n_params:g} B/param whole and only {split / n_params:g} B/param are split.")
    return (f"at stage {stage} a rank keeps {whole / n_params:g} B/param whole and splits {split / n_params:g} "
            "B/param N ways: solve whole + split / N <= budget for the smallest whole N.")


def check_min_ranks(min_ranks: Callable, cases: Sequence[tuple[float, float, int]]) -> None:
    """``min_ranks(n_params, gpu_gib, stage)`` on each case: the smallest N that fits, or ValueError."""
    for n_params, gpu_gib, stage in cases:
        call = f"min_ranks({n_params:g}, {gpu_gib:g}, {stage})"
        want = reference_min_ranks(n_params, gpu_gib * 2**30, stage)
        try:
            got = call_student(min_ranks, call, n_params, gpu_gib, stage, limit_s=2.0, expect=ValueError)
        except ValueError as error:
            if want is None:
                continue
            raise AssertionError(f"{call} raised ValueError ({error}), but {want} rank(s) fit.") from None
        except AssertionError as error:
            if "ZeroDivisionError" in str(error):
                raise AssertionError(f"{error}\nHere the unsharded part alone fills the GPU exactly: no number "
                                     "of ranks fits, raise ValueError.") from None
            raise
        if want is None:
            whole = _split_bytes(n_params, stage)[0] / 2**30
            raise AssertionError(f"{call} returned {got!r}, but no number of ranks fits: every rank keeps "
                                 f"{whole:.4g} GiB unsharded at stage {stage}, which alone fills or exceeds "
                                 f"{gpu_gib:g} GiB. Raise ValueError (and suggest a higher stage).")
        if got is None or got is Ellipsis:
            raise AssertionError(f"{call} returned {got!r}: replace the `...` with your answer.")
        if not isinstance(got, int) or isinstance(got, bool):
            raise AssertionError(f"{call} returned {got!r} ({type(got).__name__}): return an int, a number of ranks.")
        if got != want:
            raise AssertionError(f"{call} returned {got}, expected {want}: "
                                 + _min_ranks_hint(got, n_params, gpu_gib, stage, want))


# --------------------------------------------------------------------------------------------------
# q2: shard_rows, padding_rows
# --------------------------------------------------------------------------------------------------


def reference_shard_rows(rows: int, world_size: int) -> list[int]:
    """Rows per rank as FSDP2 splits dimension 0: ``torch.chunk``, ranks left over get 0."""
    counts = [len(c) for c in torch.arange(rows).chunk(world_size)]
    return counts + [0] * (world_size - len(counts))


def _shard_rows_hint(got: list, rows: int, world_size: int) -> str:
    per_rank = -(-rows // world_size)
    if len(got) != world_size:
        return (f"one count per rank: {world_size} of them. torch.chunk may return fewer chunks than ranks; "
                "the ranks it leaves without rows get 0.")
    if any(isinstance(c, int) and c < 0 for c in got):
        return "a rank holds zero rows when they run out, never a negative number (clamp at 0)."
    if got == [rows // world_size + (r < rows % world_size) for r in range(world_size)]:
        return ("that is np.array_split's split, which spreads the remainder over the first ranks; torch.chunk "
                f"gives every rank ⌈rows/N⌉ = {per_rank} rows until they run out.")
    if got == [rows // world_size] * (world_size - 1) + [rows - rows // world_size * (world_size - 1)]:
        return ("you gave every rank rows // N and the last rank the rest; torch.chunk rounds up: "
                f"⌈rows/N⌉ = {per_rank} rows per rank until they run out.")
    return f"every rank gets ⌈rows/N⌉ = {per_rank} rows until they run out, like torch.chunk."


def check_shards(shard_rows: Callable, padding_rows: Callable, cases: Sequence[tuple[int, int]]) -> None:
    """``shard_rows(rows, world_size)`` and ``padding_rows(rows, world_size)`` against ``torch.chunk``."""
    for rows, world_size in cases:
        want = reference_shard_rows(rows, world_size)
        call = f"shard_rows({rows}, {world_size})"
        got = call_student(shard_rows, call, rows, world_size)
        if got is None or got is Ellipsis:
            raise AssertionError(f"{call} returned {got!r}: replace the `...` with your answer.")
        got = list(got) if isinstance(got, (list, tuple)) else got
        if got != want:
            hint = _shard_rows_hint(got, rows, world_size) if isinstance(got, list) else "return a list of ints."
            raise AssertionError(f"{call} is {got!r}, expected {want}: {hint}")
        call = f"padding_rows({rows}, {world_size})"
        pad = call_student(padding_rows, call, rows, world_size)
        want_pad = world_size * max(want) - rows
        if pad != want_pad:
            if pad == max(want) - want[-1]:
                hint = ("that is the last rank's padding only: every rank short of ⌈rows/N⌉ rows is padded, "
                        "ranks with no rows entirely. Padding = N·⌈rows/N⌉ − rows.")
            elif rows % world_size == 0:
                hint = "the rows divide evenly here: every shard is already ⌈rows/N⌉ rows, so no padding."
            else:
                hint = "every shard is padded to ⌈rows/N⌉ rows: padding = N·⌈rows/N⌉ − rows."
            raise AssertionError(f"{call} is {pad!r}, expected {want_pad}: {hint}")


# --------------------------------------------------------------------------------------------------
# q3: shard_model, local_bytes on gloo ranks
# --------------------------------------------------------------------------------------------------


def _batch(sizes: list[int], n: int, seed: int, rows=slice(None)):
    X, y, _ = linear_regression(n, sizes[0], seed=seed)
    return torch.from_numpy(X[rows]), torch.from_numpy(y[rows]).expand(-1, sizes[-1])


def _local(p: torch.Tensor) -> torch.Tensor:
    return p.to_local() if hasattr(p, "to_local") else p


def _full(p: torch.Tensor) -> torch.Tensor:
    return p.full_tensor() if hasattr(p, "full_tensor") else p


def _raised(what: str, error: BaseException, student_file: str) -> str:
    """``what`` raised ``error``: its message and the lines of the student's file it went through."""
    name = os.path.basename(student_file)
    mine = [f"  {name}, line {f.lineno}, in {f.name}: {(f.line or '').strip()}"
            for f in traceback.extract_tb(error.__traceback__) if os.path.basename(f.filename) == name]
    where = "\nin your code:\n" + "\n".join(mine) if mine else ""
    return f"{what} raised {type(error).__name__}: {str(error)[:300]}{where}"


def _layout(model: nn.Module) -> dict:
    """Which modules are FSDP units, and each parameter's placements, mesh and local shard shape."""
    from torch.distributed.fsdp import FSDPModule

    params = []
    for name, p in model.named_parameters():
        mesh = getattr(p, "device_mesh", None)
        params.append(dict(name=name, placements=[repr(pl) for pl in getattr(p, "placements", ())],
                           mesh=tuple(mesh.shape) if mesh is not None else None,
                           local=tuple(_local(p).shape)))
    return dict(root=isinstance(model, FSDPModule),
                units=[name for name, m in model.named_modules() if isinstance(m, FSDPModule)],
                layers=[isinstance(m, FSDPModule) for m in model if isinstance(m, nn.Linear)], params=params)


def _structure(layout: dict) -> dict:
    """The layout without the local shard shapes (which differ between ranks when rows split unevenly)."""
    return dict(layout, params=[{k: v for k, v in p.items() if k != "local"} for p in layout["params"]])


def sharding_rank(rank: int, world_size: int, student_file: str, *, sizes: list[int], n: int, lr: float,
                  seed: int) -> dict:
    """Harness (one rank): the student's ``shard_model`` and ``local_bytes``, then one SGD step.

    Returns the layout (see :func:`_layout`), every rank's layout (to compare), the all-gathers of one
    forward, the gradients after one backward and the weights after one step (gathered), the byte count.
    """
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from course_utils.commcount import Collectives

    student = load_student(student_file)
    shard_model, local_bytes = student_function(student, "shard_model"), student_function(student, "local_bytes")
    model = mlp(sizes, seed=seed)
    mesh = init_device_mesh("cpu", (world_size,))
    try:
        shard_model(model, mesh)
        error = None
    except Exception as e:   # noqa: BLE001 - said as feedback, after every rank has reported
        error = _raised("shard_model", e, student_file)
    result = dict(error=error, layout=_layout(model))
    layouts = [None] * world_size
    dist.all_gather_object(layouts, (error is None, _structure(result["layout"])))
    result["layouts"] = layouts
    if any(not ok for ok, _ in layouts) or any(lay != layouts[0][1] for _, lay in layouts):
        return result   # a rank failed, or the ranks sharded differently: a forward would hang
    try:
        result["counted"] = local_bytes(model)
    except Exception as e:   # noqa: BLE001
        result["counted_error"] = _raised("local_bytes", e, student_file)
    result["held"] = sum(_local(p).numel() * p.element_size() for p in model.parameters())
    x, y = _batch(sizes, n, seed, shard(n, rank, world_size))
    with Collectives() as seen:
        out = model(x)
    result["forward"] = [(c.kind, c.input_bytes, c.group_size) for c in seen.calls]
    nn.functional.mse_loss(out, y).backward()
    result["grads"] = [None if p.grad is None else _full(p.grad).detach().clone() for p in model.parameters()]
    torch.optim.SGD(model.parameters(), lr=lr).step()
    result["weights"] = [_full(p).detach().clone() for p in model.parameters()]
    return result


def reference_step(sizes: list[int], n: int, lr: float, seed: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(gradients, weights after one SGD step) on the whole batch in one process."""
    with torch.random.fork_rng():
        model = mlp(sizes, seed=seed)
    x, y = _batch(sizes, n, seed)
    nn.functional.mse_loss(model(x), y).backward()
    grads = [p.grad.detach().clone() for p in model.parameters()]
    torch.optim.SGD(model.parameters(), lr=lr).step()
    return grads, [p.detach() for p in model.parameters()]


def _check_units(layout: dict) -> None:
    if not layout["root"] and not any(layout["layers"]):
        raise AssertionError("no module was sharded: shard_model still does nothing. Call fully_shard(layer, "
                             "mesh=mesh) on every Linear layer, then fully_shard(model, mesh=mesh).")
    if not all(layout["layers"]):
        raise AssertionError(f"only {sum(layout['layers'])} of {len(layout['layers'])} Linear layers are FSDP "
                             "modules: wrap every layer before the root. A layer of its own is gathered only "
                             "while it runs; wrapped only through the root, the whole model is gathered at once.")
    if not layout["root"]:
        raise AssertionError("the layers are sharded but the model itself is not: finish with "
                             "fully_shard(model, mesh=mesh), which drives the forward and owns any parameter "
                             "outside the layers.")


def _check_shards(layout: dict, rank: int, world_size: int, full: dict) -> None:
    """Every parameter: a DTensor sharded on dim 0 of a 1-D mesh of all ranks, ``torch.chunk`` rows here.

    ``full``: parameter name -> the unsharded parameter (on the meta device)."""
    for p in layout["params"]:
        shape = tuple(full[p["name"]].shape)
        if p["mesh"] is None:
            raise AssertionError(f"`{p['name']}` is still a plain tensor, not a DTensor: fully_shard never took "
                                 "it over.")
        if p["mesh"] != (world_size,) or p["placements"] != ["Shard(dim=0)"]:
            raise AssertionError(f"`{p['name']}` lives on a mesh of shape {p['mesh']} with placements "
                                 f"{p['placements']}: that is the wrong mesh. Shard over the 1-D mesh of all "
                                 f"{world_size} ranks you are given (fully_shard(..., mesh=mesh)), so that each "
                                 "rank holds 1/N of every parameter.")
        want = (reference_shard_rows(shape[0], world_size)[rank],) + shape[1:]
        if p["local"] != want:
            raise AssertionError(f"rank {rank} holds a shard of `{p['name']}` of shape {p['local']}; sharding "
                                 f"{shape} over {world_size} ranks like torch.chunk gives it {want}.")


def _check_forward(calls: list, sizes: list[int], world_size: int) -> None:
    """One forward: one all-gather per Linear layer, of its padded shard (⌈rows/N⌉ rows per parameter)."""
    gathers = [c for c in calls if c[0] == "all_gather"]
    want = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        rows = -(-b // world_size)
        want.append(4 * (rows * a + rows))
    got = [c[1] for c in gathers]
    if got != want or any(c[2] != world_size for c in gathers):
        raise AssertionError(f"one forward ran {len(gathers)} all-gather(s) of {got} bytes on groups of "
                             f"{sorted({c[2] for c in gathers})} ranks; FSDP with one unit per Linear layer runs "
                             f"{len(want)}, one per layer just before it runs ({want} bytes: each layer's padded "
                             "shards). Wrap each layer, then the root, all over the whole mesh.")


def check_sharding(student_file: str, *, world_size: int = 2, sizes: tuple[int, ...] = (6, 15, 10, 3), n: int = 8,
                   lr: float = 0.1, seed: int = 0) -> None:
    """Run the student's ``shard_model``/``local_bytes`` on ``world_size`` ranks; fail with the likely cause.

    ``sizes``: the MLP's widths; choose some not divisible by ``world_size`` (uneven shards). ``n``:
    samples in the batch, a multiple of ``world_size`` (every rank gets as many).
    """
    sizes = list(sizes)
    results = run_ranks(sharding_rank, student_file, world_size, sizes=sizes, n=n, lr=lr, seed=seed)
    full = mlp_parameters(sizes)
    for rank, r in enumerate(results):
        if r["error"]:
            hint = ""
            if r["layout"]["root"] and not any(r["layout"]["layers"]):
                hint = ("\nfully_shard(model) was called before the layers: the root then owns every parameter. "
                        "Wrap the layers first, then the root.")
            raise AssertionError(f"rank {rank}: {r['error']}{hint}")
    for rank, (_, layout) in enumerate(results[0]["layouts"]):
        if layout != results[0]["layouts"][0][1]:
            raise AssertionError(f"rank {rank} sharded the model differently from rank 0 (FSDP units "
                                 f"{layout['units']} vs {results[0]['layouts'][0][1]['units']}): every rank must "
                                 "call fully_shard on the same modules (no `if rank == 0:`), or the all-gathers "
                                 "of the forward never match.")
    _check_units(results[0]["layout"])
    for rank, r in enumerate(results):
        _check_shards(r["layout"], rank, world_size, dict(full))
    _check_forward(results[0]["forward"], sizes, world_size)
    names = [name for name, _ in full]
    grads, weights = reference_step(sizes, n, lr, seed)
    mismatch = first_mismatch(results[0]["grads"], grads, names, atol=1e-6, rtol=1e-5)
    if mismatch is not None:
        raise AssertionError(f"after one backward the gradient of `{mismatch[0]}` differs from one process's "
                             f"by {mismatch[1]:.3g}: shard_model should only apply fully_shard, nothing else.")
    mismatch = first_mismatch(results[0]["weights"], weights, names, atol=1e-6, rtol=1e-5)
    if mismatch is not None:
        raise AssertionError(f"after one step the gathered `{mismatch[0]}` differs from one process's step by "
                             f"{mismatch[1]:.3g}: shard_model should only apply fully_shard, nothing else.")
    _check_bytes(results, full, world_size)


def _check_bytes(results: list[dict], full: list, world_size: int) -> None:
    """Each rank's ``local_bytes`` against the bytes it holds; ``full``: (name, unsharded parameter)."""
    full_bytes = sum(p.numel() * p.element_size() for _, p in full)
    for rank, result in enumerate(results):
        if "counted_error" in result:
            raise AssertionError(f"rank {rank}: {result['counted_error']}")
        counted, held = result["counted"], result["held"]
        if counted == held and isinstance(counted, int):
            continue
        shapes = [tuple(p.shape) for _, p in full]
        padded = sum(4 * -(-s[0] // world_size) * math.prod(s[1:]) for s in shapes)
        divided = sum(4 * (math.prod(s) // world_size) for s in shapes)
        weights_only = sum(4 * math.prod(p["local"]) for p in result["layout"]["params"]
                           if p["name"].endswith("weight"))
        if counted == held:
            hint = f"return an int, not a {type(counted).__name__}."
        elif counted == full_bytes:
            hint = ("that is the whole model: a sharded parameter is a DTensor, whose numel() is its global "
                    "size. Count p.to_local(), the shard this rank holds.")
        elif counted * 4 == held:
            hint = "that is a count of numbers, not bytes: multiply each shard's numel() by p.element_size()."
        elif counted == padded and padded != held:
            hint = ("that counts padded shards of ⌈rows/N⌉ rows (the storage FSDP pads for its collectives); "
                    "with uneven rows this rank holds fewer. Count p.to_local().numel() * p.element_size().")
        elif counted == divided:
            hint = ("you divided each parameter's size by the world size: rows split unevenly (torch.chunk), "
                    "so ranks hold different amounts. Count p.to_local(), this rank's real shard.")
        elif counted == weights_only:
            hint = "that counts the weights only: the biases are parameters too; sum over model.parameters()."
        else:
            hint = "count every parameter's local shard, p.to_local().numel() * p.element_size()."
        raise AssertionError(f"rank {rank}: local_bytes says {counted!r}, but the rank holds {held} bytes of "
                             f"parameters (the unsharded model has {full_bytes}); {hint}")


# --------------------------------------------------------------------------------------------------
# Planted wrong answers (tools/mutants.py)
# --------------------------------------------------------------------------------------------------

_CEIL = "    return max(1, math.ceil(sharded / (budget - replicated)))\n"
_LAYERS = ("    for layer in model:\n        if isinstance(layer, nn.Linear):\n"
           "            fully_shard(layer, mesh=mesh)   # gathered only while this layer runs\n")
_ROOT = "    fully_shard(model, mesh=mesh)\n"
_COUNT = "    return sum(p.to_local().numel() * p.element_size() for p in model.parameters())\n"

MUTANTS = {
    "q1": (
        Mutant("floor + 1 instead of ceil", "you added one too many",
               edits=((_CEIL, "    return int(sharded // (budget - replicated)) + 1\n"),)),
        Mutant("floor instead of ceil", "never down",
               edits=((_CEIL, "    return max(1, math.floor(sharded / (budget - replicated)))\n"),)),
        Mutant("GB instead of GiB", "a GiB is 2**30 bytes", edits=(("gpu_gib * 2**30", "gpu_gib * 1e9"),)),
        Mutant("everything split at every stage", "you split all 16 B/param N ways",
               edits=(("{0: 16, 1: 8, 2: 4, 3: 0}[stage]", "0"),)),
        Mutant("stage 1 splits the gradients too", "at stage 1 a rank keeps 8 B/param whole",
               edits=(("{0: 16, 1: 8, 2: 4, 3: 0}", "{0: 16, 1: 4, 2: 4, 3: 0}"),)),
        Mutant("never-fits test misses the exact fill", "raised ZeroDivisionError",
               edits=((" or (sharded > 0 and replicated == budget)", ""),)),
        Mutant("a loop over N with no end", "a loop that never ends", source=(
            "def min_ranks(n_params, gpu_gib, stage):\n    n = 1\n"
            "    while costmodel.zero_bytes_per_rank(n_params, n, stage) > gpu_gib * 2**30:\n        n += 1\n"
            "    return n\n")),
        Mutant("returns None instead of raising", "Raise ValueError",
               edits=(("        raise ValueError(", "        return None\n        raise ValueError("),)),
    ),
    "q2": (
        Mutant("np.array_split's split", "np.array_split's split", edits=((
            "    per_rank = math.ceil(rows / world_size)\n"
            "    return [max(0, min(per_rank, rows - r * per_rank)) for r in range(world_size)]\n",
            "    return [rows // world_size + (r < rows % world_size) for r in range(world_size)]\n"),)),
        Mutant("rows // N, the rest to the last rank", "the last rank the rest", edits=((
            "    per_rank = math.ceil(rows / world_size)\n"
            "    return [max(0, min(per_rank, rows - r * per_rank)) for r in range(world_size)]\n",
            "    per_rank = rows // world_size\n"
            "    return [per_rank] * (world_size - 1) + [rows - per_rank * (world_size - 1)]\n"),)),
        Mutant("negative rows at the end", "never a negative number",
               edits=(("max(0, min(per_rank, rows - r * per_rank))", "min(per_rank, rows - r * per_rank)"),)),
        Mutant("torch.chunk without the empty ranks", "the ranks it leaves without rows get 0", edits=((
            "    per_rank = math.ceil(rows / world_size)\n"
            "    return [max(0, min(per_rank, rows - r * per_rank)) for r in range(world_size)]\n",
            "    return [len(c) for c in torch.arange(rows).chunk(world_size)]\n"),)),
        Mutant("padding of the last rank only", "the last rank's padding only",
               edits=(("    return math.ceil(rows / world_size) * world_size - rows\n",
                       "    return math.ceil(rows / world_size) - shard_rows(rows, world_size)[-1]\n"),)),
        Mutant("padding when rows divide evenly", "no padding",
               edits=(("    return math.ceil(rows / world_size) * world_size - rows\n",
                       "    return world_size - rows % world_size\n"),)),
    ),
    "q3": (
        Mutant("only the root sharded", "wrap every layer before the root",
               edits=((_LAYERS, ""),)),
        Mutant("no root call", "the model itself is not", edits=((_ROOT, ""),)),
        Mutant("root before the layers", "Wrap the layers first, then the root",
               edits=((_ROOT, ""), (_LAYERS, _ROOT + _LAYERS))),
        Mutant("a 2-D (HSDP) mesh", "that is the wrong mesh", edits=((
            "def shard_model(model, mesh):\n",
            "def shard_model(model, mesh):\n    from torch.distributed.device_mesh import init_device_mesh\n"
            "    mesh = init_device_mesh('cpu', (mesh.size(), 1), mesh_dim_names=('replicate', 'shard'))\n"),)),
        Mutant("sharded on rank 0 only", "no `if rank == 0:`", edits=((
            _LAYERS + _ROOT,
            "    import torch.distributed as dist\n    if dist.get_rank() == 0:\n"
            "        for layer in model:\n            if isinstance(layer, nn.Linear):\n"
            "                fully_shard(layer, mesh=mesh)\n        fully_shard(model, mesh=mesh)\n"),)),
        Mutant("global numel", "whose numel() is its global size",
               edits=(("p.to_local().numel()", "p.numel()"),)),
        Mutant("numbers, not bytes", "a count of numbers, not bytes", edits=((" * p.element_size()", ""),)),
        Mutant("full size divided by the world size", "you divided each parameter's size by the world size",
               edits=((_COUNT, "    return sum(p.numel() // p.device_mesh.size() * p.element_size() "
                               "for p in model.parameters())\n"),)),
        Mutant("padded storage", "that counts padded shards",
               edits=(("p.to_local().numel() * p.element_size()", "p.to_local().untyped_storage().nbytes()"),)),
        Mutant("weights only", "the biases are parameters too", edits=((
            _COUNT, "    return sum(m.weight.to_local().numel() * m.weight.element_size() for m in model\n"
                    "               if isinstance(m, nn.Linear))\n"),)),
    ),
}
