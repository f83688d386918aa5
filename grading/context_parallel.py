"""Exercises 14: online-softmax merging, the zig-zag layout, and ring attention's forward pass.

Q1, ``merge(out_a, lse_a, out_b, lse_b)``: combine attention over two blocks of keys into attention
over both (:func:`check_merge`, one process): ordinary scores, scores so large that ``exp`` of a
log-sum-exp overflows, and a fully masked block. Q2, ``zigzag(rank, world_size)``: the two chunk ids
a rank holds (:func:`check_zigzag`). Q3, ``ring_forward(q, k, v)``: rank ``r`` holds the queries,
keys and values of positions ``r·c .. (r+1)·c - 1`` of one sequence; pass K/V round the ring,
attend to every block at or before its own, merge. The check (:func:`check_ring_forward`) runs it on
gloo ranks, records every message and collective each rank issues (the answer must be a ring: one
block's K/V per hop, to rank + 1, from rank - 1, t - 1 hops, no collective) and compares every
rank's output with its part of ``scaled_dot_product_attention(is_causal=True)`` on one process.

``MUTANTS`` lists the planted wrong answers each grader must give 0 (``tools/mutants.py``).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from .mutant import Mutant
from .ranks import run_ranks
from .student import load_student, student_function


def block_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool):
    """Attention of queries q (B, H, c, hd) to one block of keys/values: (output, log-sum-exp (B, H, c))."""
    scores = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    if causal:
        scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
    lse = scores.logsumexp(-1)
    return (scores - lse[..., None]).exp() @ v, lse


def _qkv(shape: tuple, seed: int):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator, dtype=torch.float64) for _ in range(3)]


# --- Q1: merge ------------------------------------------------------------------------------------

def _biased_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: float):
    """Attention of q (B, H, n, hd) to k, v (B, H, m, hd) with ``bias`` added to every score:
    (out (B, H, n, hd), lse (B, H, n)). A bias of -inf masks the whole block: out 0, lse -inf."""
    scores = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5 + bias
    lse = scores.logsumexp(-1)
    if math.isinf(bias) and bias < 0:
        return torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype), lse
    return (scores - lse[..., None]).exp() @ v, lse


# (name, bias of block a, bias of block b) for a given size of "big" scores
def _merge_cases(big: float) -> list[tuple[str, float, float]]:
    return [("ordinary scores", 0.0, 0.0),
            (f"large scores (every score raised by about {big:g}, as in a long sequence of confident "
             "attention)", big, big - 2.0),
            ("block b fully masked (lse_b = -inf, out_b = 0)", 0.0, -math.inf),
            ("block a fully masked (lse_a = -inf, out_a = 0)", -math.inf, 0.0)]


def _call_merge(merge: Callable, args: tuple, case: str):
    try:
        got = merge(*(a.clone() for a in args))
    except Exception as error:   # noqa: BLE001 - the student's error, said in their terms
        raise AssertionError(f"merge raised {type(error).__name__} with {case}: {error}") from None
    if got is None or got is Ellipsis or not isinstance(got, tuple) or len(got) != 2:
        raise AssertionError(f"merge returned {type(got).__name__}: return a tuple (out, lse).")
    return got


def _merge_hint(case: str, out, lse, oa, la, ob, lb, want_out, want_lse) -> str | None:
    """Why ``(out, lse)`` differs from the merged attention, or None when it does not."""
    if not isinstance(out, torch.Tensor) or not isinstance(lse, torch.Tensor):
        return "return two tensors, (out, lse)"
    if out.shape != want_out.shape or lse.shape != want_lse.shape:
        return (f"out must be shaped like out_a {tuple(want_out.shape)} and lse like lse_a {tuple(want_lse.shape)}; "
                f"got {tuple(out.shape)} and {tuple(lse.shape)}")
    out, lse = out.double(), lse.double()   # a float32 answer is compared, not refused with a dtype error
    lse_ok = torch.allclose(lse, want_lse, atol=1e-9, rtol=1e-12, equal_nan=False)
    out_ok = torch.allclose(out, want_out, atol=1e-9, rtol=1e-9)
    if lse_ok and out_ok:
        return None
    broken = not (torch.isfinite(out).all() and (torch.isfinite(lse) | torch.isinf(want_lse)).all())
    if broken and case.startswith("large"):
        return ("your result holds inf or nan: exp overflows once a log-sum-exp passes about 709 (float64; 88 in "
                "float32), so never exponentiate an lse itself, only differences such as lse_a - lse, which are "
                "<= 0: torch.logaddexp(lse_a, lse_b) for the lse, exp(lse_a - lse) and exp(lse_b - lse) as weights")
    if broken:
        return ("a fully masked block (lse -inf, output 0) must leave the other block's (out, lse) unchanged, but "
                "yours gives inf or nan: -inf - (-inf) and inf - inf are nan; torch.logaddexp(lse_a, lse_b) and the "
                "weights exp(lse_a - lse), exp(lse_b - lse) handle -inf")
    if not lse_ok:
        if torch.allclose(lse, torch.maximum(la, lb)):
            return "lse: the max of the two log-sum-exps is not their sum in log space: use torch.logaddexp"
        if torch.allclose(lse, la + lb):
            return ("lse: lse_a + lse_b is the log of the *product* of the blocks' exp-sums; you want the log of "
                    "their sum: torch.logaddexp(lse_a, lse_b)")
        return "lse: the merged log-sum-exp is logaddexp(lse_a, lse_b), the log of the sum of both blocks' exp-sums"
    if torch.allclose(out, (oa + ob) / 2, atol=1e-9):
        return ("out: the plain average weighs both blocks equally; a block with larger scores must count more: "
                "weight by exp(lse_block - lse_merged)")
    if torch.allclose(out, oa + ob, atol=1e-9):
        return ("out: each output is normalised over its own block only: rescale by exp(lse_block - lse_merged) "
                "before adding")
    swapped = oa * (lb - want_lse).exp()[..., None] + ob * (la - want_lse).exp()[..., None]
    if torch.allclose(out, swapped, atol=1e-9):
        return ("out: the weights are swapped: block a's output is weighted by block a's own share, "
                "exp(lse_a - lse), and block b's by exp(lse_b - lse)")
    return "out: weight each block's output by its share of the total, exp(lse_block - lse_merged), then add the two"


def check_merge(merge: Callable, *, shape: tuple = (2, 3, 5, 4), keys: tuple = (6, 7), seed: int = 0,
                big: float = 1000.0) -> None:
    """``merge`` of attention over two key blocks must equal attention over their concatenation.

    ``shape``: the queries' (B, H, n, hd); ``keys``: the two blocks' key counts. Four cases: ordinary
    scores, every score raised by ``big`` (log-sum-exps near ``big``: exp of one overflows), and each
    block fully masked in turn (out 0, lse -inf: the merge must return the other block)."""
    q, _, _ = _qkv(shape, seed)
    k, v = _qkv((*shape[:2], sum(keys), shape[3]), seed + 1)[:2]
    ka, kb = k.split(list(keys), dim=2)
    va, vb = v.split(list(keys), dim=2)
    for case, bias_a, bias_b in _merge_cases(big):
        oa, la = _biased_attention(q, ka, va, bias_a)
        ob, lb = _biased_attention(q, kb, vb, bias_b)
        want_out, want_lse = _merged_reference(q, (ka, kb), (va, vb), (bias_a, bias_b))
        out, lse = _call_merge(merge, (oa, la, ob, lb), case)
        hint = _merge_hint(case, out, lse, oa, la, ob, lb, want_out, want_lse)
        if hint is not None:
            raise AssertionError(f"merge is wrong with {case}: {hint}.")


def _merged_reference(q, ks, vs, biases):
    """Attention over both blocks at once, each block's scores raised by its bias."""
    scores = torch.cat([q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5 + b for k, b in zip(ks, biases)], dim=-1)
    lse = scores.logsumexp(-1)
    return (scores - lse[..., None]).exp() @ torch.cat(vs, dim=2), lse


