"""Exercises 12: scaling efficiency, checkpointing's peak memory, and a ring all-reduce of one's own.

- Q1 ``efficiency(step_s, batch, mode)``: compared with the definition on weak and strong scaling
  of the same step times (a student's numbers that match a classic mistake get its name), and on
  the invalid inputs the prompt says must raise ``ValueError``.
- Q2 ``peak_activations(blocks, per_block, k)``: compared with the count on segment lengths that
  divide ``blocks`` and that do not, ``k`` larger than ``blocks`` and ``k = 0``.
- Q3 ``ring_all_reduce(tensor)``: run on gloo ranks with every point-to-point call recorded (the
  harness wraps ``torch.distributed``'s send/recv/isend/irecv/P2POp/batch_isend_irecv). Every rank
  must hold the sum, having called no collective, talked to its ring neighbours only, sent one chunk
  (about ``numel / world_size`` numbers) per message and taken ``2 (world_size - 1)`` steps.

Importing this module imports PyTorch only (no other framework).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from numbers import Real
from typing import Any

import torch
import torch.distributed as dist

from .mutant import Mutant
from .ranks import run_ranks
from .student import load_student, student_function

# ---------------------------------------------------------------------------------------------
# Shared: call a student's function, turn whatever it raises into feedback
# ---------------------------------------------------------------------------------------------


def _call(fn: Callable, name: str, *args: Any, why: str = "") -> Any:
    """``fn(*args)``; an exception becomes an ``AssertionError`` naming the call, the error and ``why``
    (what those inputs mean)."""
    shown = f"{name}({', '.join(map(repr, args))})"
    try:
        value = fn(*args)
    except Exception as error:   # noqa: BLE001 - a student's function may raise anything
        raise AssertionError(f"{shown} raised {type(error).__name__}: {error}. {why}".rstrip()) from None
    if value is None or value is Ellipsis:
        raise AssertionError(f"{shown} returned {value!r}: replace the `...` with your answer.")
    return value


def _raises_value_error(fn: Callable, name: str, args: tuple, why: str) -> None:
    """Fail unless ``fn(*args)`` raises ``ValueError``; ``why`` says why those inputs are invalid."""
    shown = f"{name}({', '.join(map(repr, args))})"
    try:
        fn(*args)
    except ValueError:
        return
    except Exception as error:   # noqa: BLE001
        raise AssertionError(f"{shown} raised {type(error).__name__}: {error}, not a ValueError: {why}") from None
    raise AssertionError(f"{shown} returned instead of raising ValueError: {why}")


# ---------------------------------------------------------------------------------------------
# Q1: scaling efficiency
# ---------------------------------------------------------------------------------------------

EFFICIENCY_STEPS = {1: 0.030, 2: 0.040, 4: 0.045}   # seconds per step on 1, 2, 4 ranks (public case)


def efficiency_reference(step_s: Mapping[int, float], batch: int, mode: str) -> dict[int, float]:
    """``{n: throughput(n) / (n * throughput(1))}``, throughput in samples/s; ``batch`` is per rank
    in weak scaling (n ranks process ``n * batch`` samples per step), global in strong scaling."""
    def throughput(n):
        return (batch * n if mode == "weak" else batch) / step_s[n]

    return {n: throughput(n) / (n * throughput(1)) for n in step_s}


def _efficiency_mistakes(step_s, batch, mode) -> list[tuple[str, dict[int, float]]]:
    """Classic wrong answers for one case: (what the student did, the numbers it gives)."""
    right = efficiency_reference(step_s, batch, mode)
    other = "strong" if mode == "weak" else "weak"
    return [
        (f"weak and strong scaling are confused: for mode={mode!r} these are {other} scaling's numbers. "
         "In weak scaling `batch` is per rank, so n ranks process n × batch samples per step; in strong "
         "scaling the n ranks share one batch of `batch` samples",
         efficiency_reference(step_s, batch, other)),
        ("your efficiency is inverted: it is throughput(n) / (n · throughput(1)), not the other way round "
         "(a real cluster's efficiency is at most about 1)", {n: 1 / e for n, e in right.items()}),
        ("that is the speed-up throughput(n) / throughput(1): divide it by n for the efficiency",
         {n: n * e for n, e in right.items()}),
        ("that is each rank's share of the throughput: throughput(n) counts every sample the n ranks "
         "process together; the n is in the denominator once", {n: e / n for n, e in right.items()}),
    ]


def check_efficiency(efficiency: Callable, *, step_s: Mapping[int, float] = EFFICIENCY_STEPS,
                     batch: int = 256) -> None:
    """Check ``efficiency`` on ``step_s`` (seconds per step by rank count, 1 included) in both modes,
    and that a missing one-rank time and an unknown mode raise ``ValueError``."""
    step_s = dict(step_s)
    got = {mode: _call(efficiency, "efficiency", step_s, batch, mode) for mode in ("weak", "strong")}
    for mode, result in got.items():
        if not isinstance(result, Mapping) or not all(isinstance(v, Real) for v in result.values()):
            raise AssertionError(f"efficiency(..., {mode!r}) returned {result!r}; return a dict {{ranks: efficiency}} "
                                 "of numbers.")
        if set(result) != set(step_s):
            raise AssertionError(f"efficiency(..., {mode!r}) has keys {sorted(result)}, expected {sorted(step_s)}: "
                                 "one entry for every n in step_s, 1 included (its efficiency is 1).")
    if all(math.isclose(got["weak"][n], got["strong"][n], rel_tol=1e-9) for n in step_s):
        raise AssertionError("efficiency returned the same numbers for mode='weak' and mode='strong': the mode "
                             "must change how many samples a step processes (n × batch in weak scaling, batch "
                             "in strong scaling).")
    for mode, result in got.items():
        _compare_efficiency(result, step_s, batch, mode)
    _raises_value_error(efficiency, "efficiency", ({n: t for n, t in step_s.items() if n != 1}, batch, "weak"),
                        "without a one-rank time there is nothing to measure against; raise ValueError.")
    _raises_value_error(efficiency, "efficiency", (step_s, batch, "sideways"),
                        "a mode neither 'weak' nor 'strong' must raise ValueError, not be taken for one of them.")


def _compare_efficiency(result: Mapping, step_s: dict, batch: int, mode: str) -> None:
    """Fail with the classic mistake's name when ``result`` differs from the definition."""
    right = efficiency_reference(step_s, batch, mode)

    def matches(numbers):
        return all(math.isclose(float(result[n]), numbers[n], rel_tol=1e-9) for n in step_s)

    if matches(right):
        return
    hint = next((hint for hint, numbers in _efficiency_mistakes(step_s, batch, mode) if matches(numbers)),
                "efficiency = throughput(n) / (n · throughput(1)), throughput = samples per step / seconds per step")
    n = next(n for n in step_s if not math.isclose(float(result[n]), right[n], rel_tol=1e-9))
    raise AssertionError(f"efficiency({step_s}, {batch}, {mode!r})[{n}] is {float(result[n]):.6g}, expected "
                         f"{right[n]:.6g}: {hint}.")


