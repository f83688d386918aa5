"""Exercises 13: a transformer's FLOPs predicted, a training run's days, and a job's FLOPs summed over ranks.

- Q1 ``train_flops(vocab, layers, h, s, tokens)``: the student's prediction is compared, exactly,
  with the FLOPs ``torch.utils.flop_counter`` counts (:func:`course_utils.accounting.count_flops`)
  in training steps of real :class:`~course_utils.gpt.GPT` models, and at GPT-2 small's shape (too
  big to run here) with the count those measurements confirm; a prediction that matches a classic
  omission (the head, attention, the backward, a per-layer term) gets its name.
- Q2 ``training_days(params, tokens, gpus, peak_flops, mfu)``: compared with 6·params·tokens FLOPs
  at gpus·peak·mfu FLOP/s, and on ``mfu``'s boundaries: 1 is valid, 0, below 0 or above 1 raise.
- Q3 ``job_flops(model, idx)``: run on gloo ranks that hold *unequal* shares of the batch, so that
  one rank's count times the world size is not the job's; every rank must return the job's count,
  which one process measures on the whole batch.

Importing this module imports PyTorch (through the course's GPT), no other framework.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from numbers import Integral
from typing import Any

from course_utils import accounting
from course_utils.data import char_tokens, token_windows, zen_of_python
from course_utils.gpt import GPT, GPTConfig

from .mutant import Mutant
from .ranks import run_ranks
from .student import load_student, student_function


def _call(fn: Callable, name: str, *args: Any, why: str = "") -> Any:
    """``fn(*args)``; an exception becomes an ``AssertionError`` naming the call, the error and ``why``."""
    shown = f"{name}({', '.join(map(repr, args))})"
    try:
        value = fn(*args)
    except Exception as error:   # noqa: BLE001 - a student's function may raise anything
        raise AssertionError(f"{shown} raised {type(error).__name__}: {error}. {why}".rstrip()) from None
    if value is None or value is Ellipsis:
        raise AssertionError(f"{shown} returned {value!r}: replace the `...` with your answer.")
    return value


# ---------------------------------------------------------------------------------------------
# Q1: predict a training run's FLOPs, checked against FlopCounterMode on real GPTs
# ---------------------------------------------------------------------------------------------

MEASURED_SHAPES = ((45, 2, 64, 32, 96), (30, 1, 16, 8, 24))   # (vocab, layers, h, s, tokens), run here
GPT2_SMALL = (50257, 12, 768, 1024, 2**30)                        # too big to run: the confirmed count


@functools.lru_cache(maxsize=32)   # the same shapes are measured for every answer graded in one process
def measured_train_flops(vocab: int, layers: int, h: int, s: int, tokens: int, seed: int = 0) -> int:
    """FLOPs ``FlopCounterMode`` counts in one training step (forward, loss, backward) of a course GPT of
    this shape on ``tokens`` tokens: ``tokens / s`` sequences of ``s`` random token ids."""
    import torch

    if tokens % s:
        raise ValueError(f"tokens={tokens} must be a whole number of sequences of s={s}")
    heads = 4 if h % 4 == 0 else 1   # the FLOPs do not depend on how h is split into heads
    model = GPT(GPTConfig(vocab_size=vocab, block_size=s, n_layer=layers, n_head=heads, d_model=h), seed=seed)
    idx = torch.randint(vocab, (tokens // s, s), generator=torch.Generator().manual_seed(seed))

    def step():
        _, loss = model(idx, idx)
        loss.backward()

    return accounting.count_flops(step)


def _flops_mistakes() -> list[tuple[str, Callable[..., int]]]:
    """Classic wrong predictions: what the student left out or added, and the count it gives."""
    def count(weights, attention, passes=3):   # passes: forward 1, backward 2
        return lambda V, L, h, s, t: passes * (2 * weights(V, L, h) + attention(L, s, h)) * t

    blocks_and_head = lambda V, L, h: L * 12 * h * h + h * V   # noqa: E731
    attention = lambda L, s, h: 4 * L * s * h                   # noqa: E731 - forward, per token
    return [
        ("the output head is missing: every token is multiplied by its h·vocab weights too",
         count(lambda V, L, h: L * 12 * h * h, attention)),
        ("attention's own matmuls are missing: the scores q·kᵀ and their weighted sum of v multiply "
         "activations by activations, 4·s·h FLOPs per token and layer forward, which no weight accounts for",
         count(blocks_and_head, lambda L, s, h: 0)),
        ("that is the forward pass only: the backward costs twice the forward (gradients for the inputs "
         "and for the weights), 3 × forward in all", count(blocks_and_head, attention, passes=1)),
        ("attention's term is per layer: every one of the `layers` blocks attends",
         count(blocks_and_head, lambda L, s, h: 4 * s * h)),
        ("the blocks' 12h² weights are per layer: multiply by `layers`",
         count(lambda V, L, h: 12 * h * h + h * V, attention)),
        ("the token embedding is a lookup, not a matmul: only the head's h·vocab weights multiply every token",
         count(lambda V, L, h: L * 12 * h * h + 2 * h * V, attention)),
        ("the causal mask does not halve attention's FLOPs here: the math kernel computes every s×s score, "
         "masked or not", count(blocks_and_head, lambda L, s, h: 2 * L * s * h)),
        ("a block has 12h² matmul weights: q, k, v and the output projection (4h²) and the MLP's two "
         "4h-wide layers (8h²)", count(lambda V, L, h: L * 8 * h * h + h * V, attention)),
    ]


def check_train_flops(train_flops: Callable, *, shapes: Sequence[tuple[int, int, int, int, int]] = MEASURED_SHAPES,
                      big: tuple[int, int, int, int, int] = GPT2_SMALL) -> None:
    """Compare ``train_flops`` with FlopCounterMode's count on GPTs of ``shapes`` (vocab, layers, h, s,
    tokens), and at ``big`` (too big to run) with the per-token count those measurements confirm."""
    wanted = {shape: measured_train_flops(*shape) for shape in shapes}
    for shape in shapes:   # the formula the big shape relies on is what the small ones measure
        vocab, layers, h, s, tokens = shape
        if wanted[shape] != accounting.train_flops_per_token(vocab, layers, h, s) * tokens:
            raise RuntimeError(f"the grader's own count disagrees with FlopCounterMode at {shape}: report this")
    vocab, layers, h, s, tokens = big
    wanted[big] = accounting.train_flops_per_token(vocab, layers, h, s) * tokens
    got = {shape: _call(train_flops, "train_flops", *shape) for shape in wanted}
    for shape, value in got.items():
        if isinstance(value, bool) or not isinstance(value, Integral):
            raise AssertionError(f"train_flops{shape} returned a {type(value).__name__} ({value!r}): return an int "
                                 "(a float has a 53-bit significand, so a count like GPT-2's is rounded).")
    wrong = [shape for shape in wanted if got[shape] != wanted[shape]]
    if not wrong:
        return
    hint = next((hint for hint, count in _flops_mistakes() if all(got[x] == count(*x) for x in wrong)), None)
    shape = wrong[0]
    per_token = (got[shape] - wanted[shape]) / shape[4]
    how = "FlopCounterMode counted" if shape in shapes else "the measured count per token gives"
    raise AssertionError(f"train_flops{shape} is {got[shape]:,}, but {how} {wanted[shape]:,}: "
                         + (hint or f"{per_token:+,.6g} FLOPs per token. Forward: 2 FLOPs per matmul weight per "
                                    "token, plus attention's own matmuls; backward: twice the forward") + ".")


# ---------------------------------------------------------------------------------------------
# Q2: days of training
# ---------------------------------------------------------------------------------------------

SECONDS_PER_DAY = 86_400
DAYS_CASES = ((7e9, 2e12, 1024, 989e12, 0.4), (1e9, 1e11, 8, 312e12, 1.0))   # the second at the ideal mfu = 1


def days_reference(params: float, tokens: float, gpus: int, peak_flops: float, mfu: float) -> float:
    """6·params·tokens FLOPs at gpus·peak_flops·mfu FLOP/s, in days of 86,400 s."""
    return 6 * params * tokens / (gpus * peak_flops * mfu) / SECONDS_PER_DAY


def _days_mistakes() -> list[tuple[str, Callable[..., float]]]:
    """Classic wrong answers: what the student did, and the days it gives."""
    return [
        ("that is the forward pass only: training costs 6 FLOPs per parameter per token (2 forward, 4 backward)",
         lambda p, t, g, f, m: days_reference(p, t, g, f, m) / 3),
        ("that is in hours: a day is 86,400 seconds", lambda p, t, g, f, m: days_reference(p, t, g, f, m) * 24),
        ("that is in seconds: divide by 86,400 seconds per day",
         lambda p, t, g, f, m: days_reference(p, t, g, f, m) * SECONDS_PER_DAY),
        ("that is one GPU's time: the gpus work at once, divide by gpus too",
         lambda p, t, g, f, m: days_reference(p, t, g, f, m) * g),
        ("mfu is the fraction of the peak the GPUs achieve: the job runs at gpus · peak_flops · mfu FLOP/s, "
         "so divide by mfu, not multiply", lambda p, t, g, f, m: days_reference(p, t, g, f, m) * m * m),
        ("mfu is missing: the GPUs achieve only that fraction of their peak, so the run takes 1 / mfu times "
         "longer", lambda p, t, g, f, m: days_reference(p, t, g, f, m) * m),
    ]


def check_training_days(training_days: Callable, *, cases: Sequence[tuple] = DAYS_CASES,
                        invalid_mfu: Sequence[float] = (0.0, -0.2, 1.5)) -> None:
    """Compare ``training_days`` on ``cases`` (params, tokens, gpus, peak FLOP/s, mfu), and check that
    each of ``invalid_mfu`` raises ``ValueError``. Include ``mfu = 1`` in ``cases``: it is valid."""
    for case in cases:
        why = ("mfu = 1 is the ideal upper bound (every FLOP the GPUs can do) and valid: raise only for "
               "mfu <= 0 or mfu > 1") if case[-1] == 1 else ""
        value = _call(training_days, "training_days", *case, why=why)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise AssertionError(f"training_days{case} returned a {type(value).__name__}: return a number of days.")
        want = days_reference(*case)
        if not math.isclose(value, want, rel_tol=1e-9):
            hint = next((hint for hint, days in _days_mistakes() if math.isclose(value, days(*case), rel_tol=1e-9)),
                        "6·params·tokens FLOPs, at gpus·peak_flops·mfu FLOP/s, in days of 86,400 s")
            raise AssertionError(f"training_days{case} is {value:.6g}, expected {want:.6g} days: {hint}.")
    params, tokens, gpus, peak, _ = cases[0]
    _check_invalid_mfu(training_days, (params, tokens, gpus, peak), invalid_mfu)


def _check_invalid_mfu(training_days: Callable, rest: tuple, invalid_mfu: Sequence[float]) -> None:
    """Every ``mfu`` of ``invalid_mfu`` must raise ``ValueError`` (``rest``: the other arguments)."""
    params, tokens, gpus, peak = rest
    raised = []
    for mfu in invalid_mfu:
        try:
            training_days(params, tokens, gpus, peak, mfu)
        except ValueError:
            raised.append(mfu)
        except Exception:   # noqa: BLE001 - reported below, value by value
            pass
    if invalid_mfu and not raised:
        raise AssertionError(f"training_days checks no mfu: it raised no ValueError for mfu = "
                             f"{', '.join(map(repr, invalid_mfu))}. An mfu is a fraction in (0, 1]: raise ValueError "
                             "when mfu <= 0 or mfu > 1, before any arithmetic.")
    for mfu in invalid_mfu:
        why = ("mfu <= 0 means the GPUs do no useful work at all" if mfu <= 0
               else "an MFU above 1 is impossible: no GPU beats its peak")
        shown = f"training_days({params!r}, {tokens!r}, {gpus!r}, {peak!r}, {mfu!r})"
        try:
            value = training_days(params, tokens, gpus, peak, mfu)
        except ValueError:
            continue
        except Exception as error:   # noqa: BLE001
            raise AssertionError(f"{shown} raised {type(error).__name__}: {error}, not a ValueError: {why}; "
                                 "check mfu first and raise ValueError.") from None
        raise AssertionError(f"{shown} returned {value!r} instead of raising ValueError: {why}.")


# ---------------------------------------------------------------------------------------------
# Q3: the job's FLOPs, counted on every rank and summed
# ---------------------------------------------------------------------------------------------


def _problem(n_layer: int, d_model: int, block: int, batch: int, seed: int):
    import torch

    ids, vocab = char_tokens(zen_of_python())
    config = GPTConfig(vocab_size=len(vocab), block_size=block, n_layer=n_layer, n_head=4, d_model=d_model)
    return GPT(config, seed=seed), torch.from_numpy(token_windows(ids, batch, block, seed=seed)[0])


def _share(idx, shares: Sequence[int], rank: int):
    """Rank ``rank``'s windows: ``shares[rank]`` consecutive rows of ``idx`` (ranks in order)."""
    start = sum(shares[:rank])
    return idx[start:start + shares[rank]]