# --- Q2: zig-zag ----------------------------------------------------------------------------------

def _held(zigzag: Callable, rank: int, world_size: int) -> list[int]:
    """``zigzag(rank, world_size)`` as a list of ints, or the student's error as feedback."""
    try:
        got = zigzag(rank, world_size)
    except Exception as error:   # noqa: BLE001
        raise AssertionError(f"zigzag({rank}, {world_size}) raised {type(error).__name__}: {error}") from None
    if got is None or got is Ellipsis:
        raise AssertionError("zigzag returned nothing: return a list of two chunk ids for the rank.")
    try:
        ids = [int(c) for c in got]
    except (TypeError, ValueError):
        raise AssertionError(f"zigzag({rank}, {world_size}) returned {got!r}: return a list of two int chunk "
                             "ids.") from None
    if len(ids) != 2:
        raise AssertionError(f"zigzag({rank}, {world_size}) returned {ids}: each rank holds exactly two chunks.")
    return ids


def check_zigzag(zigzag: Callable, world_size: int) -> None:
    """``zigzag(rank, world_size)`` must hand out every one of the 2t chunks once, in sequence order
    within a rank, and give every rank the same number of causal (query chunk, key chunk) blocks, 2t + 1."""
    from course_utils.context_parallel import pairs

    t = world_size
    held = {rank: _held(zigzag, rank, t) for rank in range(t)}
    flat = sorted(c for h in held.values() for c in h)
    if flat != list(range(2 * t)):
        hint = f"every chunk 0..{2 * t - 1} must be held by exactly one rank"
        if t > 2 and _held(zigzag, 0, t) == _held(zigzag, 0, 2):
            hint = ("zigzag(0, t) gives the same chunks for every t: the late chunk depends on the number of "
                    "chunks, 2 * world_size")
        elif flat == list(range(1, 2 * t + 1)) or max(flat) == 2 * t:
            hint = (f"chunk ids start at 0: with {2 * t} chunks the last is {2 * t - 1}, so rank r's late chunk is "
                    "2t - 1 - r")
        elif max(flat) < t:
            hint = (f"every id is below {t}: that mirrors rank r within the first half only; the late chunk mirrors r "
                    f"in the whole sequence of {2 * t} chunks, 2t - 1 - r")
        raise AssertionError(f"with {t} ranks the chunks held are {flat}: {hint}.")
    unordered = [r for r in range(t) if held[r] != sorted(held[r])]
    if unordered:
        raise AssertionError(f"with {t} ranks, rank {unordered[0]} returns {held[unordered[0]]}: list the two "
                             "chunks in sequence order, the early chunk first (a rank's tokens are its chunks "
                             "concatenated in that order, so its positions must increase).")
    work = [sum(len(pairs(held[r], held[src])) for src in range(t)) for r in range(t)]
    if work != [2 * t + 1] * t:
        hint = "pair an early chunk with a late one, so that each rank's two causal rows add up to the same"
        if all(held[r] == [2 * r, 2 * r + 1] for r in range(t)):
            hint = "that is the contiguous layout, the unbalanced one: " + hint
        elif all(held[r] == [r, r + t] for r in range(t)):
            hint = ("chunk r and chunk r + t: both grow with r, so later ranks still do more; the late chunk must "
                    "shrink as r grows, 2t - 1 - r")
        raise AssertionError(f"with {t} ranks the blocks each rank computes are {work}, not {2 * t + 1} each: {hint}.")


