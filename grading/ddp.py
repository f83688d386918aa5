"""Exercises 03: graders for what each rank's DistributedSampler draws, how many micro-batches to
accumulate, and a DDP training loop — DistributedSampler, set_epoch and no_sync accumulation.

Q1 and Q2 run in the notebook's process: the checks compare the student's indices with
``DistributedSampler`` itself, epoch by epoch and rank by rank (with ``n`` not a multiple of the
ranks, where the sampler pads), and call ``accumulation_steps`` on batch sizes that work and on
ones that must raise.

Q3: the student writes ``train(ddp_model, optimizer, dataset, *, epochs, batch_size, accumulate,
seed)``: each rank draws its share of ``dataset`` through a ``DistributedSampler`` shuffled with
``seed`` and reshuffled every epoch, runs micro-batches of ``batch_size``, and steps the optimizer
once per ``accumulate`` micro-batches with a single gradient all-reduce (the others' backward
inside ``no_sync()``). The check records what every rank drew, after which micro-batch each
all-reduce and each optimizer step came, and compares every rank's final weights with one process
training on the same global batches.
"""
from __future__ import annotations

import gc
import re
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Dataset, DistributedSampler

from course_utils.data import linear_regression
from course_utils.models import mlp

from .compare import first_mismatch, mlp_parameters, same
from .feedback import call_student
from .mutant import Mutant
from .ranks import run_ranks
from .student import load_student, student_function

# --- Q1: what each rank's sampler draws, epoch by epoch ---------------------------------------------

def _epoch_lists(epoch_indices: Callable, n: int, world_size: int, rank: int, epochs: int, seed: int) -> list:
    """``epoch_indices(...)`` for one rank as a list of lists of ints; fail on any other shape."""
    call = f"epoch_indices({n}, {world_size}, {rank}, epochs={epochs}, seed={seed})"
    try:
        got = call_student(epoch_indices, "epoch_indices", n, world_size, rank, epochs=epochs, seed=seed)
    except AssertionError as error:
        if "process group" in str(error):
            raise AssertionError(f"{error}. A DistributedSampler asks the process group for the rank and the world "
                                 "size unless you pass them: num_replicas=world_size, rank=rank.") from None
        raise
    if got is None:
        raise AssertionError(f"`{call}` returned None: epoch_indices still does nothing. Return one list per epoch.")
    if not isinstance(got, (list, tuple)) or len(got) != epochs:
        raise AssertionError(f"`{call}` returned {type(got).__name__} {str(got)[:60]}: "
                             f"return one list of indices per epoch, {epochs} lists.")
    for epoch in got:
        if not isinstance(epoch, (list, tuple)) or not all(isinstance(i, (int, np.integer)) for i in epoch):
            raise AssertionError(f"`{call}`: an epoch's entry is {type(epoch).__name__}, not a list of ints: append "
                                 "list(sampler), a copy of this epoch's indices (the sampler itself reshuffles at "
                                 "the next set_epoch).")
    return [[int(i) for i in epoch] for epoch in got]


def check_epoch_indices(epoch_indices: Callable, *, n: int = 12, world_size: int = 3, epochs: int = 2,
                        seed: int = 0) -> None:
    """Fail unless every rank's ``epoch_indices`` are a shuffled, seeded DistributedSampler's, set_epoch'ed."""
    got = [_epoch_lists(epoch_indices, n, world_size, rank, epochs, seed) for rank in range(world_size)]
    want = rank_orders(n, world_size, epochs, seed)
    sizes = {len(e) for rank in got for e in rank}
    where = f"with n={n}, world_size={world_size}, seed={seed}"

    def matches(**variant) -> bool:
        orders = rank_orders(n, world_size, epochs, variant.pop("seed", seed), **variant)
        return all(got[r][e] == orders[e][r] for r in range(world_size) for e in range(epochs))

    if all(got[r][e] == want[e][r] for r in range(world_size) for e in range(epochs)):
        return
    if matches(shuffle=False):
        why = "the indices are in order: a training sampler shuffles (shuffle=True, with seed=seed)."
    elif epochs > 1 and all(len({tuple(e) for e in rank}) == 1 for rank in got):
        why = ("every rank drew the same order in every epoch: call sampler.set_epoch(epoch) before each epoch, "
               "or every epoch repeats the first one's shuffle.")
    elif any(set(got[r][0]) == set(range(n)) and len(got[r][0]) >= n for r in range(world_size)) and world_size > 1:
        why = "a rank drew all the samples: pass num_replicas=world_size and rank=rank so the ranks split them."
    elif seed != 0 and matches(seed=0):
        why = f"that is the order of seed 0, not of seed={seed}: pass seed=seed to the DistributedSampler."
    elif matches(first_epoch=1):
        why = "epochs count from 0: the first epoch is set_epoch(0), as a training loop's range(epochs) gives."
    elif matches(drop_last=True):
        why = (f"drop_last=True drops {n % world_size} samples; the training sampler keeps them all and pads "
               "(drop_last=False, the default).")
    elif len(sizes) > 1:
        why = (f"the ranks drew different numbers of samples ({sorted(sizes)}): DistributedSampler pads so that every "
               "rank draws ceil(n / world_size) samples and runs as many steps; use it rather than your own split.")
    else:
        why = ("use DistributedSampler(range(n), num_replicas=world_size, rank=rank, shuffle=True, seed=seed) and "
               "set_epoch(epoch) before each epoch.")
    rank, epoch = next((r, e) for r in range(world_size) for e in range(epochs) if got[r][e] != want[e][r])
    raise AssertionError(f"{where}, rank {rank} drew {got[rank][epoch][:8]} in epoch {epoch}, expected "
                         f"{want[epoch][rank][:8]}: {why}")