def flops_rank(rank: int, world_size: int, student_file: str, *, n_layer: int, d_model: int, block: int,
               shares: Sequence[int], seed: int):
    """Harness (one rank): the student's ``job_flops`` on this rank's share of the windows."""
    job_flops = student_function(load_student(student_file), "job_flops")
    model, idx = _problem(n_layer, d_model, block, sum(shares), seed)
    return job_flops(model, _share(idx, shares, rank))


def check_job_flops(student_file: str, *, shares: Sequence[int] = (1, 3), n_layer: int = 2, d_model: int = 64,
                    block: int = 32, seed: int = 0) -> None:
    """Run the student's ``job_flops`` on ``len(shares)`` ranks, rank r holding ``shares[r]`` windows of
    ``block`` tokens (unequal on purpose); every rank must return the whole job's count."""
    world_size = len(shares)
    if len(set(shares)) == 1:
        raise ValueError(f"shares={shares}: give the ranks unequal shares, or one rank's count times the world "
                         "size passes for the job's")
    results = run_ranks(flops_rank, student_file, world_size, n_layer=n_layer, d_model=d_model, block=block,
                        shares=tuple(shares), seed=seed)
    total, own, forward, weights_only = reference_counts(n_layer, d_model, block, tuple(shares), seed)
    for rank, got in enumerate(results):
        got = _as_count(got, rank, results)
        if got != total:
            hint = _job_flops_hint(got, total, own, rank, forward, weights_only)
            raise AssertionError(f"rank {rank} of {world_size} ({shares[rank]} of the job's {sum(shares)} windows): "
                                 f"job_flops returned {got:,.0f}, but one training step of the job is {total:,} "
                                 f"FLOPs: {hint}.")


