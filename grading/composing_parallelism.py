"""Exercises 16: composing parallelism — a planner question, a count, and a 2-D layout written by hand.

Q1, ``pick(ranked, limit_gb)``: the fastest layout of a planner's list that fits a memory limit
(:func:`check_pick`; each limit is checked again at the boundary, a limit equal to the chosen
layout's own memory). Q2, ``tp_all_reduces(n_layer, pp, microbatches, recompute)``: the all-reduces
one tensor-parallel rank issues per step, compared with the count measured on 2 gloo ranks
(:func:`check_tp_all_reduces`). Q3, ``build_2d(model, mesh)`` in a file: tensor parallel over
``mesh["tp"]`` and FSDP2 over ``mesh["dp"]``, graded on 4 gloo ranks against the library's own 2-D
layout (``composed.parallelize``: FSDP units, the mesh and placements of every parameter, its local
shard, the collectives of a step by mesh dimension) and against one process (the gradients after a
backward, the parameters after a few SGD steps) (:func:`check_build_2d`).

``MUTANTS`` holds the planted wrong answers each grader must give 0, with the words of its feedback.
"""
from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence

import torch

from .mutant import Mutant
from .ranks import run_ranks
from .student import load_student, student_function

# ---------------------------------------------------------------- Q1: a layout under a memory limit


def _fits(ranked: Sequence, limit_gb: float, strict: bool = False) -> list:
    """The predictions that can run and need at most (``strict``: less than) ``limit_gb`` per GPU."""
    return [r for r in ranked if r.reason is None and (r.memory_gb < limit_gb if strict else r.memory_gb <= limit_gb)]


def _fastest(predictions: Sequence):
    return max(predictions, key=lambda r: r.mfu) if predictions else None


def _call_pick(pick: Callable, ranked: Sequence, limit_gb: float):
    try:
        return pick(list(ranked), limit_gb)
    except Exception as error:   # noqa: BLE001 - the student's error, said in their terms
        hint = ""
        if isinstance(error, ValueError) and "empty" in str(error):
            hint = " No layout fits this limit: then return None (max() of an empty list raises)."
        raise AssertionError(f"pick(ranked, {limit_gb:.6g}) raised {type(error).__name__}: {error}.{hint}") from None


def _judge_pick(got, ranked: Sequence, limit_gb: float) -> None:
    """Raise the feedback for ``got``, the answer to ``pick(ranked, limit_gb)``; pass if it is right."""
    from course_utils import planner

    fits = _fits(ranked, limit_gb)
    want = _fastest(fits)
    limit = f"{limit_gb:.6g} GB"
    exact = [r for r in fits if r.memory_gb == limit_gb]
    if got is Ellipsis:
        raise AssertionError("pick returned `...`: return one of the planner's predictions (or None).")
    if got is None:
        if want is None:
            return
        hint = ""
        if exact and not _fits(ranked, limit_gb, strict=True):
            hint = f" Each needs exactly {limit}: a layout that needs exactly the limit fits (<=, not <)."
        raise AssertionError(f"pick returned None, but {len(fits)} layouts can run within {limit}, e.g. "
                             f"{want.layout} with {want.recipe} needs {want.memory_gb:.1f} GB (memory_gb is in GB; "
                             f".memory holds bytes by part).{hint}")
    if isinstance(got, planner.Layout):
        raise AssertionError("pick returned a planner.Layout (a prediction's .layout): return the Prediction "
                             "itself, the element of `ranked`, so that its memory and MFU come with it.")
    if not any(got is r for r in ranked):
        raise AssertionError(f"pick returned {type(got).__name__} {got!r:.120}: return one of the predictions "
                             f"in `ranked` (or None).")
    if got.reason is not None:
        raise AssertionError(f"that layout cannot run: {got.reason}. Keep only predictions whose reason is None.")
    if got.memory_gb > limit_gb:
        raise AssertionError(f"that layout needs {got.memory_gb:.1f} GB per GPU, over the {limit} limit: "
                             f"filter on memory_gb too.")
    if got.mfu >= want.mfu:
        return
    lead = (f"with a limit of {limit}, MFU {want.mfu:.1%} ({want.layout}, {want.recipe}) fits and beats your "
            f"{got.mfu:.1%}: ")
    below = _fastest(_fits(ranked, limit_gb, strict=True))   # what `memory_gb < limit_gb` would pick
    if any(r.mfu > got.mfu for r in exact) and below is not None and got.mfu >= below.mfu:
        raise AssertionError(lead + f"a layout that needs exactly {limit} fits: compare memory_gb <= limit_gb, not <.")
    if got.mfu == min(r.mfu for r in fits):
        raise AssertionError(lead + "you took the slowest layout that fits: the highest mfu, not the lowest.")
    if got.memory_gb == min(r.memory_gb for r in fits):
        raise AssertionError(lead + "you picked the layout that needs the least memory; among those that fit, "
                             "take the fastest (the highest mfu).")
    raise AssertionError(lead + "the list is sorted by MFU over *all* layouts; after filtering, take the highest MFU.")