# --- Q3: ring attention ---------------------------------------------------------------------------

class _Messages(TorchDispatchMode):
    """Records what this rank sends (peer, the values), receives (peer, element count), and every
    collective it calls, as the dispatcher sees them (``dist.send``, ``isend``, ``batch_isend_irecv``
    all reach ``c10d.send`` / ``c10d.recv_``)."""

    def __init__(self):
        super().__init__()
        self.sent: list[tuple[int, torch.Tensor]] = []
        self.received: list[tuple[int, int]] = []
        self.collectives: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace in ("c10d", "_c10d_functional"):
            name = func._overloadpacket.__name__
            if name == "send":
                self.sent.append((int(args[2]), torch.cat([t.detach().reshape(-1) for t in args[0]]).clone()))
            elif name in ("recv_", "recv_any_source_"):
                peer = int(args[2]) if name == "recv_" else -1
                self.received.append((peer, sum(t.numel() for t in args[0])))
            elif name not in ("barrier", "monitored_barrier_", "wait_tensor"):
                self.collectives.append(name.rstrip("_"))
        return func(*args, **(kwargs or {}))


def ring_rank(rank: int, world_size: int, student_file: str, *, shape: tuple, seed: int) -> dict[str, Any]:
    """Harness (one rank): the student's ``ring_forward`` on this rank's chunk of q, k, v, and what
    the rank sent, received and called on the way."""
    ring_forward = student_function(load_student(student_file), "ring_forward")
    q, k, v = (t.chunk(world_size, dim=2)[rank].contiguous() for t in _qkv(shape, seed))
    with _Messages() as seen:
        out = ring_forward(q, k, v)
    return {"out": out, "sent": seen.sent, "received": seen.received, "collectives": seen.collectives}