@functools.lru_cache(maxsize=8)
def reference_counts(n_layer: int, d_model: int, block: int, shares: tuple[int, ...],
                     seed: int) -> tuple[int, tuple[int, ...], int, int]:
    """FLOPs counted in one process: the job's training step on all the windows, each rank's step on its
    share, the job's forward pass alone, and 6 × matmul weights × tokens (attention's matmuls left out)."""
    model, idx = _problem(n_layer, d_model, block, sum(shares), seed)

    def step(x):
        def run():
            _, loss = model(x, x)
            loss.backward()
        return run

    own = tuple(accounting.count_flops(step(_share(idx, shares, r))) for r in range(len(shares)))
    c = model.config
    return (accounting.count_flops(step(idx)), own, accounting.count_flops(lambda: model(idx)),
            6 * accounting.matmul_params(c.vocab_size, c.n_layer, c.d_model) * idx.numel())


def _as_count(got: Any, rank: int, results: Sequence[Any]) -> float:
    """Rank ``rank``'s returned value as a number, or feedback on why it is not one."""
    if got is None or got is Ellipsis:
        if any(r is not None and r is not Ellipsis for r in results):
            raise AssertionError(f"rank {rank}: job_flops returned {got!r} while another rank returned a count: "
                                 "every rank must return the job's count (all-reduce it, then return it everywhere).")
        raise AssertionError(f"rank {rank}: job_flops returned {got!r}: it still does nothing. Count one "
                             "training step with accounting.count_flops, then all-reduce the count.")
    if hasattr(got, "numel") and got.numel() == 1:
        got = got.item()
    if isinstance(got, bool) or not isinstance(got, int | float):
        raise AssertionError(f"rank {rank}: job_flops returned a {type(got).__name__}; return a number.")
    return got