def check_pick(pick: Callable, ranked: Sequence, limit_gb: float) -> None:
    """``pick(ranked, limit_gb)`` must return a prediction of ``ranked`` with the highest MFU among those
    that can run (``reason`` None) and need at most ``limit_gb`` GB per GPU, or None if there is none.

    Checked at ``limit_gb`` and again at the boundary: a limit equal to the memory of the cheapest of
    the fastest layouts that fit, which must still fit."""
    for limit in _limits(ranked, limit_gb):
        _judge_pick(_call_pick(pick, ranked, limit), ranked, limit)


def _limits(ranked: Sequence, limit_gb: float) -> list[float]:
    """``limit_gb``, then the boundary limit for it (if any layout fits)."""
    want = _fastest(_fits(ranked, limit_gb))
    if want is None:
        return [limit_gb]
    return [limit_gb, min(r.memory_gb for r in _fits(ranked, limit_gb) if r.mfu == want.mfu)]


# ---------------------------------------------------------------- Q2: all-reduces of a tensor-parallel rank


class _Recomputed(torch.nn.Module):
    """A block under full activation recomputation: keeps its input, reruns its whole forward in the
    backward, as Megatron-LM's full recomputation does (PyTorch's checkpoint would otherwise stop the
    rerun early, once it has the tensors the backward needs, skipping the block's last all-reduce)."""

    def __init__(self, block: torch.nn.Module):
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

        with set_checkpoint_early_stop(False):
            return checkpoint(self.block, x, use_reentrant=False)


def count_tp_all_reduces_rank(rank: int, world_size: int, configs: list) -> list:
    """Harness (one of 2 tensor-parallel ranks): for each ``(n_layer, pp, microbatches, recompute)``,
    the first pipeline stage of a small GPT split over the 2 ranks (``parallelize_gpt``), each
    microbatch (1 sequence of 4 tokens) run forward and backward through it, recomputed per block if
    ``recompute``; returns the all-reduces counted on the tensor-parallel group, or the error's text
    (``"ValueError: ..."``) for a configuration that cannot be built."""
    from course_utils import composed
    from course_utils.commcount import Collectives
    from course_utils.gpt import GPT, GPTConfig
    from course_utils.tensor_parallel import parallelize_gpt

    mesh = composed.make_mesh(composed.Layout(tp=world_size))
    counts = []
    for n_layer, pp, microbatches, recompute in configs:
        config = GPTConfig(vocab_size=8, block_size=4, n_layer=n_layer, n_head=2, d_model=8)
        try:
            stage = composed.pipeline_stage(GPT(config, seed=0), 0, pp)
        except ValueError as error:
            counts.append(f"ValueError: {error}")
            continue
        parallelize_gpt(stage, mesh["tp"])
        if recompute:
            for name in list(stage.blocks):
                stage.blocks[name] = _Recomputed(stage.blocks[name])
        tokens = torch.randint(8, (microbatches, 1, 4), generator=torch.Generator().manual_seed(n_layer))
        with Collectives() as seen:
            for x in tokens:
                stage(x).square().mean().backward()
        group = tuple(mesh["tp"].mesh.tolist())
        counts.append(sum(call.kind == "all_reduce" and call.group == group for call in seen.calls))
    return counts