# ---------------------------------------------------------------------------------------------
# Q2: activation checkpointing's peak
# ---------------------------------------------------------------------------------------------

PEAK_CASES = ((8, 9, 0), (8, 9, 1), (8, 9, 2), (8, 9, 4), (8, 9, 8))   # the chapter's 8 blocks of 9 units


def peak_reference(blocks: int, per_block: int, k: int) -> int:
    """Units held at the peak: every activation without checkpointing (``k = 0``), else one input per
    segment of ``k`` blocks (``ceil(blocks / k)`` segments) plus the longest segment recomputed."""
    if k == 0:
        return blocks * per_block
    return math.ceil(blocks / k) + min(k, blocks) * per_block


def _peak_mistakes() -> list[tuple[str, Callable[[int, int, int], int]]]:
    """Classic wrong counts (for ``k > 0``): what the student did, and the count it gives."""
    def checkpointed(count):
        return lambda b, p, k: peak_reference(b, p, k) if k == 0 else count(b, p, k)

    def segments(b, k):
        return math.ceil(b / k)

    return [(hint, checkpointed(count)) for hint, count in [
        ("the last, shorter segment keeps its input too: there are ceil(blocks / k) segments, not blocks // k",
         lambda b, p, k: b // k + min(k, b) * p),
        ("during backward one segment is recomputed, and its k * per_block activations are held at the same "
         "time as the segment inputs: add them", lambda b, p, k: segments(b, k)),
        ("the whole segment of k blocks is recomputed at once: add k * per_block, not one block's per_block",
         lambda b, p, k: segments(b, k) + p),
        ("a segment keeps only its input, 1 unit, not a whole block's per_block units",
         lambda b, p, k: segments(b, k) * p + min(k, b) * p),
        ("when k is larger than blocks there is one segment of all the blocks: the recomputed segment holds "
         "min(k, blocks) blocks", lambda b, p, k: segments(b, k) + k * p),
        ("count the longest segment: the peak comes when a full segment of k blocks is recomputed, not the "
         "last, shorter one", lambda b, p, k: segments(b, k) + (b % k or k) * p),
        ("off by one: every segment keeps its input, the one being recomputed included (ceil(blocks / k) units)",
         lambda b, p, k: segments(b, k) - 1 + min(k, b) * p),
        ("off by one: count ceil(blocks / k) segment inputs, no more",
         lambda b, p, k: segments(b, k) + 1 + min(k, b) * p),
    ]]


def check_peak_activations(peak_activations: Callable, *,
                           cases: Sequence[tuple[int, int, int]] = PEAK_CASES, best_for: int | None = None) -> None:
    """Check ``peak_activations`` on ``cases`` of ``(blocks, per_block, k)``; with ``best_for``, also that
    the ``k`` it makes smallest for ``best_for`` blocks of 1 unit is the right one."""
    no_checkpointing = "k = 0 means no checkpointing: every block keeps its activations, blocks * per_block."
    got = {case: _call(peak_activations, "peak_activations", *case, why=no_checkpointing if case[2] == 0 else "")
           for case in cases}
    for case, value in got.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
            raise AssertionError(f"peak_activations{case} returned {value!r}: return a whole number of units.")
    wrong = [case for case in cases if got[case] != peak_reference(*case)]
    if wrong:
        blocks, per_block, k = case = wrong[0]
        hint = no_checkpointing if k == 0 else next(
            (hint for hint, count in _peak_mistakes() if all(got[c] == count(*c) for c in wrong)),
            "the peak is the segment inputs (1 unit each) plus one recomputed segment's activations")
        raise AssertionError(f"peak_activations({blocks}, {per_block}, {k}) is {got[case]!r}, expected "
                             f"{peak_reference(*case)}: {hint}.")
    if best_for is not None:
        ks = range(1, best_for + 1)
        best = min(ks, key=lambda k: _call(peak_activations, "peak_activations", best_for, 1, k))
        want = min(ks, key=lambda k: peak_reference(best_for, 1, k))
        if best != want:
            raise AssertionError(f"for {best_for} blocks of 1 unit your counts are smallest at k = {best}, but the "
                                 f"peak is smallest at k = {want} (about sqrt(blocks)): segments + k.")


# ---------------------------------------------------------------------------------------------
# Q3: a ring all-reduce from point-to-point messages
# ---------------------------------------------------------------------------------------------

COLLECTIVES = ("all_reduce", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
               "reduce_scatter_tensor", "broadcast", "all_to_all", "all_to_all_single", "gather", "scatter",
               "all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list",
               "send_object_list", "recv_object_list")
SENDS, RECVS = ("send", "isend"), ("recv", "irecv")


def rank_input(rank: int, numel: int, seed: int) -> torch.Tensor:
    """Rank ``rank``'s tensor: ``numel`` seeded values, different on every rank (float64, exact sums)."""
    generator = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.randint(-50, 50, (numel,), generator=generator).double()


class _Recorder:
    """Wraps ``torch.distributed``'s point-to-point functions and collectives while installed.

    ``messages``: one ``("send" | "recv", peer, numel)`` per message, in call order (a P2POp counts
    when ``batch_isend_irecv`` runs it); ``collectives``: names of the collectives called."""

    def __init__(self):
        self.messages: list[tuple[str, int | None, int]] = []
        self.collectives: list[str] = []
        names = (*COLLECTIVES, *SENDS, *RECVS, "P2POp", "batch_isend_irecv")
        self.real = {name: getattr(dist, name) for name in names if hasattr(dist, name)}

    def _record(self, kind: str, tensor, peer) -> None:
        self.messages.append((kind, peer, tensor.numel() if isinstance(tensor, torch.Tensor) else -1))

    def _p2p(self, name: str):
        real, kind = self.real[name], "send" if name in SENDS else "recv"

        def call(*args, **kwargs):
            tensor = args[0] if args else kwargs.get("tensor")
            names = ("dst", "group_dst") if kind == "send" else ("src", "group_src")
            peer = args[1] if len(args) > 1 else next((kwargs[n] for n in names if kwargs.get(n) is not None), None)
            self._record(kind, tensor, peer)
            return real(*args, **kwargs)
        return call

    def _collective(self, name: str):
        real = self.real[name]

        def call(*args, **kwargs):
            self.collectives.append(name)
            return real(*args, **kwargs)
        return call

    def _p2p_op(self, *args, **kwargs):
        """A real P2POp whose ``op`` is the real isend/irecv (the student passes our wrappers)."""
        op = args[0] if args else kwargs.pop("op")
        real_op = self.real["isend"] if op in (dist.isend, self.real["isend"]) else (
            self.real["irecv"] if op in (dist.irecv, self.real["irecv"]) else op)
        return self.real["P2POp"](real_op, *args[1:], **kwargs)

    def _batch(self, ops):
        for op in ops:
            self._record("send" if op.op is self.real["isend"] else "recv", op.tensor, op.peer)
        return self.real["batch_isend_irecv"](ops)

    def install(self) -> None:
        for name in self.real:
            if name in SENDS or name in RECVS:
                setattr(dist, name, self._p2p(name))
            elif name in COLLECTIVES:
                setattr(dist, name, self._collective(name))
        dist.P2POp = self._p2p_op
        dist.batch_isend_irecv = self._batch

    def remove(self) -> None:
        for name, fn in self.real.items():
            setattr(dist, name, fn)


def ring_rank(rank: int, world_size: int, student_file: str, *, numel: int, seed: int):
    """Harness (one rank): the student's ``ring_all_reduce`` on this rank's tensor, every message recorded.

    Returns ``(result, collectives, messages)``: the tensor after the call, the names of the
    collectives called, and the point-to-point messages as ``(kind, peer, numel)``.
    """
    recorder = _Recorder()
    recorder.install()
    try:
        ring = student_function(load_student(student_file), "ring_all_reduce")
        tensor = rank_input(rank, numel, seed)
        ring(tensor)
        return tensor, recorder.collectives, recorder.messages
    finally:
        recorder.remove()


def check_ring_all_reduce(student_file: str, *, world_size: int = 4, numel: int = 10, seed: int = 0) -> None:
    """Run the student's ring on ``world_size`` ranks (``numel`` numbers each, need not divide evenly):
    every rank must hold the sum of all inputs, computed by a ring (see the module's docstring)."""
    results = run_ranks(ring_rank, student_file, world_size, numel=numel, seed=seed)
    inputs = [rank_input(r, numel, seed) for r in range(world_size)]
    total = torch.stack(inputs).sum(0)
    used = sorted({name for _, names, _ in results for name in names})
    if used:
        raise AssertionError(f"you called dist.{', dist.'.join(used)}: the point is to build the all-reduce "
                             "yourself, from dist.send/recv (or isend/irecv) between ring neighbours only.")
    messages = [m for _, _, m in results]
    not_a_ring = ring_peers_problem(messages, world_size)
    if not_a_ring:
        raise AssertionError(f"not a ring: {not_a_ring}")
    for rank, (result, _, _) in enumerate(results):
        if not torch.equal(result, total):
            hint = diagnose(result, inputs[rank], total, rank, world_size, inputs)
            raise AssertionError(f"rank {rank} of {world_size}: {hint}")
    problem = ring_traffic_problem(messages, world_size, numel)
    if problem:
        raise AssertionError(f"the sums are right, but {problem}")


def ring_peers_problem(messages: Sequence[Sequence[tuple[str, int | None, int]]], world_size: int) -> str | None:
    """Why the ranks' messages (by rank: ``(kind, peer, numel)``) do not go between ring neighbours only."""
    for rank, mine in enumerate(messages):
        if any(peer is None for _, peer, _ in mine):
            return (f"rank {rank} received from any source (src=None): name the left neighbour, "
                    f"(rank - 1) % world_size, so that chunks cannot arrive out of turn.")
    far = [(rank, kind, peer) for rank, mine in enumerate(messages) for kind, peer, _ in mine
           if peer not in ((rank + 1) % world_size, (rank - 1) % world_size)]
    if not far:
        return None
    rank, kind, peer = far[0]
    sent_to = [{peer for kind, peer, _ in mine if kind == "send"} for mine in messages]
    others = [set(range(world_size)) - {rank} for rank in range(world_size)]
    ring = (" In a ring each rank sends only to its right neighbour (rank + 1) % world_size and receives from "
            "its left one, so every link carries the same 2 (world_size - 1) / world_size of the tensor.")
    if sent_to[0] == others[0] and all(sent <= {0} for sent in sent_to[1:]):
        return ("everything went through rank 0 (a reduce to rank 0, then a broadcast from it): rank 0's link "
                f"carries world_size - 1 = {world_size - 1} whole tensors each way, and grows with the ranks." + ring)
    if any(sent == other for sent, other in zip(sent_to, others)):
        who = next(r for r in range(world_size) if sent_to[r] == others[r])
        return (f"rank {who} sent to every other rank ({sorted(others[who])}): each rank's link then carries "
                "world_size - 1 whole tensors." + ring)
    verb = "sent to" if kind == "send" else "received from"
    return f"rank {rank} {verb} rank {peer}, which is not one of its neighbours." + ring


def ring_traffic_problem(messages: Sequence[Sequence[tuple[str, int | None, int]]], world_size: int,
                         numel: int) -> str | None:
    """Why the ranks' messages are not a ring's: one chunk (at most ``numel / world_size`` numbers, rounded
    up) per message, ``2 (world_size - 1)`` sends and as many receives on every rank."""
    chunk = -(-numel // world_size)
    steps = 2 * (world_size - 1)
    for rank, mine in enumerate(messages):
        for kind, peer, size in mine:
            if not 0 <= size <= chunk:
                verb = "sent" if kind == "send" else "received"
                return (f"rank {rank} {verb} {size} numbers in one message to or from rank {peer}: each ring step "
                        f"passes one chunk, numel / world_size = {numel} / {world_size} ≈ {numel / world_size:.3g} "
                        "numbers (tensor_split's sizes). Passing whole tensors around the ring sends world_size "
                        "times more than a ring all-reduce needs.")
    for rank, mine in enumerate(messages):
        sends = sum(kind == "send" for kind, _, _ in mine)
        recvs = len(mine) - sends
        if sends != steps or recvs != steps:
            return (f"rank {rank} sent {sends} messages and received {recvs}: a ring all-reduce takes "
                    f"2 (world_size - 1) = {steps} steps, world_size - 1 of reduce-scatter and world_size - 1 "
                    "of all-gather, one send and one receive each.")
    return None


def diagnose(result: torch.Tensor, own: torch.Tensor, total: torch.Tensor, rank: int, world_size: int,
             inputs: Sequence[torch.Tensor] = ()) -> str:
    """What one rank's result says about the mistake (``own``: its input, ``total``: the sum,
    ``inputs``: every rank's input, by rank)."""
    if torch.equal(result, own):
        return ("the tensor is still this rank's own input: nothing was reduced. Write ring_all_reduce's body: "
                "world_size - 1 reduce-scatter steps, then world_size - 1 all-gather steps.")
    chunks = [list(t.tensor_split(world_size)) for t in (result, total)]
    done = [i for i, (r, t) in enumerate(zip(*chunks)) if torch.equal(r, t)]
    if done == [(rank + 1) % world_size]:
        return (f"only chunk {done[0]} holds the full sum: that is where a reduce-scatter ends on this rank. "
                "The all-gather is missing: world_size - 1 more steps, each sending on the chunk completed last.")
    if done:
        return (f"chunks {done} hold the full sum but the others do not: check which chunk each step sends "
                "and which it receives (in reduce-scatter step s, rank r sends chunk (r - s) % world_size "
                "to its right and adds the one from its left into chunk (r - s - 1) % world_size).")
    pieces = [list(t.tensor_split(world_size)) for t in inputs]
    if pieces and all(any(torch.equal(got, p[i]) for p in pieces)
                      for i, got in enumerate(result.tensor_split(world_size))):
        return ("every chunk holds one rank's own numbers, not their sum: the additions never reached the tensor. "
                "`chunk = chunk + arrived` makes a new tensor; add in place (`chunk += arrived`) so that the "
                "chunks, views of `tensor`, write into it.")
    wrong = int((result != total).nonzero()[0])
    return (f"element {wrong} is {result[wrong].item():g}, but the sum over the ranks is {total[wrong].item():g}. "
            "Every element must be added exactly once from every rank.")


# ---------------------------------------------------------------------------------------------
# The planted wrong answers (tools/mutants.py, tests/test_mutants.py)
# ---------------------------------------------------------------------------------------------

_RING_HEAD = '''%%writefile work/ex12_ring.py
import torch
import torch.distributed as dist


def ring_all_reduce(tensor):
    """Sum `tensor` over all ranks, in place, with messages between ring neighbours only."""
    rank, world = dist.get_rank(), dist.get_world_size()
'''
_WEAK = 'samples = batch * n if mode == "weak" else batch'
_RATIO = "throughput(n) / (n * throughput(1))"

MUTANTS = {
    "q1": (
        Mutant("weak and strong swapped", "weak and strong scaling are confused",
               edits=((_WEAK, 'samples = batch * n if mode == "strong" else batch'),)),
        Mutant("efficiency inverted", "your efficiency is inverted",
               edits=((_RATIO, "(n * throughput(1)) / throughput(n)"),)),
        Mutant("speed-up, not efficiency", "that is the speed-up", edits=((_RATIO, "throughput(n) / throughput(1)"),)),
        Mutant("per-rank throughput", "each rank's share of the throughput",
               edits=((_WEAK, 'samples = batch * n if mode == "weak" else batch / n'),)),
        Mutant("mode ignored", "the mode must change", edits=((_WEAK, "samples = batch * n"),)),
        Mutant("no one-rank check", "without a one-rank time",
               edits=(('    if 1 not in step_s:\n        raise ValueError("efficiency is measured against one rank: '
                       'time ranks=1 too")\n', ""),)),
        Mutant("unknown mode accepted", "neither 'weak' nor 'strong'",
               edits=(("    if mode not in (\"weak\", \"strong\"):\n        raise ValueError(f\"mode must be 'weak' or "
                       "'strong', not {mode!r}\")\n", ""),)),
        Mutant("one rank left out", "1 included", edits=(("for n in step_s}", "for n in step_s if n > 1}"),)),
    ),
    "q2": (
        Mutant("blocks // k segments", "the last, shorter segment keeps its input too",
               edits=(("math.ceil(blocks / k)", "blocks // k"),)),
        Mutant("no recomputed segment", "one segment is recomputed", edits=((" + min(k, blocks) * per_block", ""),)),
        Mutant("one block recomputed", "the whole segment of k blocks",
               edits=(("min(k, blocks) * per_block", "per_block"),)),
        Mutant("segment inputs as blocks", "a segment keeps only its input",
               edits=(("return segments + ", "return segments * per_block + "),)),
        Mutant("k larger than blocks", "when k is larger than blocks", edits=(("min(k, blocks)", "k"),)),
        Mutant("last segment, not longest", "count the longest segment",
               edits=(("min(k, blocks)", "(blocks % k or k)"),)),
        Mutant("one segment input too few", "the one being recomputed included",
               edits=(("return segments + ", "return segments - 1 + "),)),
        Mutant("k = 0 not special", "k = 0 means no checkpointing",
               edits=(("    if k == 0:\n        return blocks * per_block\n", ""),)),
    ),
    "q3": (
        Mutant("dist.all_reduce", "you called dist.all_reduce", source=_RING_HEAD + "    dist.all_reduce(tensor)\n"),
        Mutant("all_gather then sum", "you called dist.all_gather", source=_RING_HEAD + """\
    everyone = [torch.empty_like(tensor) for _ in range(world)]
    dist.all_gather(everyone, tensor)
    tensor.copy_(torch.stack(everyone).sum(0))
"""),
        Mutant("reduce to rank 0, broadcast", "everything went through rank 0", source=_RING_HEAD + """\
    if rank == 0:
        for other in range(1, world):
            arrived = torch.empty_like(tensor)
            dist.recv(arrived, other)
            tensor += arrived
        for other in range(1, world):
            dist.send(tensor, other)
    else:
        dist.send(tensor, 0)
        dist.recv(tensor, 0)
"""),
        Mutant("everyone sends to everyone", "sent to every other rank", source=_RING_HEAD + """\
    others = [r for r in range(world) if r != rank]
    arrived = [torch.empty_like(tensor) for _ in others]
    sending = [dist.isend(tensor, r) for r in others]
    for buffer, r in zip(arrived, others):
        dist.recv(buffer, r)
    for s in sending:
        s.wait()
    for buffer in arrived:
        tensor += buffer
"""),
        Mutant("whole tensors around the ring", "passes one chunk", source=_RING_HEAD + """\
    right, left = (rank + 1) % world, (rank - 1) % world
    passing, total = tensor.clone(), tensor.clone()
    for step in range(world - 1):
        arrived = torch.empty_like(passing)
        sending = dist.isend(passing, right)
        dist.recv(arrived, left)
        sending.wait()
        total += arrived
        passing = arrived
    tensor.copy_(total)
"""),
        Mutant("all-gather missing", "The all-gather is missing",
               edits=(("""    for step in range(world - 1):                        # all-gather
        sending = dist.isend(chunks[(rank + 1 - step) % world], right)
        dist.recv(chunks[(rank - step) % world], left)
        sending.wait()
""", ""),)),
        Mutant("one reduce-scatter step too many", "2 (world_size - 1) = ",
               edits=(("for step in range(world - 1):                        # reduce-scatter",
                       "for step in range(world):                            # reduce-scatter"),)),
        Mutant("all-gather sends the wrong chunk", "of another size",
               edits=(("chunks[(rank + 1 - step) % world], right", "chunks[(rank - step) % world], right"),)),
        Mutant("sum not written back", "the additions never reached the tensor",
               edits=(("theirs += arrived", "theirs = theirs + arrived"),)),
    ),
}