# --- Q2: how many micro-batches per step ----------------------------------------------------------------

def check_accumulation_steps(accumulation_steps: Callable,
                             good: Sequence[tuple[int, int, int]] = ((256, 32, 2), (64, 64, 1)),
                             bad: Sequence[tuple[int, int, int]] = ((100, 32, 2), (200, 32, 2))) -> None:
    """Fail unless ``accumulation_steps`` returns the int ``global_batch // (per_rank_batch * world_size)``
    for the ``good`` cases, and raises a ``ValueError`` naming a nearest global batch that works (the multiple of
    ``per_rank_batch * world_size`` just below or above) for the ``bad`` ones."""
    for global_batch, per_rank, world_size in good:
        call = f"accumulation_steps({global_batch}, {per_rank}, {world_size})"
        got = call_student(accumulation_steps, "accumulation_steps", global_batch, per_rank, world_size)
        want = global_batch // (per_rank * world_size)
        if got is None:
            raise AssertionError(f"`{call}` returned None: accumulation_steps still does nothing.")
        if isinstance(got, bool) or not isinstance(got, (int, np.integer)):
            raise AssertionError(f"`{call}` returned {got!r}, a {type(got).__name__}: return an int, the number of "
                                 "backward passes (use //).")
        if got == want:
            continue
        if got == global_batch // per_rank:
            why = ("you forgot world_size: every backward pass runs on all world_size ranks at once, "
                   "per_rank_batch * world_size samples.")
        elif got == want - 1:
            why = "count every backward pass per step, the last (outside no_sync) included."
        else:
            why = "global_batch / (per_rank_batch * world_size) backward passes per step."
        raise AssertionError(f"`{call}` returned {got}, expected {want}: {why}")
    for global_batch, per_rank, world_size in bad:
        _check_raises(accumulation_steps, global_batch, per_rank, world_size)