def _job_flops_hint(got: float, total: int, own: Sequence[int], rank: int, forward: int, weights_only: int) -> str:
    """The classic mistake behind a wrong count on rank ``rank`` (``own``: each rank's own count;
    ``forward``, ``weights_only``: the job's forward pass, and its step without attention's matmuls)."""
    world_size = len(own)
    if got == own[rank] * world_size:
        return ("you multiplied one rank's count by the world size: ranks can hold different work, all-reduce "
                "the counts (a sum over the ranks)")
    if got == own[rank]:
        return "that is one rank's share: all-reduce the counts (a sum over the ranks) to get the job's"
    if got == max(own):
        return "that is the largest rank's count: all-reduce with the default op, ReduceOp.SUM, not MAX"
    if got * world_size == total:
        return "that is the ranks' average: the job's FLOPs are their sum, do not divide by the world size"
    if got == forward:
        return "that is the forward pass only: the training step's backward costs twice as much again"
    if got == weights_only:
        return ("attention's own matmuls are missing: count with accounting.count_flops, which runs "
                "attention on the math kernel FlopCounterMode can see")
    if abs(got - total) <= 1e-6 * total:
        return ("close but not exact: float32 has a 24-bit significand, so counts above 16,777,216 are "
                "rounded; all-reduce an int64 (or float64) tensor")
    return "count one step (forward and the loss's backward) on this rank's windows, then sum over the ranks"


