"""Exercises 15: capacity, the load-balancing loss, and expert parallelism's dispatch and combine.

Q1, ``keep_within_capacity(expert, n_expert, capacity)``: which assignments an expert accepts
(:func:`check_keep`). Q2, ``load_balancing_loss(probs, expert, n_expert)``: Switch Transformer's
loss, its value and its gradient to ``probs``, also for a collapsed router that gives some experts
nothing (:func:`check_balancing_loss`). Q3, ``expert_parallel(tokens, expert, local_experts)`` in a
file: send each token to the rank holding its expert, run the experts, bring the outputs back, all
of it differentiable (:func:`check_expert_parallel`: on gloo ranks holding different numbers of
tokens, the outputs, the gradients w.r.t. the tokens and the experts' weights after a backward,
and the bytes each rank's all-to-alls sent, against one process).

``MUTANTS`` lists the planted wrong answers each grader must give 0 (``tools/mutants.py``).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from .mutant import Mutant
from .ranks import run_ranks
from .student import load_student, student_function

# --- Q1: capacity ---------------------------------------------------------------------------------


def _reference_keep(expert: torch.Tensor, n_expert: int, capacity: int) -> torch.Tensor:
    offered = F.one_hot(expert, n_expert)
    return (offered.cumsum(0) * offered).sum(-1) <= capacity


def check_keep(keep_within_capacity: Callable, *, n: int = 40, n_expert: int = 4, capacity: int = 7,
               seed: int = 0) -> None:
    """``keep_within_capacity`` must keep, for each expert, its first ``capacity`` assignments of
    ``n`` (drawn at random over ``n_expert`` experts, seeded)."""
    generator = torch.Generator().manual_seed(seed)
    expert = torch.randint(0, n_expert, (n,), generator=generator)
    want = _reference_keep(expert, n_expert, capacity)
    try:
        got = keep_within_capacity(expert.clone(), n_expert, capacity)
    except Exception as error:   # noqa: BLE001 - the student's error, said in their terms
        raise AssertionError(f"keep_within_capacity(expert, {n_expert}, {capacity}) raised "
                             f"{type(error).__name__}: {error}") from None
    if got is None or got is Ellipsis:
        raise AssertionError("keep_within_capacity returned nothing: return a bool tensor, one entry per assignment.")
    got = torch.as_tensor(got)
    if got.shape != want.shape or got.dtype != torch.bool:
        raise AssertionError(f"return a bool tensor of shape {tuple(want.shape)} (a mask: indexing with 0/1 integers "
                             f"would pick rows 0 and 1 instead); got {got.dtype} {tuple(got.shape)}.")
    if torch.equal(got, want):
        return
    counts = torch.bincount(expert, minlength=n_expert)
    hint = "an assignment is kept if fewer than `capacity` earlier assignments went to the same expert"
    if torch.equal(got, _reference_keep(expert.flip(0), n_expert, capacity).flip(0)):
        hint = "that keeps the last assignments of each expert; the earliest have priority"
    elif torch.equal(got, _reference_keep(expert, n_expert, capacity + 1)):
        hint = "off by one: each expert keeps `capacity` assignments, not capacity + 1 (positions 0..capacity-1)"
    elif torch.equal(got, _reference_keep(expert, n_expert, capacity - 1)):
        hint = "off by one: each expert keeps `capacity` assignments, not capacity - 1"
    elif torch.equal(got, torch.arange(n) < capacity):
        hint = "that counts all assignments together; count each expert's queue separately (cumsum of a one-hot)"
    elif torch.equal(got, counts[expert] <= capacity):
        hint = ("that drops every assignment of an over-full expert; it must still take its first `capacity` "
                "(each assignment's place in its own expert's queue)")
    elif bool(got.all()):
        hint = (f"you kept every assignment, though expert {int(counts.argmax())} was offered {int(counts.max())} > "
                f"{capacity}: count along the assignments (cumsum over dim 0), not along the experts")
    wrong = int((got != want).sum())
    raise AssertionError(f"{wrong} of {n} assignments decided wrongly (capacity {capacity}): {hint}.")


# --- Q2: the load-balancing loss ------------------------------------------------------------------

def _reference_loss(probs: torch.Tensor, expert: torch.Tensor, n_expert: int) -> torch.Tensor:
    fraction = torch.bincount(expert, minlength=n_expert).to(probs.dtype) / len(expert)
    return n_expert * (fraction * probs.mean(0)).sum()


def _routers(n: int, n_expert: int, top_k: int, seed: int) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(description, probs (n, E) float64, expert (k·n,)): a noisy router whose assignments are not
    simply the argmax of probs, and a collapsed one that never assigns the last two experts."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, n_expert, generator=generator, dtype=torch.float64) * 2
    noisy = logits + torch.randn(n, n_expert, generator=generator, dtype=torch.float64)   # jitter, as in Switch
    expert = noisy.topk(top_k, dim=-1).indices.T.reshape(-1)
    collapsed = logits.clone()
    collapsed[:, 0] += 6.0
    hot = collapsed[:, :n_expert - 2].topk(min(top_k, n_expert - 2), dim=-1).indices.T.reshape(-1)
    return [(f"a router with {n} tokens, {n_expert} experts, top-{top_k}", logits.softmax(-1), expert),
            (f"a collapsed router that sends nothing to experts {n_expert - 2} and {n_expert - 1}",
             collapsed.softmax(-1), hot)]


def _loss_hint(value, want, probs, expert, n_expert) -> str:
    fraction = torch.bincount(expert, minlength=n_expert).double() / len(expert)
    top1 = torch.bincount(probs.argmax(-1), minlength=n_expert).double() / len(probs)
    if torch.allclose(value, want / n_expert):
        return "missing the factor E (n_expert): without it an even router scores 1/E, not 1"
    if torch.allclose(value, want * len(expert)):
        return "f_i must be a fraction of the assignments (divide the counts by their number), not a count"
    if len(expert) != len(probs) and torch.allclose(value, want * len(expert) / len(probs)):
        return (f"divide the counts by the number of assignments A = len(expert) = {len(expert)} (k per token), not by "
                f"the number of tokens N = {len(probs)}")
    if torch.allclose(value, n_expert * (probs.mean(0) ** 2).sum()):
        return "f_i is the fraction of assignments the expert was offered (count them), not its mean probability"
    if torch.allclose(value, n_expert * (fraction * probs.sum(0)).sum()):
        return "P_i is the mean of the probabilities over tokens, not their sum"
    if torch.allclose(value, n_expert * (top1 * probs.mean(0)).sum()):
        return "count the assignments you are given in `expert`, not the argmax of probs (routing may add noise)"
    return "E · Σ_i f_i · P_i: f_i the fraction of assignments offered to expert i, P_i its mean probability"


def _grade_loss(load_balancing_loss: Callable, case: str, probs: torch.Tensor, expert: torch.Tensor,
                n_expert: int) -> None:
    """One router: the value, then the gradient w.r.t. probs, E·f_i/N in every row."""
    probs = probs.detach().clone().requires_grad_()
    want = _reference_loss(probs.detach(), expert, n_expert)
    try:
        got = load_balancing_loss(probs, expert.clone(), n_expert)
    except Exception as error:   # noqa: BLE001
        hint = ""
        if "collapsed" in case:
            hint = (" Some experts got no assignment, so torch.bincount(expert) is shorter than n_expert: count with "
                    "torch.bincount(expert, minlength=n_expert), so that every expert has its entry (0 here)")
        raise AssertionError(f"load_balancing_loss raised {type(error).__name__} on {case}: {error}.{hint}") from None
    if got is None or got is Ellipsis:
        raise AssertionError("load_balancing_loss returned nothing: return a scalar tensor.")
    if not isinstance(got, torch.Tensor) or got.numel() != 1:
        raise AssertionError(f"return a scalar tensor; got {type(got).__name__} {getattr(got, 'shape', '')}.")
    value = got.detach().double().reshape(())
    if not torch.allclose(value, want, rtol=1e-6, atol=1e-9):   # float32 fractions (counts / A) are fine
        hint = _loss_hint(value, want, probs.detach(), expert, n_expert)
        if "collapsed" in case and torch.bincount(expert).numel() < n_expert:
            short = torch.bincount(expert).double() / len(expert)
            if short.numel() == 1 and torch.allclose(value, n_expert * (short * probs.detach().mean(0)).sum()):
                hint = ("torch.bincount(expert) without minlength has one entry here, and broadcasting spread it over "
                        "every expert: count with torch.bincount(expert, minlength=n_expert)")
        raise AssertionError(f"on {case} the loss is {value.item():.6g}, expected {want.item():.6g}: {hint}.")
    if got.grad_fn is None:
        raise AssertionError("the value is right but it has no gradient: compute P from `probs` itself (no "
                             ".detach(), no .item()), since the loss trains the router through P.")
    (grad,) = torch.autograd.grad(got.reshape(()), probs, allow_unused=True)
    fraction = torch.bincount(expert, minlength=n_expert).double() / len(expert)
    want_grad = (n_expert * fraction / len(probs)).expand_as(probs)
    if grad is None or not torch.allclose(grad.double(), want_grad, atol=1e-9, rtol=1e-6):
        raise AssertionError(
            f"on {case} the value is right but the gradient w.r.t. probs is not: d loss / d probs[n, i] must be "
            f"E · f_i / N for every token n (f_i from counts, which carry no gradient; P_i = mean of probs[:, i], "
            f"which does). Yours differs by up to "
            f"{'all of it' if grad is None else f'{(grad.double() - want_grad).abs().max().item():.3g}'}: compute P_i "
            "as a plain mean of probs (no renormalising, nothing detached) and f_i only from `expert`.")


def check_balancing_loss(load_balancing_loss: Callable, *, n: int = 30, n_expert: int = 5, top_k: int = 2,
                         seed: int = 0) -> None:
    """``load_balancing_loss(probs, expert, n_expert)`` must equal E · Σ f_i P_i with gradient E·f_i/N to
    probs, on a noisy router of ``n`` tokens (top-``top_k``), on a collapsed router that leaves the
    last two experts without any assignment, and be 1 on an even router."""
    for case, probs, expert in _routers(n, n_expert, top_k, seed):
        _grade_loss(load_balancing_loss, case, probs, expert, n_expert)
    even = torch.full((8, 4), 0.25, dtype=torch.float64)
    try:
        balanced = load_balancing_loss(even, torch.arange(4).repeat(2), 4)
    except Exception as error:   # noqa: BLE001
        raise AssertionError(f"load_balancing_loss raised {type(error).__name__} on an even router: {error}") from None
    if not isinstance(balanced, torch.Tensor) or balanced.numel() != 1:
        raise AssertionError(f"on an even router load_balancing_loss returned {balanced!r}: return a scalar tensor.")
    if not torch.allclose(balanced.detach().double().reshape(()), torch.tensor(1.0, dtype=torch.float64)):
        raise AssertionError(f"an even router must score 1; yours scores {balanced.item():.6g}.")


# --- Q3: dispatch and combine ---------------------------------------------------------------------

def _experts(n_expert: int, d: int, seed: int) -> list[torch.nn.Linear]:
    generator = torch.Generator().manual_seed(seed)
    experts = []
    for _ in range(n_expert):
        layer = torch.nn.Linear(d, d).double()
        with torch.no_grad():
            layer.weight.copy_(torch.randn(d, d, generator=generator, dtype=torch.float64))
            layer.bias.copy_(torch.randn(d, generator=generator, dtype=torch.float64))
        experts.append(layer)
    return experts


def _sizes(world_size: int, n: int) -> list[int]:
    """Tokens per rank: unequal (n, n + 1, ...), as when sequences have different lengths."""
    return [n + r for r in range(world_size)]


def _problem(world_size: int, n: int, d: int, n_expert: int, seed: int, skew: bool):
    """Every rank's tokens (N, d) float64, their experts (N,), and the loss weights (N, d), concatenated."""
    generator = torch.Generator().manual_seed(seed)
    total = sum(_sizes(world_size, n))
    tokens = torch.randn(total, d, generator=generator, dtype=torch.float64)
    expert = torch.randint(0, n_expert, (total,), generator=generator)
    weight = torch.randn(total, d, generator=generator, dtype=torch.float64)
    if skew:   # nothing for the last rank's experts: a rank that receives no rows
        expert = expert % (n_expert - n_expert // world_size)
    return tokens, expert, weight


class _Traffic(TorchDispatchMode):
    """Every c10d call this rank makes, as ``(kind, floating point?, bytes sent to other ranks)``;
    for an all-to-all the bytes are exact (its input minus the rows the rank keeps)."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[str, bool, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace in ("c10d", "_c10d_functional"):
            kind = func._overloadpacket.__name__.rstrip("_")
            if kind not in ("barrier", "monitored_barrier", "wait_tensor"):
                floating = any(isinstance(t, torch.Tensor) and t.is_floating_point() for t in tree_leaves(args))
                self.calls.append((kind, floating, self._sent(kind, args)))
        return func(*args, **(kwargs or {}))

    @staticmethod
    def _sent(kind: str, args) -> int:
        if kind != "alltoall_base":
            return sum(t.numel() * t.element_size() for t in tree_leaves(args[1:2]) if isinstance(t, torch.Tensor))
        import torch.distributed as dist

        data, group, splits = args[1], dist.ProcessGroup.unbox(args[2]), list(args[4])
        row = data[0].numel() * data.element_size() if len(data) else 0
        rows = splits or [len(data) // group.size()] * group.size()
        return (sum(rows) - rows[group.rank()]) * row


def ep_rank(rank: int, world_size: int, student_file: str, *, n: int, d: int, n_expert: int, seed: int,
            skew: bool) -> dict[str, Any]:
    """Harness (one rank): the student's ``expert_parallel`` on this rank's tokens, then a backward of
    Σ output · weight (every rank together, when every rank's output has a graph). Returns the
    output, the gradients of the tokens and of the local experts' weight and bias, and the traffic."""
    import torch.distributed as dist

    expert_parallel = student_function(load_student(student_file), "expert_parallel")
    problem = _problem(world_size, n, d, n_expert, seed, skew)
    tokens, expert, weight = (t.split(_sizes(world_size, n))[rank] for t in problem)
    per_rank = n_expert // world_size
    local = _experts(n_expert, d, seed + 1)[rank * per_rank:(rank + 1) * per_rank]
    mine = tokens.clone().requires_grad_()
    with _Traffic() as forward:
        out = expert_parallel(mine, expert.clone(), local)
    graph = isinstance(out, torch.Tensor) and out.shape == mine.shape and out.requires_grad
    everyone = torch.tensor([int(graph)])
    dist.all_reduce(everyone, op=dist.ReduceOp.MIN)   # backward only if every rank can: no rank waits alone
    result = {"out": out.detach() if isinstance(out, torch.Tensor) else out, "graph": graph,
              "forward": forward.calls, "backward": None}
    if everyone.item():
        with _Traffic() as backward:
            (out * weight).sum().backward()
        result.update(backward=backward.calls, tokens_grad=mine.grad,
                      expert_grads=[(layer.weight.grad, layer.bias.grad) for layer in local])
    return result


def _all_to_all_hint(message: str) -> str:
    """What an all-to-all error usually means in this exercise."""
    if "Split sizes doesn't match" in message:
        return ("all_to_all(rows, send, recv): send must add up to the rows you pass and recv to the rows you get; on "
                "the way back the two lists swap places.")
    if "size % context->size" in message:
        return ("without split sizes all_to_all_single cuts its input into equal parts; pass the counts, since "
                "the router sends each rank a different number of rows.")
    if "doesn't match expected size" in message:
        return ("the rows a rank expects from a peer must be the number that peer sends: get them by exchanging the "
                "per-expert counts with all_to_all_single before the rows.")
    return ""


def _expected_bytes(rank: int, world_size: int, expert: torch.Tensor, n: int, d: int, n_expert: int) -> int:
    """Bytes of rows rank ``rank`` must send to others in one direction pair (dispatch + combine), float64."""
    per_rank = n_expert // world_size
    home = expert // per_rank
    owner = torch.arange(world_size).repeat_interleave(torch.tensor(_sizes(world_size, n)))
    out_rows = int(((owner == rank) & (home != rank)).sum())
    in_rows = int(((home == rank) & (owner != rank)).sum())
    return (out_rows + in_rows) * d * 8


def _traffic_problem(calls: list, expected: int, when: str) -> str | None:
    """What is wrong with the collectives one rank issued on its rows in ``when`` (forward/backward)."""
    wide = sorted({kind for kind, floating, _ in calls if floating and kind != "alltoall_base"})
    if wide:
        return (f"in the {when} it called {', '.join(wide)} on floating-point rows: gathering every rank's tokens and "
                "all-reducing the outputs sends every row to every rank, about t× the traffic of sending each row only "
                "to the rank of its expert (and every rank runs its experts on everyone's rows): dispatch and combine "
                "with all_to_all")
    sent = sum(b for kind, floating, b in calls if floating and kind == "alltoall_base")
    if sent > expected:
        return (f"in the {when} its all-to-alls sent {sent} bytes of rows to other ranks, but only {expected} are "
                "needed: each row goes to the rank of its expert once, and its output comes back once (rows for this "
                "rank's own experts stay here)")
    return None


def _grad_problem(result: dict, want_tokens: torch.Tensor, want_experts: list) -> str | None:
    """Which gradient differs from one process's, and the usual cause."""
    got = None if result["tokens_grad"] is None else result["tokens_grad"].double()
    if got is None or not got.abs().sum():
        return ("no gradient reached the tokens: something cut the graph between the tokens and the experts "
                "(.detach(), torch.no_grad(), a buffer filled in place by dist.all_to_all_single): send the rows with "
                "all_to_all, which autograd can differentiate")
    if not torch.allclose(got, want_tokens, atol=1e-10, rtol=1e-9):
        return (f"the gradient w.r.t. the tokens differs from one process by up to "
                f"{(got - want_tokens).abs().max():.2g}: each row's gradient must come back through the same "
                "all-to-alls, in reverse")
    for j, (grads, wants) in enumerate(zip(result["expert_grads"], want_experts)):
        # an expert that ran on no row has no gradient: None, or zeros
        if not all(torch.allclose(torch.zeros_like(w) if g is None else g, torch.zeros_like(w) if w_grad is None
                                  else w_grad, atol=1e-10, rtol=1e-9) for g, (w, w_grad) in zip(grads, wants)):
            return (f"local expert {j}'s weight gradient differs from one process: it must collect the gradients of "
                    "every rank's rows it ran on, which come back through the combine's all-to-all")
    return None


def check_expert_parallel(student_file: str, *, world_size: int = 2, n: int = 12, d: int = 4, n_expert: int = 4,
                          seed: int = 0, skew: bool = False) -> None:
    """Run the student's ``expert_parallel`` on ``world_size`` ranks (rank r holds n + r tokens), then a
    backward: every rank's output, the gradients w.r.t. its tokens and its experts' weights must equal
    one process's, and its rows must travel by all-to-all, each row once each way (forward and backward)."""
    if n_expert % world_size:
        raise ValueError(f"{n_expert} experts do not split over {world_size} ranks")
    try:
        results = run_ranks(ep_rank, student_file, world_size, n=n, d=d, n_expert=n_expert, seed=seed, skew=skew)
    except AssertionError as failure:
        raise AssertionError(f"{failure}\n{_all_to_all_hint(str(failure))}".rstrip()) from None
    tokens, expert, weight = _problem(world_size, n, d, n_expert, seed, skew)
    experts = _experts(n_expert, d, seed + 1)
    per_rank = n_expert // world_size
    sizes = _sizes(world_size, n)
    full = tokens.clone().requires_grad_()
    reference = torch.stack([experts[e](x) for x, e in zip(full, expert.tolist())])
    (reference * weight).sum().backward()
    want, want_grad = reference.detach().split(sizes), full.grad.split(sizes)
    for rank, result in enumerate(results):
        got = result["out"]
        if got is None or got is Ellipsis:
            raise AssertionError(f"rank {rank}: expert_parallel returned {got!r}: it still does nothing.")
        if not isinstance(got, torch.Tensor) or got.shape != want[rank].shape:
            raise AssertionError(f"rank {rank}: return a tensor shaped like tokens, {tuple(want[rank].shape)}; "
                                 f"got {getattr(got, 'shape', type(got).__name__)}.")
        result["out"] = got.double()
    for rank, result in enumerate(results):
        expected = _expected_bytes(rank, world_size, expert, n, d, n_expert)
        problem = _traffic_problem(result["forward"], expected, "forward")
        if problem:
            raise AssertionError(f"rank {rank} of {world_size}: {problem}.")
    for rank, result in enumerate(results):
        if not torch.allclose(result["out"], want[rank], atol=1e-10, rtol=1e-9):
            hint = _dispatch_hint(rank, world_size, result["out"], tokens.split(sizes)[rank],
                                  expert.split(sizes)[rank], experts, want[rank])
            raise AssertionError(f"rank {rank} of {world_size}: the output differs from one process by up to "
                                 f"{(result['out'] - want[rank]).abs().max().item():.2g}: {hint}.")
    for rank, result in enumerate(results):
        if not result["graph"]:
            raise AssertionError(
                f"rank {rank} of {world_size}: the outputs are right, but autograd cannot see your all-to-alls: the "
                "output has no gradient path to the tokens or the experts (dist.all_to_all_single writes into a buffer "
                "autograd does not track), so a training step would not train the router's inputs or get the experts' "
                "gradients from other ranks: dispatch and combine with all_to_all(rows, send, recv) from the top of "
                "the file, whose backward sends each row's gradient back where the row came from.")
        want_experts = [((e.weight, e.weight.grad), (e.bias, e.bias.grad))
                        for e in experts[rank * per_rank:(rank + 1) * per_rank]]
        problem = (_grad_problem(result, want_grad[rank], want_experts)
                   or _traffic_problem(result["backward"], _expected_bytes(rank, world_size, expert, n, d, n_expert),
                                       "backward"))
        if problem:
            raise AssertionError(f"rank {rank} of {world_size}: {problem}.")


def _dispatch_hint(rank: int, world_size: int, got, mine_x, mine_e, experts, want) -> str:
    """The classic cause of a wrong output on ``rank`` (its tokens ``mine_x``, experts ``mine_e``)."""
    per_rank = len(experts) // world_size
    local = experts[rank * per_rank:(rank + 1) * per_rank]
    with torch.no_grad():
        if torch.allclose(got, torch.stack([local[e % per_rank](x) for x, e in zip(mine_x, mine_e.tolist())])):
            return ("that applies this rank's own experts to its tokens: expert e lives on rank e // (E/t); "
                    "send the rows there with all_to_all")
    if torch.allclose(got, want[torch.argsort(mine_e, stable=True)]):
        return ("the right outputs in the wrong rows: they come back sorted by expert; put each one back at "
                "its token's position (undo the sort)")
    return ("each rank sends rank p the rows for p's experts (sorted by expert), with the counts exchanged "
            "first so that every rank knows how many rows arrive, and for which of its experts")


# --- the planted wrong answers --------------------------------------------------------------------

_HEAD = '''%%writefile work/ex15_dispatch.py
import torch
import torch.distributed as dist

from course_utils.expert_parallel import AllToAll


def all_to_all(rows, send, recv):
    """Rows (R, d) go to the ranks in `send` counts (sum(send) = R); returns the rows received,
    (sum(recv), d). Autograd sees it: its backward sends each row's gradient back where it came from."""
    return AllToAll.apply(rows, send, recv, None)


def expert_parallel(tokens, expert, local_experts):
    """tokens (N, d), expert (N,) int64 in 0..E-1, local_experts: this rank's E/t experts -> (N, d)."""
'''

_INVISIBLE_TO_AUTOGRAD = _HEAD + '''    world_size = dist.get_world_size()
    per_rank = len(local_experts)
    order = torch.argsort(expert, stable=True)
    per_expert = torch.bincount(expert, minlength=per_rank * world_size)
    incoming = torch.empty_like(per_expert)
    dist.all_to_all_single(incoming, per_expert)
    incoming = incoming.view(world_size, per_rank)
    send, recv = per_expert.view(world_size, per_rank).sum(1).tolist(), incoming.sum(1).tolist()
    rows = tokens.new_empty(sum(recv), tokens.shape[1])
    dist.all_to_all_single(rows, tokens[order].contiguous(), recv, send)       # dispatch
    local = torch.arange(per_rank).repeat(world_size).repeat_interleave(incoming.reshape(-1))
    done = torch.empty_like(rows)
    for j, layer in enumerate(local_experts):
        done[local == j] = layer(rows[local == j])
    back = torch.empty_like(tokens)
    dist.all_to_all_single(back, done, send, recv)                # combine: the counts swapped
    out = torch.empty_like(tokens)
    out[order] = back
    return out
'''

_OWN_EXPERTS = _HEAD + '''    per_rank = len(local_experts)
    return torch.stack([local_experts[e % per_rank](x) for x, e in zip(tokens, expert.tolist())])
'''

_GATHER_AND_REDUCE = _HEAD + '''    import torch.distributed.nn.functional as dfn

    rank, world_size = dist.get_rank(), dist.get_world_size()
    per_rank = len(local_experts)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world_size)]
    dist.all_gather(sizes, torch.tensor([len(tokens)]))
    longest = int(max(sizes))
    padded = torch.cat([tokens, tokens.new_zeros(longest - len(tokens), tokens.shape[1])])
    ids = torch.cat([expert, expert.new_full((longest - len(expert),), -1)])
    every_ids = [torch.empty_like(ids) for _ in range(world_size)]
    dist.all_gather(every_ids, ids)
    every = torch.cat(dfn.all_gather(padded))                    # every rank's tokens, here
    every_ids = torch.cat(every_ids)
    out = torch.zeros_like(every)
    for j, layer in enumerate(local_experts):
        mine = (every_ids == rank * per_rank + j).nonzero().squeeze(1)
        out = out.index_add(0, mine, layer(every[mine]))
    out = dfn.all_reduce(out)                                     # everyone's outputs, everywhere
    return out[rank * longest:rank * longest + len(tokens)]
'''

MUTANTS = {
    "q1": (
        Mutant("keeps the last of each expert", "keeps the last assignments",
               edits=(("offered.cumsum(dim=0)", "offered.flip(0).cumsum(dim=0).flip(0)"),)),
        Mutant("capacity + 1 kept", "not capacity + 1",
               edits=(("return place < capacity", "return place <= capacity"),)),
        Mutant("capacity - 1 kept", "not capacity - 1", edits=(("sum(dim=-1) - 1", "sum(dim=-1)"),)),
        Mutant("one queue for all experts", "counts all assignments together",
               source="def keep_within_capacity(expert, n_expert, capacity):\n"
                      "    return torch.arange(len(expert)) < capacity\n"),
        Mutant("cumsum along the experts", "count along the assignments",
               edits=(("offered.cumsum(dim=0)", "offered.cumsum(dim=1)"),)),
        Mutant("an over-full expert drops everything", "drops every assignment of an over-full expert",
               source="def keep_within_capacity(expert, n_expert, capacity):\n"
                      "    return torch.bincount(expert, minlength=n_expert)[expert] <= capacity\n"),
        Mutant("0/1 integers instead of a mask", "return a bool tensor",
               edits=(("return place < capacity", "return (place < capacity).long()"),)),
    ),
    "q2": (
        Mutant("bincount without minlength", "minlength=n_expert",
               edits=(("torch.bincount(expert, minlength=n_expert)", "torch.bincount(expert)"),)),
        Mutant("no factor E", "missing the factor E", edits=(("return n_expert * (", "return ("),)),
        Mutant("counts, not fractions", "not a count", edits=((" / len(expert)", ""),)),
        Mutant("divided by the tokens, not the assignments", "not by the number of tokens",
               edits=((" / len(expert)", " / len(probs)"),)),
        Mutant("sum of probabilities", "not their sum", edits=(("probs.mean(dim=0)", "probs.sum(dim=0)"),)),
        Mutant("fraction from mean probabilities", "not its mean probability",
               edits=(("torch.bincount(expert, minlength=n_expert).to(probs.dtype) / len(expert)",
                       "probs.mean(dim=0)"),)),
        Mutant("fraction from the argmax of probs", "not the argmax of probs",
               edits=(("torch.bincount(expert, minlength=n_expert).to(probs.dtype) / len(expert)",
                       "torch.bincount(probs.argmax(-1), minlength=n_expert).to(probs.dtype) / len(probs)"),)),
        Mutant("P detached", "no gradient", edits=(("probs.mean(dim=0)", "probs.detach().mean(dim=0)"),)),
        Mutant("P renormalised (same value, other gradient)", "the gradient w.r.t. probs is not",
               edits=(("probs.mean(dim=0)", "(probs.mean(dim=0) / probs.mean(dim=0).sum())"),)),
    ),
    "q3": (
        Mutant("all-to-all autograd cannot see", "autograd cannot see", source=_INVISIBLE_TO_AUTOGRAD),
        Mutant("own experts, no dispatch", "that applies this rank's own experts", source=_OWN_EXPERTS),
        Mutant("all-gather the tokens, all-reduce the outputs", "t× the traffic", source=_GATHER_AND_REDUCE),
        Mutant("sort not undone", "the right outputs in the wrong rows",
               edits=(("    out = torch.empty_like(tokens)\n    out[order] = back", "    out = back"),)),
        Mutant("combine with the counts not swapped", "on the way back the two lists swap places",
               edits=(("all_to_all(done, recv, send)", "all_to_all(done, send, recv)"),)),
        Mutant("counts never exchanged", "exchanging the per-expert counts",
               edits=(("dist.all_to_all_single(incoming, per_expert)", "incoming = per_expert.clone()"),)),
        Mutant("tokens detached before dispatch", "no gradient reached the tokens",
               edits=(("all_to_all(tokens[order], send, recv)", "all_to_all(tokens[order].detach(), send, recv)"),)),
    ),
}