_MEASURED: dict[tuple, list] = {}


def measured_tp_all_reduces(configs: Sequence[tuple]) -> list:
    """:func:`count_tp_all_reduces_rank` on 2 gloo ranks (rank 0's counts; the ranks must agree),
    remembered per list of configurations (one launch per list in a process)."""
    from course_utils import launch

    key = tuple(tuple(c) for c in configs)
    if key not in _MEASURED:
        results = launch.run(count_tp_all_reduces_rank, 2, args=(list(key),), backend="gloo", timeout_s=90,
                             output="none")  # graders run on CPU ranks, whatever the machine has
        if results[0] != results[1]:
            raise RuntimeError(f"the two tensor-parallel ranks counted differently: {results}")
        _MEASURED[key] = results[0]
    return _MEASURED[key]


# Wrong ways to count, as formulas in (n_layer, pp, microbatches, recompute) -> the hint that names each
_COUNT_MISTAKES = (
    (lambda n, p, m, r: (2 + 2 * r) * (n // p) * m,
     "that counts the forward only: the backward all-reduces the gradients of the attention's and the MLP's "
     "inputs, 2 more per block"),
    (lambda n, p, m, r: (4 + 2 * r) * n * m, "a pipeline rank holds n_layer / pp blocks, not all of them"),
    (lambda n, p, m, r: (4 + 2 * r) * (n // p),
     "tensor parallelism runs for every microbatch: multiply by their number"),
    (lambda n, p, m, r: 4 * (n // p) * m,
     "with recomputation the backward reruns each block's forward first, and with it the forward's 2 "
     "all-reduces: 6 per block and microbatch"),
    (lambda n, p, m, r: (4 + 4 * r) * (n // p) * m,
     "recomputation reruns the forward only (its 2 all-reduces), not the backward: 6 per block, not 8"),
    (lambda n, p, m, r: (6 + 2 * r) * (n // p) * m,
     "q, k and v share one input: the backward all-reduces its gradient once, not once per projection"),
    (lambda n, p, m, r: 6 * (n // p) * m, "without recomputation nothing is rerun: 4 per block and microbatch"),
    (lambda n, p, m, r: (4 * m + 2 * r) * (n // p),
     "recomputation happens in every microbatch's backward: 2 more per block and microbatch"),
)


def _call_count(fn: Callable, config: tuple):
    n_layer, pp, microbatches, recompute = config
    try:
        return fn(n_layer, pp, microbatches, recompute)
    except ValueError:
        return ValueError
    except Exception as error:   # noqa: BLE001 - the student's error, said in their terms
        raise AssertionError(f"tp_all_reduces{config} raised {type(error).__name__}: {error}") from None


def check_tp_all_reduces(tp_all_reduces: Callable, configs: Sequence[tuple]) -> None:
    """``tp_all_reduces(n_layer, pp, microbatches, recompute)`` must give, for each configuration, the
    all-reduces one tensor-parallel rank of the first pipeline stage issues per step, as counted on 2
    gloo ranks (:func:`measured_tp_all_reduces`); for an ``n_layer`` that ``pp`` does not divide it must
    raise ValueError."""
    got = [_call_count(tp_all_reduces, tuple(c)) for c in configs]
    if all(g is Ellipsis or g is None for g in got):
        raise AssertionError("tp_all_reduces returned nothing: return a number.")
    want = measured_tp_all_reduces(configs)
    for config, g, w in zip(configs, got, want):
        n_layer, pp = config[:2]
        if isinstance(w, str) and g is not ValueError:
            raise AssertionError(f"tp_all_reduces{tuple(config)} returned {g!r}, but {n_layer} blocks do not split "
                                 f"into {pp} equal pipeline stages: raise ValueError for such a layout.")
        if not isinstance(w, str) and g is ValueError:
            raise AssertionError(f"tp_all_reduces{tuple(config)} raised ValueError, but {n_layer} blocks split into "
                                 f"{pp} stages of {n_layer // pp}: return the count.")
        if not isinstance(w, str) and (isinstance(g, bool) or not isinstance(g, numbers.Real)):
            raise AssertionError(f"tp_all_reduces{tuple(config)} returned {g!r}: return a number.")
    valid = [(tuple(c), g, w) for c, g, w in zip(configs, got, want) if not isinstance(w, str)]
    wrong = [(c, g, w) for c, g, w in valid if g != w]
    if not wrong:
        return
    config, g, w = wrong[0]
    hint = ("per block and microbatch: 2 in the forward (after attn.proj and mlp.proj), 2 in the backward (the "
            "gradients of the attention's and the MLP's inputs), and with recomputation the forward's 2 again")
    for mistake, words in _COUNT_MISTAKES:
        if all(g == mistake(*c) for c, g, _ in valid):
            hint = words
            break
    raise AssertionError(f"tp_all_reduces{config} = {g}, but 2 tensor-parallel ranks counted {w} all-reduces "
                         f"per step: {hint}.")


# ---------------------------------------------------------------- Q3: FSDP × tensor parallel by hand


def _config(n_layer: int):
    from course_utils.gpt import GPTConfig

    return GPTConfig(vocab_size=16, block_size=8, n_layer=n_layer, n_head=4, d_model=16)


def _batches(config, steps: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    shape = (8, config.block_size)
    return [(torch.randint(config.vocab_size, shape, generator=generator),
             torch.randint(config.vocab_size, shape, generator=generator)) for _ in range(steps)]


def _loss(logits, targets):
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


def _layout_of(model: torch.nn.Module) -> dict:
    """How ``model`` is laid out on this rank: FSDP units (root, each block), and per parameter
    ``(mesh dimension names, mesh ranks, placements, local shape)``, or ``None`` for a plain tensor."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    params = {}
    for name, p in model.named_parameters():
        if isinstance(p, DTensor):
            mesh = p.device_mesh
            params[name] = (tuple(mesh.mesh_dim_names or ()), tuple(mesh.mesh.flatten().tolist()),
                            tuple(str(x) for x in p.placements), tuple(p.to_local().shape))
        else:
            params[name] = None
    blocks = getattr(model, "blocks", [])
    return {"root": isinstance(model, FSDPModule), "blocks": [isinstance(b, FSDPModule) for b in blocks],
            "params": params}


def _talk(calls: list, mesh) -> dict:
    """The collectives of one step by mesh dimension: ``{(dim, kind): sorted input sizes in bytes}``."""
    from course_utils import composed

    out: dict = {}
    for dim, group in composed.by_dimension(calls, mesh).items():
        for call in group:
            out.setdefault((dim, call.kind), []).append(call.input_bytes)
    return {key: sorted(sizes) for key, sizes in out.items()}


def _full(tensor):
    from torch.distributed.tensor import DTensor

    if tensor is None:
        return None
    return (tensor.full_tensor() if isinstance(tensor, DTensor) else tensor).detach().clone()


def build_2d_rank(rank: int, world_size: int, student_file: str, *, steps: int, seed: int, n_layer: int = 2):
    """Harness (one of 4 ranks): the student's ``build_2d`` on a (pp 1, dp 2, tp 2) mesh, and the library's
    2-D layout (``composed.parallelize``) of the same GPT for reference. Records each one's layout and
    the collectives of its first forward and backward on this data-parallel rank's half of the batch;
    then trains the student's with SGD. Returns ``None``/``...`` if ``build_2d`` returned that, else a
    dict: ``layout``/``reference`` (:func:`_layout_of`), ``talk``/``reference_talk`` (:func:`_talk`),
    ``grads`` (full gradients after the first backward) and ``params`` (full parameters after
    ``steps`` steps), by parameter name."""
    from course_utils import composed
    from course_utils.commcount import Collectives
    from course_utils.gpt import GPT

    build_2d = student_function(load_student(student_file), "build_2d")
    config = _config(n_layer)
    layout = composed.Layout(dp=2, tp=2)
    mesh = composed.make_mesh(layout)
    dp_rank = layout.coords(rank)["dp"]
    batches = [(composed.batch_slice(x, dp_rank, 2), composed.batch_slice(y, dp_rank, 2))
               for x, y in _batches(config, steps, seed)]

    reference = composed.parallelize(GPT(config, seed=seed), layout, mesh, rank).parts[0]
    with Collectives() as seen:
        _loss(reference(batches[0][0]), batches[0][1]).backward()
    out = {"reference": _layout_of(reference), "reference_talk": _talk(seen.calls, mesh)}
    del reference

    model = build_2d(GPT(config, seed=seed), mesh)
    if model is None or model is Ellipsis:
        return model
    if not isinstance(model, GPT):
        raise AssertionError(f"build_2d returned {type(model).__name__}, not the model: split and shard the GPT "
                             f"you were given in place, and return it.")
    out["layout"] = _layout_of(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for step, (x, y) in enumerate(batches):
        with Collectives() as seen:
            _loss(model(x), y).backward()
        if step == 0:
            out["talk"] = _talk(seen.calls, mesh)
            out["grads"] = {n: _full(p.grad) for n, p in model.named_parameters()}
        optimizer.step()
        optimizer.zero_grad()
    out["params"] = {n: _full(p) for n, p in model.named_parameters()}
    return out


def _single(steps: int, seed: int, n_layer: int) -> tuple[dict, dict]:
    """One process on the whole batch: (gradients after the first backward, parameters after ``steps``)."""
    from course_utils.gpt import GPT

    config = _config(n_layer)
    model = GPT(config, seed=seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    grads = {}
    for step, (x, y) in enumerate(_batches(config, steps, seed)):
        _loss(model(x), y).backward()
        if step == 0:
            grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        optimizer.step()
        optimizer.zero_grad()
    return grads, {n: p.detach() for n, p in model.named_parameters()}


ORDER_HINT = ("Apply tensor parallelism first (parallelize_gpt over mesh['tp']), then fully_shard each block and "
              "the model over mesh['dp']: FSDP2 shards what tensor parallelism left on the rank.")


def _sharded_hint(message: str) -> str:
    if "DTensor" in message and any(w in message for w in ("mixed", "Shard", "different device mesh")):
        return "\n" + ORDER_HINT
    if "overlapping meshes" in message:
        return ("\nFSDP's mesh overlaps the tensor-parallel one: shard over mesh['dp'] only (the 2 ranks that read "
                "different data), never over all 4 ranks.")
    return ""


def _is_tensor_parallel(name: str) -> bool:
    """Whether Megatron's plan splits parameter ``name`` over the tensor-parallel ranks."""
    return ".attn." in name or ".mlp." in name


def _check_units(rank: int, got: dict) -> None:
    if not got["root"] and not any(got["blocks"]):
        raise AssertionError(f"rank {rank}: no FSDP unit at all: each data-parallel rank trains on its own half and "
                             f"nothing averaged the gradients: fully_shard the blocks and the model over mesh['dp'].")
    if not all(got["blocks"]):
        which = [i for i, unit in enumerate(got["blocks"]) if not unit]
        raise AssertionError(f"rank {rank}: blocks {which} are not FSDP units (fully_shard on the model only makes "
                             f"one FSDP unit for the whole model, gathered all at once): fully_shard each block "
                             f"first, so that only one block's full weights exist at a time, then the model.")
    if not got["root"]:
        raise AssertionError(f"rank {rank}: the model itself is not an FSDP unit, so the embeddings, final LayerNorm "
                             f"and head are neither sharded nor averaged: fully_shard the model too, after its blocks.")


def _check_parameter(rank: int, name: str, got, want) -> None:
    """Compare one parameter's (dims, mesh ranks, placements, local shape) with the reference's."""
    if got == want:
        return
    where = f"rank {rank}: {name}"
    if got is None:
        raise AssertionError(f"{where} is a plain tensor: nothing sharded it (FSDP over mesh['dp'] must cover every "
                             f"parameter: fully_shard the blocks, then the model).")
    dims, ranks, placements, shape = got
    if len(ranks) > 2 ** len(dims) or any(d not in ("dp", "tp") for d in dims):   # a mesh of 4 in one dimension
        raise AssertionError(f"{where} is sharded over all {len(ranks)} ranks ({dims or 'a flattened mesh'}): "
                             f"FSDP over all 4 ranks mixes the tensor-parallel pair, which reads the same data, "
                             f"into data parallelism; split over mesh['tp'] with parallelize_gpt, then fully_shard "
                             f"over mesh['dp'] only.")
    if dims[:1] == ("tp",) and "dp" in dims or dims == ("tp",) and want[0] == ("dp",):
        raise AssertionError(f"{where} lives on mesh {dims}: the mesh dimensions are swapped: the two ranks of "
                             f"mesh['tp'] read the same data and split the heads between them; the two of "
                             f"mesh['dp'] read different halves and must average (FSDP).")
    if "tp" in want[0] and "tp" not in dims:
        raise AssertionError(f"{where} lives on mesh {dims} only: you skipped tensor parallelism — every rank computes "
                             f"all heads of the block. Split the blocks over mesh['tp'] with "
                             f"parallelize_gpt(model, mesh['tp']) before fully_shard.")
    if "tp" in dims and "tp" not in want[0]:
        raise AssertionError(f"{where} is split over mesh['tp'], but the 2-D layout leaves it whole on each "
                             f"tensor-parallel rank: split only the blocks, parallelize_gpt(model, mesh['tp']) with "
                             f"sequence_parallel left False.")
    if "dp" not in dims:
        raise AssertionError(f"{where} lives on mesh {dims}, not sharded over mesh['dp']: nothing averaged the "
                             f"gradients; fully_shard the blocks and the model over mesh['dp'].")
    raise AssertionError(f"{where} is laid out as {placements} on mesh {dims} (local shard {shape}); the 2-D layout "
                         f"has {want[2]} on {want[0]} (local shard {want[3]}): FSDP Shard(0) over dp, and over tp "
                         f"Megatron's split (q, k, v and fc by output features, the projections by input features).")


def _describe(talk: dict) -> str:
    return ", ".join(f"{len(sizes)} {kind} over {dim}" for (dim, kind), sizes in sorted(talk.items())) or "none"


def _talk_matches(got: dict, want: dict) -> bool:
    """The same collectives, except that all-gathers may be fewer: whether a unit is resharded after
    the forward (and gathered again for the backward) is a memory-for-traffic choice, not an error —
    but every unit's shards must be all-gathered over dp, in the reference's sizes."""
    gather = ("dp", "all_gather")
    if {k: v for k, v in got.items() if k != gather} != {k: v for k, v in want.items() if k != gather}:
        return False
    return set(got.get(gather, [])) == set(want.get(gather, [])) and len(got.get(gather, [])) <= len(want[gather])


def _check_talk(rank: int, got: dict, want: dict, n_layer: int) -> None:
    if _talk_matches(got, want):
        return
    counts = {key: len(sizes) for key, sizes in got.items()}
    need = {key: len(sizes) for key, sizes in want.items()}
    lead = f"rank {rank}: one forward and backward issued {_describe(got)}; the 2-D layout issues {_describe(want)}"
    if counts.get(("tp", "all_reduce"), 0) != need.get(("tp", "all_reduce")):
        raise AssertionError(f"{lead}: over mesh['tp'] tensor parallelism all-reduces twice per block forward and "
                             f"twice backward ({4 * n_layer} for {n_layer} blocks): split every block with "
                             f"parallelize_gpt(model, mesh['tp']).")
    raise AssertionError(f"{lead}: over mesh['dp'] FSDP all-gathers each unit's shards before using them and "
                         f"reduce-scatters each unit's gradients once: one unit per block, then the model, with "
                         f"fully_shard's defaults.")


def _check_values(rank: int, got: dict, want: dict, what: str, hint: str) -> None:
    for name, w in want.items():
        g = got.get(name)
        if g is None:
            raise AssertionError(f"rank {rank}: {name} has no {what}: {hint}.")
        diff = (g.double() - w.double()).abs().max().item() if g.shape == w.shape else float("inf")
        if not diff <= 1e-5:
            raise AssertionError(f"rank {rank}: {what} of {name} differs from one process's on the whole batch by "
                                 f"{diff:.2g}: {hint}.")


def check_build_2d(student_file: str, *, steps: int = 2, seed: int = 0, n_layer: int = 2) -> None:
    """Run the student's 2-D layout on 4 gloo ranks (one launch) and check, on every rank: the FSDP
    units (each block and the model), each parameter's mesh, placements and local shard against
    ``composed.parallelize``'s, the collectives of one step by mesh dimension (kind, number, bytes),
    the full gradients after the first backward and the parameters after ``steps`` SGD steps against
    one process on the whole batch (to 1e-5)."""
    try:
        results = run_ranks(build_2d_rank, student_file, 4, steps=steps, seed=seed, n_layer=n_layer)
    except AssertionError as failure:
        raise AssertionError(f"{failure}{_sharded_hint(str(failure))}") from None
    grads, params = _single(steps, seed, n_layer)
    for rank, result in enumerate(results):
        if result is None or result is Ellipsis:
            raise AssertionError(f"rank {rank}: build_2d returned {result!r}: it still does nothing; return the model.")
        _check_units(rank, result["layout"])
        want_params, got_params = result["reference"]["params"], result["layout"]["params"]
        if set(got_params) != set(want_params):
            raise AssertionError(f"rank {rank}: the model returned has parameters {sorted(got_params)[:4]}...; "
                                 f"return the GPT you were given, split and sharded in place.")
        for name in sorted(want_params, key=lambda n: not _is_tensor_parallel(n)):
            _check_parameter(rank, name, got_params[name], want_params[name])
        _check_talk(rank, result["talk"], result["reference_talk"], n_layer)
        _check_values(rank, result["grads"], grads, "the gradient after one backward",
                      "FSDP averages the gradients of the two data-parallel halves; check what build_2d changed "
                      "in the model besides splitting and sharding it")
        _check_values(rank, result["params"], params, f"the value after {steps} SGD steps",
                      "the model must train exactly like one process on the whole batch")


# ---------------------------------------------------------------- planted wrong answers

_NO_FSDP_BLOCKS = '    for block in model.blocks:\n        fully_shard(block, mesh=mesh["dp"])\n'

MUTANTS = {
    "q1": (
        Mutant("ignores reason", "cannot run", edits=(("r.reason is None and ", ""),)),
        Mutant("< instead of <=", "not <", edits=(("r.memory_gb <= limit_gb", "r.memory_gb < limit_gb"),)),
        Mutant("smallest memory", "least memory",
               edits=(("max(fits, key=lambda r: r.mfu)", "min(fits, key=lambda r: r.memory_gb)"),)),
        Mutant("slowest that fits", "slowest layout that fits",
               edits=(("max(fits, key=lambda r: r.mfu)", "min(fits, key=lambda r: r.mfu)"),)),
        Mutant("fastest overall", "filter on memory_gb too", edits=(
            ("return max(fits, key=lambda r: r.mfu) if fits else None", "return ranked[0]"),)),
        Mutant("returns the layout", "return the Prediction", edits=(
            ("return max(fits, key=lambda r: r.mfu) if fits else None",
             "return max(fits, key=lambda r: r.mfu).layout if fits else None"),)),
        Mutant("crashes when nothing fits", "return None",
               edits=(("return max(fits, key=lambda r: r.mfu) if fits else None",
                       "return max(fits, key=lambda r: r.mfu)"),)),
        Mutant("bytes against GB", "memory_gb is in GB", edits=(
            ("r.memory_gb <= limit_gb", "sum(r.memory.values()) <= limit_gb"),)),
        Mutant("weights only", "filter on memory_gb too", edits=(
            ("r.memory_gb <= limit_gb", 'r.memory["weights"] / 1e9 <= limit_gb'),)),
    ),
    "q2": (
        Mutant("forward only", "counts the forward only", edits=(("2 + 2 + (2", "2 + (2"),)),
        Mutant("every block", "n_layer / pp blocks",
               edits=(("(n_layer // pp) * microbatches", "n_layer * microbatches"),)),
        Mutant("one microbatch", "every microbatch", edits=((" * microbatches", ""),)),
        Mutant("recomputation ignored", "reruns each block's forward", edits=(("(2 if recompute else 0)", "0"),)),
        Mutant("recomputation reruns the backward", "reruns the forward only",
               edits=(("(2 if recompute else 0)", "(4 if recompute else 0)"),)),
        Mutant("q, k, v gradients apart", "q, k and v share one input", edits=(("2 + 2 + (2", "2 + 4 + (2"),)),
        Mutant("always recomputes", "nothing is rerun", edits=(("(2 if recompute else 0)", "2"),)),
        Mutant("uneven stages accepted", "raise ValueError", edits=((
            '    if n_layer % pp:\n        raise ValueError(f"{n_layer} blocks do not split into {pp} equal stages")\n',
            ""),)),
        Mutant("recompute once per step", "in every microbatch's backward", edits=((
            "return per_block * (n_layer // pp) * microbatches",
            "return (4 * microbatches + per_block - 4) * (n_layer // pp)"),)),
    ),
    "q3": (
        Mutant("no tensor parallelism", "skipped tensor parallelism",
               edits=(('    parallelize_gpt(model, mesh["tp"])\n', ""),)),
        Mutant("FSDP over the flattened mesh", "FSDP over all 4 ranks", edits=(
            ('    parallelize_gpt(model, mesh["tp"])\n', '    flat = mesh["dp", "tp"]._flatten()\n'),
            ('fully_shard(block, mesh=mesh["dp"])', "fully_shard(block, mesh=flat)"),
            ('fully_shard(model, mesh=mesh["dp"])', "fully_shard(model, mesh=flat)"))),
        Mutant("one FSDP unit", "one FSDP unit for the whole model", edits=((_NO_FSDP_BLOCKS, ""),)),
        Mutant("no FSDP", "nothing averaged the gradients", edits=(
            (_NO_FSDP_BLOCKS, ""), ('    fully_shard(model, mesh=mesh["dp"])\n', ""))),
        Mutant("blocks only", "fully_shard the model too",
               edits=(('    fully_shard(model, mesh=mesh["dp"])\n', ""),)),
        Mutant("dimensions swapped", "dimensions are swapped", edits=(
            ('parallelize_gpt(model, mesh["tp"])', 'parallelize_gpt(model, mesh["dp"])'),
            ('fully_shard(block, mesh=mesh["dp"])', 'fully_shard(block, mesh=mesh["tp"])'),
            ('fully_shard(model, mesh=mesh["dp"])', 'fully_shard(model, mesh=mesh["tp"])'))),
        Mutant("FSDP before tensor parallelism", "Apply tensor parallelism first", edits=(
            ('    parallelize_gpt(model, mesh["tp"])\n', ""),
            ("    return model", '    parallelize_gpt(model, mesh["tp"])\n    return model'))),
        Mutant("forgot to return", "build_2d returned None", edits=(("    return model\n", ""),)),
    ),
}