# ---------------------------------------------------------------------------------------------
# The planted wrong answers (tools/mutants.py, tests/test_mutants.py)
# ---------------------------------------------------------------------------------------------

_ATTN = "12 * layers * s * h"
_DAYS = "return 6 * params * tokens / (gpus * peak_flops * mfu) / 86_400"
_CHECK = "    if not 0 < mfu <= 1:\n"

MUTANTS = {
    "q1": (
        Mutant("head missing", "the output head is missing", edits=(("12 * h * h + h * vocab", "12 * h * h"),)),
        Mutant("attention missing", "attention's own matmuls are missing", edits=((f" + {_ATTN})", ")"),)),
        Mutant("forward only", "the forward pass only",
               edits=((f"(6 * n + {_ATTN})", "(2 * n + 4 * layers * s * h)"),)),
        Mutant("attention not per layer", "attention's term is per layer", edits=((_ATTN, "12 * s * h"),)),
        Mutant("blocks not per layer", "are per layer: multiply by `layers`",
               edits=(("layers * 12 * h * h", "12 * h * h"),)),
        Mutant("embedding counted as a matmul", "the token embedding is a lookup",
               edits=(("+ h * vocab", "+ 2 * h * vocab"),)),
        Mutant("causal half", "the causal mask does not halve", edits=((_ATTN, "6 * layers * s * h"),)),
        Mutant("a float", "return an int", edits=(("* tokens", "* float(tokens)"),)),
    ),
    "q2": (
        Mutant("mfu = 1 rejected", "mfu = 1 is the ideal upper bound", edits=((_CHECK, "    if not 0 < mfu < 1:\n"),)),
        Mutant("no mfu check", "training_days checks no mfu",
               edits=((_CHECK + '        raise ValueError(f"mfu is a fraction in (0, 1], got {mfu}")\n', ""),)),
        Mutant("mfu = 0 accepted", "mfu <= 0 means", edits=((_CHECK, "    if not 0 <= mfu <= 1:\n"),)),
        Mutant("only mfu > 1 checked", "mfu <= 0 means", edits=((_CHECK, "    if mfu > 1:\n"),)),
        Mutant("forward only", "the forward pass only", edits=((_DAYS, _DAYS.replace("6 *", "2 *")),)),
        Mutant("hours", "that is in hours", edits=((_DAYS, _DAYS.replace("86_400", "3_600")),)),
        Mutant("one GPU", "one GPU's time", edits=((_DAYS, _DAYS.replace("gpus * ", "")),)),
        Mutant("times mfu", "divide by mfu, not multiply",
               edits=((_DAYS, _DAYS.replace("(gpus * peak_flops * mfu)", "(gpus * peak_flops) * mfu")),)),
    ),
    "q3": (
        Mutant("times the world size", "you multiplied one rank's count by the world size",
               edits=(("    dist.all_reduce(count)\n", "    count *= dist.get_world_size()\n"),)),
        Mutant("no all-reduce", "that is one rank's share", edits=(("    dist.all_reduce(count)\n", ""),)),
        Mutant("all-reduce MAX", "the largest rank's count",
               edits=(("dist.all_reduce(count)", "dist.all_reduce(count, op=dist.ReduceOp.MAX)"),)),
        Mutant("averaged", "the ranks' average",
               edits=(("    dist.all_reduce(count)\n",
                       "    dist.all_reduce(count)\n    count //= dist.get_world_size()\n"),)),
        Mutant("forward only", "the forward pass only", edits=(("        loss.backward()\n", "        pass\n"),)),
        Mutant("float32 count", "24-bit significand", edits=(("dtype=torch.int64", "dtype=torch.float32"),)),
        Mutant("FlopCounterMode on the fused kernel", "attention's own matmuls are missing",
               edits=(("accounting.count_flops(step)", "flops(step)"),
                      ("    return int(count)\n", "    return int(count)\n\n\ndef flops(fn):\n"
                       "    from torch.utils.flop_counter import FlopCounterMode\n\n"
                       "    with FlopCounterMode(display=False) as counter:\n        fn()\n"
                       "    return counter.get_total_flops()\n"))),
        Mutant("counted on rank 0 only", "every rank must return the job's count",
               edits=(("    return int(count)\n", "    return int(count) if dist.get_rank() == 0 else None\n"),)),
    ),
}