def _check_raises(accumulation_steps: Callable, global_batch: int, per_rank: int, world_size: int) -> None:
    """``accumulation_steps`` must raise ValueError for a global batch that is no whole number of steps."""
    call = f"accumulation_steps({global_batch}, {per_rank}, {world_size})"
    per_step = per_rank * world_size
    works = [b for b in (per_step * (global_batch // per_step), per_step * (global_batch // per_step + 1)) if b > 0]
    try:
        got = accumulation_steps(global_batch, per_rank, world_size)
    except ValueError as error:
        numbers = {int(x) for x in re.findall(r"\d+", str(error))}
        if not numbers & set(works):
            raise AssertionError(f"`{call}` raised ValueError({str(error)!r}), but the message names no global batch "
                                 f"that works: say e.g. {' or '.join(map(str, works))}.") from None
        return
    except Exception as error:   # noqa: BLE001 - whatever the student raised, said plainly
        raise AssertionError(f"`{call}` raised {type(error).__name__}: {error}: raise ValueError (the argument's "
                             "value is wrong, not its type).") from None
    why = f"{global_batch} samples is not a whole number of steps of per_rank_batch * world_size = {per_step} samples"
    if global_batch % per_rank == 0:
        why += (f" ({global_batch} is a multiple of per_rank_batch, but all world_size ranks take a micro-batch at "
                "once)")
    raise AssertionError(f"`{call}` returned {got!r}: {why}. Raise a ValueError that says which global batches "
                         f"would work ({' or '.join(map(str, works))}).")


# --- Q3: the DDP training loop -------------------------------------------------------------------------

def regression(sizes: list[int], n: int, seed: int):
    """``(X, y)``: ``n`` samples of ``sizes[0]`` features, and as many targets as the model has outputs."""
    X, y, _ = linear_regression(n, sizes[0], seed=seed)
    return X, np.tile(y, (1, sizes[-1]))


class RecordingDataset(Dataset):
    """``(x, y)`` pairs of a regression dataset that remember every index they were asked for."""

    def __init__(self, X, y):
        self.X, self.y, self.seen = torch.from_numpy(X), torch.from_numpy(y), []

    def __len__(self) -> int:
        return len(self.X)

    def __getitem__(self, i):
        self.seen.append(int(i))
        return self.X[i], self.y[i]


def training_rank(rank: int, world_size: int, student_file: str, *, sizes: list[int], n: int, epochs: int,
                  batch_size: int, accumulate: int, lr: float, seed: int) -> dict:
    """Harness (one rank): the student's ``train`` on a DDP model; what it drew, sent and stepped.

    Returns ``seen`` (the dataset indices drawn, in order), ``reduce_at`` and ``step_at`` (for every
    gradient all-reduce and every optimizer step, how many micro-batches had run forward by then)
    and the final ``weights``.
    """
    train = student_function(load_student(student_file), "train")
    dataset = RecordingDataset(*regression(sizes, n, seed))
    ddp_model = DistributedDataParallel(mlp(sizes, seed=seed))
    forwards, reduce_at, step_at = [0], [], []

    def count_forward(module, inputs):
        forwards[0] += 1

    def recorded_allreduce(state, bucket):
        reduce_at.append(forwards[0])
        return default_hooks.allreduce_hook(None, bucket)

    ddp_model.module.register_forward_pre_hook(count_forward)
    ddp_model.register_comm_hook(None, recorded_allreduce)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=lr)
    real_step = optimizer.step

    def counted_step(*args, **kwargs):
        step_at.append(forwards[0])
        return real_step(*args, **kwargs)

    optimizer.step = counted_step
    train(ddp_model, optimizer, dataset, epochs=epochs, batch_size=batch_size, accumulate=accumulate, seed=seed)
    weights = [p.detach().clone() for p in ddp_model.module.parameters()]
    result = dict(seen=dataset.seen, reduce_at=reduce_at, step_at=step_at, weights=weights)
    del ddp_model, optimizer   # a Python comm hook must be gone before the process group (bench docs)
    gc.collect()
    return result


def rank_orders(n: int, world_size: int, epochs: int, seed: int, *, shuffle: bool = True,
                drop_last: bool = False, first_epoch: int = 0) -> list[list[list[int]]]:
    """``orders[epoch][rank]``: the indices a shuffled, seeded, set_epoch'ed DistributedSampler draws
    (the other arguments: what a sampler built or driven otherwise draws)."""
    dataset = range(n)
    orders = []
    for epoch in range(first_epoch, first_epoch + epochs):
        samplers = [DistributedSampler(dataset, num_replicas=world_size, rank=r, shuffle=shuffle, seed=seed,
                                       drop_last=drop_last) for r in range(world_size)]
        for s in samplers:
            s.set_epoch(epoch)
        orders.append([list(s) for s in samplers])
    return orders


def reference_weights(*, sizes: list[int], n: int, epochs: int, batch_size: int, accumulate: int, lr: float,
                      seed: int, world_size: int, zero_grad: bool = True) -> list[torch.Tensor]:
    """One process, one optimizer step per global batch: every rank's ``accumulate`` micro-batches."""
    X, y = map(torch.from_numpy, regression(sizes, n, seed))
    with torch.random.fork_rng():
        model = mlp(sizes, seed=seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    per_step = batch_size * accumulate
    for order in rank_orders(n, world_size, epochs, seed):
        for start in range(0, len(order[0]), per_step):
            rows = [i for rank_order in order for i in rank_order[start:start + per_step]]
            nn.functional.mse_loss(model(X[rows]), y[rows]).backward()
            optimizer.step()
            if zero_grad:
                optimizer.zero_grad()
    return [p.detach() for p in model.parameters()]


def check_ddp_training(student_file: str, *, world_size: int = 2, sizes: tuple[int, ...] = (4, 8, 1), n: int = 32,
                       epochs: int = 2, batch_size: int = 4, accumulate: int = 2, lr: float = 0.05,
                       seed: int = 0) -> None:
    """Run the student's ``train`` on ``world_size`` ranks; fail with the likely cause."""
    per_step = world_size * batch_size * accumulate
    if n % per_step:
        raise ValueError(f"n={n} must be a multiple of world_size * batch_size * accumulate = {per_step}")
    job = dict(sizes=list(sizes), n=n, epochs=epochs, batch_size=batch_size, accumulate=accumulate, lr=lr, seed=seed)
    results = run_ranks(training_rank, student_file, world_size, **job)
    orders = rank_orders(n, world_size, epochs, seed)
    for rank, result in enumerate(results):
        _check_draws(rank, world_size, result["seen"], orders, n, epochs, seed)
    for rank, result in enumerate(results):
        _check_steps(rank, result, micro_batches=epochs * n // (world_size * batch_size), accumulate=accumulate)
    want = reference_weights(world_size=world_size, **job)
    names = [name for name, _ in mlp_parameters(sizes)]
    for rank, result in enumerate(results):
        mismatch = first_mismatch(result["weights"], want, names, atol=1e-5, rtol=1e-4)
        if mismatch is not None:
            raise AssertionError(f"rank {rank} of {world_size}: " + _explain_weights(
                result["weights"], mismatch, job, world_size, outputs=sizes[-1]))


def _check_steps(rank: int, result: dict, *, micro_batches: int, accumulate: int) -> None:
    """Fail unless the optimizer stepped after every ``accumulate``-th micro-batch and DDP all-reduced
    the gradients exactly then (one backward per step outside ``no_sync``)."""
    step_at, reduce_at = result["step_at"], result["reduce_at"]
    want = list(range(accumulate, micro_batches + 1, accumulate))
    if len(step_at) == micro_batches != len(want):
        raise AssertionError(f"the optimizer stepped {len(step_at)} times, once per micro-batch: step (and zero "
                             f"the gradients) once every {accumulate} micro-batches, {len(want)} steps in all.")
    if step_at != want:
        if step_at and step_at[0] < accumulate:
            raise AssertionError(f"rank {rank}: the first optimizer step came after {step_at[0]} micro-batch(es), "
                                 f"not {accumulate}: a step ends micro-batches {accumulate}, {2 * accumulate}, ... "
                                 f"(with i counting from 0: when (i + 1) % accumulate == 0).")
        raise AssertionError(f"rank {rank}: the optimizer stepped after micro-batches {step_at[:6]}..., expected "
                             f"{want[:6]}...: one step per {accumulate} micro-batches, {len(want)} in all.")
    if len(reduce_at) == micro_batches != len(want):
        raise AssertionError(f"DDP all-reduced the gradients {len(reduce_at)} times, after every micro-batch: "
                             f"run the forward and backward of all but the last micro-batch of each "
                             f"step inside ddp_model.no_sync() (DDP decides in the forward whether the backward "
                             f"all-reduces), so that only {len(want)} all-reduces happen.")
    if not reduce_at:
        raise AssertionError(f"rank {rank}: DDP never all-reduced the gradients, so every rank trained on its own "
                             "shard alone: run the forward through ddp_model(x) (not ddp_model.module), and the "
                             "forward and backward that end each step outside no_sync().")
    if sorted(set(reduce_at)) != want:
        raise AssertionError(f"rank {rank}: DDP all-reduced the gradients during micro-batches "
                             f"{sorted(set(reduce_at))[:6]}..., but the steps came after micro-batches {want[:6]}...: "
                             "the micro-batch that ends a step must run its forward and backward outside no_sync "
                             "(its backward all-reduces what the step's micro-batches accumulated); all the others "
                             "inside ddp_model.no_sync().")


def _explain_weights(got: list, mismatch: tuple[str, float], job: dict, world_size: int, outputs: int) -> str:
    """What final weights that differ from one-process training say about the loop."""
    def trained(**changes) -> list[torch.Tensor]:
        return reference_weights(world_size=world_size, **{**job, **changes})

    lr, accumulate, batch_size = job["lr"], job["accumulate"], job["batch_size"]
    if same(got, trained(lr=lr * accumulate), atol=1e-5):
        return (f"the weights are those of a learning rate {accumulate}x too large: the gradients were summed "
                f"over the {accumulate} micro-batches, not averaged. Divide each micro-batch's loss by accumulate.")
    if same(got, trained(lr=lr / world_size), atol=1e-5):
        return (f"the weights are those of a learning rate {world_size}x too small: you divided the loss by the "
                "world size, but DDP already averages the gradients over the ranks. Divide by accumulate only.")
    if same(got, trained(lr=lr * batch_size * outputs), atol=1e-5):
        return ("the weights are those of a learning rate batch_size times too large: the loss is the sum over "
                "the micro-batch (reduction='sum'); use the mean squared error, mse_loss's default reduction.")
    if same(got, trained(zero_grad=False), atol=1e-5):
        return ("every step added the gradients of all earlier steps: zero the gradients after "
                "each optimizer step (optimizer.zero_grad()).")
    name, error = mismatch
    return (f"the final `{name}` differs from one-process training on the same global batches by "
            f"up to {error:.3g} (the loss is the mean squared error of each micro-batch).")


def _check_draws(rank: int, world_size: int, seen: list[int], orders: list[list[list[int]]], n: int, epochs: int,
                 seed: int) -> None:
    """Fail if rank ``rank`` did not draw, epoch by epoch, what a DistributedSampler gives it."""
    want = [epoch[rank] for epoch in orders]
    if not seen:
        raise AssertionError(f"rank {rank} drew no sample from the dataset: train still does nothing. "
                             "Build a DistributedSampler and a DataLoader over it, then loop over the epochs.")
    per_epoch = len(seen) // epochs
    if per_epoch == n:
        raise AssertionError(f"rank {rank} drew all {n} samples every epoch: each rank must draw only its "
                             f"1/{world_size} share. Give the DataLoader a DistributedSampler(dataset, "
                             "num_replicas=world_size, rank=rank, shuffle=True, seed=seed).")
    epochs_seen = [seen[i * per_epoch:(i + 1) * per_epoch] for i in range(epochs)]
    if epochs_seen == [epoch[rank] for epoch in rank_orders(n, world_size, epochs, seed, shuffle=False)]:
        raise AssertionError(f"rank {rank} drew its samples in the same fixed order: the sampler must shuffle "
                             "(DistributedSampler(..., shuffle=True, seed=seed)).")
    if epochs > 1 and all(e == epochs_seen[0] for e in epochs_seen) and want[0] != want[1]:
        raise AssertionError(f"sampler epoch not set: rank {rank} drew the samples in the same order in all "
                             f"{epochs} epochs. Call sampler.set_epoch(epoch) at the start of every epoch, "
                             "or every epoch repeats the first one's shuffle.")
    if epochs_seen == want:
        return
    if rank > 0 and epochs_seen == [epoch[0] for epoch in orders]:
        raise AssertionError(f"every rank drew the same samples: rank {rank} drew rank 0's share. Let the "
                             "sampler take the rank from the process group (or pass rank=dist.get_rank()), not a "
                             "fixed rank: then the ranks split the data and one step sees world_size shards.")
    if seed != 0 and epochs_seen == [epoch[rank] for epoch in rank_orders(n, world_size, epochs, 0)]:
        raise AssertionError(f"rank {rank} drew the order of seed 0, not of the seed {seed} it was given: pass "
                             "seed=seed to the DistributedSampler.")
    raise AssertionError(f"rank {rank} drew {epochs_seen[0][:6]}... in epoch 0, but DistributedSampler("
                         f"dataset, num_replicas={world_size}, rank={rank}, shuffle=True, seed=seed) gives "
                         f"{want[0][:6]}...: use that sampler (with the seed you were given), no other "
                         "shuffling, and a DataLoader without worker processes.")


_EPOCH_SAMPLER = "DistributedSampler(range(n), num_replicas=world_size, rank=rank, shuffle=True, seed=seed)"
_NO_SYNC = "contextlib.nullcontext() if last else ddp_model.no_sync()"
_RAISE = ('f"{per_step}; use a global batch of {per_step * max(1, global_batch // per_step)} or "\n'
          '                         f"{per_step * (global_batch // per_step + 1)}"')

MUTANTS = {
    "q1": (
        Mutant("set_epoch forgotten", "call sampler.set_epoch(epoch) before each epoch",
               edits=(("        sampler.set_epoch(epoch)\n", ""),)),
        Mutant("not shuffled", "a training sampler shuffles", edits=(("shuffle=True", "shuffle=False"),)),
        Mutant("seed ignored", "pass seed=seed to the DistributedSampler", edits=((", seed=seed)", ")"),)),
        Mutant("epochs from 1", "epochs count from 0",
               edits=(("sampler.set_epoch(epoch)", "sampler.set_epoch(epoch + 1)"),)),
        Mutant("rank and world size not passed", "pass them: num_replicas=world_size, rank=rank",
               edits=(("num_replicas=world_size, rank=rank, ", ""),)),
        Mutant("the sampler, not its indices", "append list(sampler)",
               edits=(("out.append(list(sampler))", "out.append(sampler)"),)),
        Mutant("drop_last", "drop_last=True drops", edits=((", seed=seed)", ", seed=seed, drop_last=True)"),)),
        Mutant("own split, no padding", "the ranks drew different numbers of samples", source=(
            "import torch\n\n\ndef epoch_indices(n, world_size, rank, epochs, seed=0):\n    out = []\n"
            "    for epoch in range(epochs):\n        g = torch.Generator()\n        g.manual_seed(seed + epoch)\n"
            "        out.append(torch.randperm(n, generator=g)[rank::world_size].tolist())\n    return out\n")),
    ),
    "q2": (
        Mutant("world_size forgotten", "you forgot world_size",
               edits=(("per_step = per_rank_batch * world_size", "per_step = per_rank_batch"),)),
        Mutant("a float", "return an int",
               edits=(("return global_batch // per_step", "return global_batch / per_step"),)),
        Mutant("never raises", "is not a whole number of steps", edits=(("if global_batch % per_step:", "if False:"),)),
        Mutant("checks per-rank batch only", "all world_size ranks take a micro-batch at once",
               edits=(("if global_batch % per_step:", "if global_batch % per_rank_batch:"),)),
        Mutant("no suggestion in the message", "names no global batch that works", edits=((_RAISE, 'f"{per_step}"'),)),
        Mutant("another exception", "raise ValueError (the argument's",
               edits=(("raise ValueError(", "raise Exception("),)),
        Mutant("no_sync passes only", "the last (outside no_sync) included",
               edits=(("return global_batch // per_step", "return global_batch // per_step - 1"),)),
    ),
    "q3": (
        Mutant("set_epoch forgotten", "sampler epoch not set",
               edits=(("        sampler.set_epoch(epoch)                  # else every epoch repeats epoch 0's order\n",
                       ""),)),
        Mutant("no sampler: all data on every rank", "samples every epoch: each rank must draw only its",
               edits=(("batch_size=batch_size, sampler=sampler", "batch_size=batch_size"),)),
        Mutant("rank 0's shard everywhere", "every rank drew the same samples", edits=((
            "DistributedSampler(dataset, shuffle=True, seed=seed)",
            "DistributedSampler(dataset, num_replicas=torch.distributed.get_world_size(), rank=0, shuffle=True, "
            "seed=seed)"),)),
        Mutant("not shuffled", "the sampler must shuffle",
               edits=(("shuffle=True, seed=seed", "shuffle=False, seed=seed"),)),
        Mutant("seed ignored", "pass seed=seed to the DistributedSampler",
               edits=(("shuffle=True, seed=seed", "shuffle=True"),)),
        Mutant("no no_sync", "after every micro-batch", edits=((_NO_SYNC, "contextlib.nullcontext()"),)),
        Mutant("no_sync on the wrong micro-batch", "must run its forward and backward outside no_sync",
               edits=((_NO_SYNC, "ddp_model.no_sync() if last else contextlib.nullcontext()"),)),
        Mutant("loss not divided by accumulate", "micro-batches, not averaged", edits=((" / accumulate\n", "\n"),)),
        Mutant("loss divided by the world size", "DDP already averages the gradients over the ranks",
               edits=((" / accumulate\n", " / accumulate / torch.distributed.get_world_size()\n"),)),
        Mutant("summed loss", "reduction='sum'",
               edits=(("mse_loss(ddp_model(x), y)", "mse_loss(ddp_model(x), y, reduction='sum')"),)),
        Mutant("a step every micro-batch", "once per micro-batch",
               edits=(("            if last:\n", "            if True:\n"),)),
        Mutant("the first step after one micro-batch", "the first optimizer step came after 1 micro-batch",
               edits=(("last = (i + 1) % accumulate == 0", "last = i % accumulate == 0"),)),
        Mutant("zero_grad forgotten", "zero the gradients after each",
               edits=(("                optimizer.zero_grad()\n", ""),)),
    ),
}