def _with_later_chunks(q, k, v, rank: int, c: int) -> torch.Tensor:
    """The output of a ring that masks the own chunk but also merges every later rank's chunk."""
    scores = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    future = torch.zeros_like(scores, dtype=torch.bool)
    future[..., rank * c:(rank + 1) * c] = torch.ones(c, c, dtype=torch.bool).triu(1)
    return scores.masked_fill(future, float("-inf")).softmax(-1) @ v


def _ring_problem(rank: int, world_size: int, seen: dict, k: torch.Tensor, v: torch.Tensor) -> str | None:
    """What is not a ring in what ``rank`` sent and called, or None. ``k``, ``v``: the whole sequence's."""
    t = world_size
    nxt, prev = (rank + 1) % t, (rank - 1) % t
    if seen["collectives"]:
        names = sorted(set(seen["collectives"]))
        if any("gather" in n or n == "broadcast" for n in names):
            return (f"it called {', '.join(names)}: you gathered every rank's K/V: that is an all-gather, not a ring. "
                    "Every rank then holds the whole sequence's K/V, the memory ring attention exists to avoid; pass "
                    "one block at a time to rank + 1 with isend/irecv")
        return (f"it called {', '.join(names)}: a ring needs no collective, only sends to rank + 1 and receives "
                "from rank - 1")
    if not seen["sent"]:
        return ("it sent nothing, so each rank attends to its own chunk only: pass K and V round the ring (send to "
                "rank + 1, receive from rank - 1) and merge in every earlier chunk")
    wrong_to = sorted({p for p, _ in seen["sent"] if p != nxt})
    wrong_from = sorted({p for p, _ in seen["received"] if p != prev})
    if wrong_to or wrong_from:
        return (f"it sent to rank(s) {wrong_to or [nxt]} and received from {wrong_from or [prev]}: in the ring K/V "
                f"go to rank + 1 (here {nxt}) and come from rank - 1 (here {prev}), so that at step s a rank holds "
                "rank (rank - s)'s block")
    c = k.shape[2] // t
    block = 2 * k[:, :, :c].numel()
    values = torch.cat([x for _, x in seen["sent"]])
    hops, extra = divmod(values.numel(), block)
    sizes = sorted({x.numel() for _, x in seen["sent"]})
    if extra or any(s not in (block // 2, block) for s in sizes):
        return (f"it sent messages of {sizes} values; each message must carry one block's K and V ({block} values) "
                f"or one of them ({block // 2})")
    if hops == t:
        return (f"one hop too many: K/V went round {t} times; after t - 1 = {t - 1} hops every block has visited every "
                "rank (the t-th only brings the rank's own block home)")
    if hops != t - 1:
        return f"it forwarded {hops} blocks' K/V; every rank forwards t - 1 = {t - 1} of them, one per hop"
    blocks = {j: torch.cat([x[:, :, j * c:(j + 1) * c].reshape(-1) for x in (k, v)]).sort().values for j in range(t)}
    for hop, part in enumerate(values.split(block)):
        origin = (rank - hop) % t
        if torch.equal(part.sort().values, blocks[origin]):
            continue
        if torch.equal(part.sort().values, blocks[rank]):
            return (f"at hop {hop + 1} it sent its own K/V again: forward the block you just received (rank "
                    f"{origin}'s), so that it travels on round the ring")
        return (f"at hop {hop + 1} it sent something other than rank {origin}'s K/V (the block it received one hop "
                "before)")
    return None


def check_ring_forward(student_file: str, *, world_size: int = 2, shape: tuple = (2, 3, 16, 4), seed: int = 0) -> None:
    """Run the student's ``ring_forward`` on ``world_size`` ranks; ``shape`` is the whole sequence's
    (B, H, T, hd). Each rank must pass K/V round a ring (see :func:`_ring_problem`) and its output
    must equal its part of full causal attention."""
    if shape[2] % world_size:
        raise ValueError(f"sequence length {shape[2]} must divide over {world_size} ranks")
    results = run_ranks(ring_rank, student_file, world_size, shape=shape, seed=seed)
    q, k, v = _qkv(shape, seed)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True).chunk(world_size, dim=2)
    for rank, seen in enumerate(results):
        got = seen["out"]
        if got is None or got is Ellipsis:
            raise AssertionError(f"rank {rank}: ring_forward returned {got!r}: it still does nothing.")
        if not isinstance(got, torch.Tensor) or got.shape != want[rank].shape:
            raise AssertionError(f"rank {rank}: ring_forward must return a tensor shaped like q, "
                                 f"{tuple(want[rank].shape)}; got {getattr(got, 'shape', type(got).__name__)}.")
        seen["out"] = got.detach().double()
    for rank, seen in enumerate(results):
        problem = _ring_problem(rank, world_size, seen, k, v) if world_size > 1 else None
        if problem:
            raise AssertionError(f"rank {rank} of {world_size} is not a ring: {problem}.")
    right = [torch.allclose(seen["out"], want[rank], atol=1e-9) for rank, seen in enumerate(results)]
    for rank, seen in enumerate(results):
        if not right[rank]:
            got = seen["out"]
            raise AssertionError(f"rank {rank} of {world_size}: the output differs from full causal attention by up to "
                                 f"{(got - want[rank]).abs().max().item():.2g}: "
                                 f"{_ring_value_hint(rank, world_size, got, q, k, v, right)}.")


def _ring_value_hint(rank: int, world_size: int, got, q, k, v, right: list[bool]) -> str:
    """The classic cause of a wrong output on ``rank``; ``right``: which ranks are right."""
    everything = F.scaled_dot_product_attention(q, k, v).chunk(world_size, dim=2)[rank]
    c = q.shape[2] // world_size
    qs, ks, vs = (t[:, :, rank * c:(rank + 1) * c] for t in (q, k, v))
    if torch.allclose(got, block_attention(qs, ks, vs, True)[0], atol=1e-9):
        return ("that is attention to this rank's own chunk only: merge in every earlier chunk that arrives round the "
                "ring")
    if torch.allclose(got, everything, atol=1e-9):
        return ("that is attention without the causal mask: skip chunks that come from later ranks, and mask the "
                "future within this rank's own chunk")
    if torch.allclose(got, _with_later_chunks(qs, k, v, rank, c), atol=1e-9):
        return ("the chunks of later ranks are merged in: they hold future positions; attend only to K/V that came "
                "from ranks before this one (and to the own chunk, masked)")
    seen_keys, seen_values = k[:, :, :(rank + 1) * c], v[:, :, :(rank + 1) * c]
    if torch.allclose(got, block_attention(qs, seen_keys, seen_values, False)[0], atol=1e-9):
        return "the earlier chunks are right but the own chunk needs the causal mask (causal=True)"
    if rank >= 2 and all(right[:2]):
        return ("ranks 0 and 1 are right, but this rank merges more than one earlier block and is wrong: carry the "
                "running state from merge to merge (after each merge, lse = the merged log-sum-exp)")
    return ("check which chunk each step's K/V came from: at step s it is rank (rank - s) % world_size's, and merge it "
            "with the online softmax")


# --- the planted wrong answers --------------------------------------------------------------------

_RING_ALL_GATHER = '''%%writefile work/ex14_ring.py
import torch
import torch.distributed as dist


def block_attention(q, k, v, causal):
    """Attention of q (B, H, c, hd) to one block of k, v: (output, log-sum-exp (B, H, c))."""
    scores = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    if causal:   # position i of the block sees positions 0..i of the same block
        scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
    lse = scores.logsumexp(-1)
    return (scores - lse[..., None]).exp() @ v, lse


def ring_forward(q, k, v):
    """This rank's causal attention output: every rank's K/V gathered, then attended to."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    ks = [torch.empty_like(k) for _ in range(world_size)]
    vs = [torch.empty_like(v) for _ in range(world_size)]
    dist.all_gather(ks, k)
    dist.all_gather(vs, v)
    out, lse = block_attention(q, k, v, causal=True)
    for src in range(rank):
        o, l = block_attention(q, ks[src], vs[src], causal=False)
        new = torch.logaddexp(lse, l)
        out = out * (lse - new).exp()[..., None] + o * (l - new).exp()[..., None]
        lse = new
    return out
'''

MUTANTS = {
    "q1": (
        Mutant("naive log(exp + exp)", "exp overflows",
               edits=(("lse = torch.logaddexp(lse_a, lse_b)", "lse = torch.log(lse_a.exp() + lse_b.exp())"),)),
        Mutant("weights exp(lse) / exp(lse_merged)", "exp overflows",
               edits=(("return out_a * (lse_a - lse).exp()[..., None] + out_b * (lse_b - lse).exp()[..., None], lse",
                       "return (out_a * lse_a.exp()[..., None] + out_b * lse_b.exp()[..., None])"
                       " / lse.exp()[..., None], lse"),)),
        Mutant("lse_a + log1p(exp(lse_b - lse_a))", "a fully masked block",
               edits=(("lse = torch.logaddexp(lse_a, lse_b)", "lse = lse_a + torch.log1p(torch.exp(lse_b - lse_a))"),)),
        Mutant("max instead of logaddexp", "use torch.logaddexp",
               edits=(("lse = torch.logaddexp(lse_a, lse_b)", "lse = torch.maximum(lse_a, lse_b)"),)),
        Mutant("lse_a + lse_b", "log of the *product*",
               edits=(("lse = torch.logaddexp(lse_a, lse_b)", "lse = lse_a + lse_b"),)),
        Mutant("plain average of the outputs", "plain average",
               edits=(("return out_a * (lse_a - lse).exp()[..., None] + out_b * (lse_b - lse).exp()[..., None], lse",
                       "return (out_a + out_b) / 2, lse"),)),
        Mutant("outputs added without rescaling", "normalised over its own block only",
               edits=(("return out_a * (lse_a - lse).exp()[..., None] + out_b * (lse_b - lse).exp()[..., None], lse",
                       "return out_a + out_b, lse"),)),
        Mutant("weights swapped", "the weights are swapped",
               edits=(("out_a * (lse_a - lse).exp()[..., None] + out_b * (lse_b - lse).exp()[..., None]",
                       "out_a * (lse_b - lse).exp()[..., None] + out_b * (lse_a - lse).exp()[..., None]"),)),
    ),
    "q2": (
        Mutant("contiguous layout", "contiguous layout",
               edits=(("return [rank, 2 * world_size - 1 - rank]", "return [2 * rank, 2 * rank + 1]"),)),
        Mutant("off by one: 2t - r", "chunk ids start at 0",
               edits=(("return [rank, 2 * world_size - 1 - rank]", "return [rank, 2 * world_size - rank]"),)),
        Mutant("mirrored within the first half", "within the first half only",
               edits=(("return [rank, 2 * world_size - 1 - rank]", "return [rank, world_size - 1 - rank]"),)),
        Mutant("chunk r and r + t", "both grow with r",
               edits=(("return [rank, 2 * world_size - 1 - rank]", "return [rank, rank + world_size]"),)),
        Mutant("hard-coded for 2 ranks", "the same chunks for every t",
               edits=(("return [rank, 2 * world_size - 1 - rank]", "return [rank, 3 - rank]"),)),
        Mutant("late chunk first", "sequence order",
               edits=(("return [rank, 2 * world_size - 1 - rank]", "return [2 * world_size - 1 - rank, rank]"),)),
    ),
    "q3": (
        Mutant("all-gather instead of a ring", "that is an all-gather, not a ring", source=_RING_ALL_GATHER),
        Mutant("no hop: own chunk only", "attends to its own chunk only",
               edits=(("for step in range(1, world_size):", "for step in range(1, 1):"),)),
        Mutant("later chunks merged in", "the chunks of later ranks are merged in",
               edits=(("if (rank - step) % world_size < rank:", "if True:"),)),
        Mutant("no causal mask at all", "attention without the causal mask",
               edits=(("if (rank - step) % world_size < rank:", "if True:"),
                      ("causal=True)          # step 0", "causal=False)          # step 0"))),
        Mutant("own chunk unmasked", "the own chunk needs the causal mask",
               edits=(("causal=True)          # step 0", "causal=False)          # step 0"),)),
        Mutant("one hop too many", "one hop too many",
               edits=(("for step in range(1, world_size):", "for step in range(1, world_size + 1):"),)),
        Mutant("ring the wrong way", "come from rank - 1",
               edits=(("dist.P2POp(dist.isend, kv, (rank + 1) % world_size)",
                       "dist.P2POp(dist.isend, kv, (rank - 1) % world_size)"),
                      ("dist.P2POp(dist.irecv, incoming, (rank - 1) % world_size)",
                       "dist.P2POp(dist.irecv, incoming, (rank + 1) % world_size)"))),
        Mutant("own block sent again every hop", "sent its own K/V again",
               edits=(("        kv = incoming                                          # rank (rank - step)'s K/V\n",
                       "        o_kv = incoming                                        # rank (rank - step)'s K/V\n"),
                      ("block_attention(q, kv[0], kv[1], causal=False)",
                       "block_attention(q, o_kv[0], o_kv[1], causal=False)"))),
        Mutant("running lse never updated", "merges more than one earlier block",
               edits=(("            lse = new\n", ""),)),
    ),
}
