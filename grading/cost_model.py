"""Exercises 01: graders for Amdahl's law, the α-β time of a ring all-reduce and bus bandwidth.

Each check calls the student's function on the prompt's examples and on seeded random inputs
(fractions, rank counts from 1 up, message sizes from 0 bytes), compares with
:mod:`course_utils.costmodel`, and when the results fit a classic wrong formula says which one.
The ring check also takes the answer apart: its latency term (``beta = 0``) must be ``2 (n-1)``
alphas and its bandwidth term (``alpha = 0``) ``2 (n-1)/n · nbytes`` betas, whatever ``n`` is.
"""
from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

from course_utils.costmodel import amdahl_speedup, bus_bandwidth, ring_allreduce_time

from .feedback import call_student, check_number, explain
from .mutant import Mutant


def _results(fn: Callable, name: str, cases: Sequence[tuple]) -> list[float]:
    """``fn(*case)`` for every case, each checked to be a number (a student's exception becomes feedback)."""
    return [check_number(call_student(fn, name, *case), f"{name}{case}") for case in cases]


def _first_wrong(got: Sequence[float], want: Sequence[float], rtol: float = 1e-9) -> int | None:
    """The index of the first ``got`` that is not ``want`` within ``rtol``, or None."""
    return next((i for i, (g, w) in enumerate(zip(got, want))
                 if not math.isclose(g, w, rel_tol=rtol, abs_tol=1e-15)), None)


# --- Q1: Amdahl's law ---------------------------------------------------------------------------------

AMDAHL_MISTAKES = (
    (lambda p, n: 1 / (p + (1 - p) / n),
     "you swapped p and 1 - p: p is the fraction that parallelises, so it is p that is divided by n."),
    (lambda p, n: (1 - p) + p / n,
     "that is the run time on n workers as a fraction of the time on one; the speed-up is its reciprocal, "
     "1 / ((1 - p) + p / n)."),
    (lambda p, n: (1 - p) + p * n,
     "that is Gustafson's scaled speed-up, for a problem that grows with n; Amdahl's law keeps the work "
     "fixed: 1 / ((1 - p) + p / n)."),
    (lambda p, n: 1 / ((1 - p) + p * n),
     "you multiplied p by n: on n workers the parallel part takes p / n of the time, not p * n."),
    (lambda p, n: 1 / (1 - p), "that does not depend on n: it is the limit for n -> infinity, not S(n)."),
    (lambda p, n: n * p + (1 - p) / n, "the speed-up is 1 / ((1 - p) + p / n)."),
)


def amdahl_cases(seed: int, count: int = 6) -> list[tuple[float, int]]:
    """``count`` seeded ``(p, n)`` pairs: p in [0, 1), n from 1 to 1024, with the edge cases p = 0, n = 1."""
    rng = random.Random(seed)
    cases = [(round(rng.random(), 3), rng.choice([2, 3, 5, 8, 16, 100, 1024])) for _ in range(count)]
    return cases + [(0.0, 16), (0.7, 1)]


def check_amdahl(amdahl: Callable, cases: Sequence[tuple[float, int]] = ((1.0, 8), (0.5, 2)), *,
                 seed: int | None = None) -> None:
    """Fail unless ``amdahl(p, n)`` is ``1 / ((1 - p) + p / n)`` on ``cases`` (and seeded random ones)."""
    cases = list(cases) + (amdahl_cases(seed) if seed is not None else [])
    got = _results(amdahl, "amdahl", cases)
    want = [amdahl_speedup(p, n) for p, n in cases]
    i = _first_wrong(got, want)
    if i is None:
        return
    why = explain(got, cases, AMDAHL_MISTAKES) or "S(n) = 1 / ((1 - p) + p / n)."
    raise AssertionError(f"`amdahl{cases[i]}` returned {got[i]:.6g}, expected {want[i]:.6g}: {why}")


def check_max_speedup(value: object, p: float) -> None:
    """Fail unless ``value`` is the largest speed-up any number of workers reaches, ``1 / (1 - p)``."""
    got = check_number(value, f"max_speedup_{round(p * 100)}")
    want = 1 / (1 - p)
    if math.isclose(got, want, rel_tol=1e-9):
        return
    if got < want and got > 1 and math.isclose(got, amdahl_speedup(p, round(p * got / (1 - got * (1 - p)))),
                                                rel_tol=1e-6):
        why = ("that is the speed-up of a finite number of workers: let n grow without bound, p / n -> 0, "
               "and the speed-up tends to 1 / (1 - p).")
    elif math.isclose(got, 1 / p, rel_tol=1e-9):
        why = "that is 1 / p: the serial fraction is 1 - p, and the limit is 1 / (1 - p)."
    else:
        why = "let n grow without bound: p / n -> 0, and S tends to 1 / (1 - p)."
    raise AssertionError(f"`max_speedup_{round(p * 100)}` is {got:.6g}, expected {want:.6g}: {why}")


# --- Q2: the α-β time of a ring all-reduce ------------------------------------------------------------

def ring_cases(seed: int, count: int = 5) -> list[tuple[int, int, float, float]]:
    """``count`` seeded ``(nbytes, n, alpha, beta)``: n from 2 to 64, 0 B to 1 GiB, alpha 1-50 µs, 1-100 GB/s."""
    rng = random.Random(seed)
    return [(rng.choice([0, 4096, 10**6, 2**20 * 25, 2**30]), rng.choice([2, 3, 4, 7, 8, 64]),
             rng.uniform(1e-6, 50e-6), 1 / rng.uniform(1e9, 100e9)) for _ in range(count)]


LATENCY_MISTAKES = (
    (lambda n: 2 * n, "You counted 2 n steps: a ring all-reduce takes n - 1 reduce-scatter steps and n - 1 "
                      "all-gather steps, 2 (n - 1) messages of latency alpha."),
    (lambda n: n - 1, "That is the reduce-scatter alone: you forgot the all-gather, which takes another n - 1 "
                      "steps (and sends as many bytes)."),
    (lambda n: 2 * math.log2(n), "2 log2(n) steps is a tree all-reduce; the ring takes 2 (n - 1) steps, each "
                                 "from one neighbour to the next."),
    (lambda n: 1, "The latency alpha is paid at every step, not once: 2 (n - 1) steps cost 2 (n - 1) alpha."),
    (lambda n: 2, "The latency alpha is paid at every step, not once per phase: 2 (n - 1) alpha."),
)
BANDWIDTH_MISTAKES_RING = (
    (lambda n, b: 2 * (n - 1) * b, "You sent the whole buffer at every step: each step sends one chunk, "
                                   "nbytes / n, so a rank sends 2 (n - 1) / n of the bytes in all."),
    (lambda n, b: (n - 1) / n * b, "That is the reduce-scatter alone: you forgot the all-gather, which sends as "
                                   "many bytes again."),
    (lambda n, b: 2 * b, "2 nbytes is the limit for many ranks; with n ranks each rank sends 2 (n - 1) / n of "
                         "the bytes (2 (n - 1) chunks of nbytes / n)."),
)


def check_ring_allreduce_seconds(fn: Callable, *, ns: Sequence[int] = (2, 4), nbytes: int = 100,
                                 seed: int | None = None) -> None:
    """Fail unless ``fn(nbytes, n, alpha, beta)`` is ``2 (n-1) alpha + 2 (n-1)/n · nbytes · beta``.

    For the rank counts ``ns`` the latency term (``fn(0, n, 1, 0)``: in alphas) and the bandwidth
    term (``fn(nbytes, n, 0, 1)``: in betas) are checked on their own, then ``n = 1`` (no message at
    all), then seeded realistic cases (``seed``), where the two terms must add up.
    """
    name = "ring_allreduce_seconds"
    latency = _results(fn, name, [(0, n, 1.0, 0.0) for n in ns])
    i = _first_wrong(latency, [2 * (n - 1) for n in ns])
    if i is not None:
        why = explain(latency, [(n,) for n in ns], LATENCY_MISTAKES) or "Each of the 2 (n - 1) steps costs one alpha."
        raise AssertionError(f"`{name}(0, {ns[i]}, alpha=1, beta=0)` returned {latency[i]:.6g}: the latency term "
                             f"must be {2 * (ns[i] - 1)} alphas. {why}")
    bandwidth = _results(fn, name, [(nbytes, n, 0.0, 1.0) for n in ns])
    i = _first_wrong(bandwidth, [2 * (n - 1) / n * nbytes for n in ns])
    if i is not None:
        why = (explain(bandwidth, [(n, nbytes) for n in ns], BANDWIDTH_MISTAKES_RING)
               or "2 (n - 1) steps, each sending a chunk of nbytes / n bytes at beta seconds per byte.")
        raise AssertionError(f"`{name}({nbytes}, {ns[i]}, alpha=0, beta=1)` returned {bandwidth[i]:.6g}: the "
                             f"bandwidth term must be {2 * (ns[i] - 1) / ns[i] * nbytes:.6g} bytes' worth of "
                             f"beta. {why}")
    alone, = _results(fn, name, [(2**20, 1, 5e-6, 1e-10)])
    if alone != 0:
        raise AssertionError(f"`{name}(2**20, 1, 5e-6, 1e-10)` returned {alone:.6g}: one rank has nobody to "
                             "talk to, so the all-reduce sends nothing and takes 0 s (2 (n - 1) = 0 steps).")
    if seed is None:
        return
    cases = ring_cases(seed)
    got = _results(fn, name, cases)
    want = [float(ring_allreduce_time(*case)) for case in cases]
    i = _first_wrong(got, want)
    if i is not None:
        raise AssertionError(f"`{name}{cases[i]}` returned {got[i]:.6g} s, expected {want[i]:.6g} s: "
                             "T = 2 (n - 1) * (alpha + nbytes / n * beta), the two terms added.")


# --- Q3: algorithm and bus bandwidth ----------------------------------------------------------------

BANDWIDTH_MISTAKES = (
    (lambda b, s, n: (b / s / 2**30, b / s / 2**30 * 2 * (n - 1) / n),
     "GB/s is 10⁹ bytes per second, not 2³⁰ (that is GiB/s): divide by 1e9."),
    (lambda b, s, n: (8 * b / s / 1e9, 8 * b / s / 1e9 * 2 * (n - 1) / n),
     "that is in gigabits per second: nccl-tests reports bytes, so leave out the factor 8."),
    (lambda b, s, n: (b / s / 1e9, b / s / 1e9 * (n - 1) / n),
     "busbw misses the factor 2: a ring all-reduce moves 2 (n - 1) / n of the buffer over each link "
     "(reduce-scatter, then all-gather)."),
    (lambda b, s, n: (b / s / 1e9, b / s / 1e9 * n / (2 * (n - 1))),
     "you inverted the correction: busbw = algbw * 2 (n - 1) / n, larger than algbw."),
    (lambda b, s, n: (b / s / 1e9, b / s / 1e9 * n),
     "busbw is not the bandwidth of all n GPUs together (algbw * n): it is what one link carried, "
     "algbw * 2 (n - 1) / n."),
    (lambda b, s, n: (b / s / 1e9, b / s / 1e9),
     "busbw corrects algbw by the bytes each link really carried: busbw = algbw * 2 (n - 1) / n."),
    (lambda b, s, n: (b / s / 1e9 * 2 * (n - 1) / n, b / s / 1e9),
     "you swapped the two: return (algbw, busbw), algbw = bytes / seconds."),
    (lambda b, s, n: (b / s / 1e9, 2 * b / s / 1e9),
     "the factor is 2 (n - 1) / n, not 2: it counts the chunks each rank sends and receives."),
)


def check_bandwidths(bandwidths: Callable, cases: Sequence[tuple[float, float, int]] = ((256 * 2**20, 2.5e-3, 8),),
                     ) -> None:
    """Fail unless ``bandwidths(nbytes, seconds, n)`` is ``(algbw, busbw)`` in GB/s, as nccl-tests defines them."""
    got = []
    for case in cases:
        call = f"bandwidths{case}"
        pair = call_student(bandwidths, "bandwidths", *case)
        if pair is None:
            raise AssertionError(f"`{call}` returned None: bandwidths still does nothing. Return (algbw, busbw).")
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise AssertionError(f"`{call}` returned {type(pair).__name__} {pair!r}: return two numbers, "
                                 "(algbw, busbw).")
        got.append(tuple(check_number(v, call) for v in pair))
    want = [tuple(v / 1e9 for v in bus_bandwidth(*case)) for case in cases]
    for case, g, w in zip(cases, got, want):
        for what, gv, wv in zip(("algbw", "busbw"), g, w):
            if not math.isclose(gv, wv, rel_tol=1e-9):
                why = _explain_pair(got, cases) or (
                    "algbw = nbytes / seconds / 1e9 and busbw = algbw * 2 (n - 1) / n (GB/s).")
                raise AssertionError(f"`bandwidths{case}` gave {what} = {gv:.6g} GB/s, expected {wv:.6g}: {why}")


def _explain_pair(got: list[tuple[float, float]], cases: Sequence[tuple]) -> str | None:
    """The classic mistake whose ``(algbw, busbw)`` are ``got`` on every case, or None."""
    for formula, message in BANDWIDTH_MISTAKES:
        wrong = [formula(*case) for case in cases]
        if all(math.isclose(g, w, rel_tol=1e-9) for gs, ws in zip(got, wrong) for g, w in zip(gs, ws)):
            return message
    return None


# --- Q4: predict from two measurements, then check against the others -------------------------------

def two_point_fit(measured: dict[int, float], n: int) -> tuple[float, float]:
    """``(alpha, beta)`` of the ring model through the smallest and the largest measured message exactly.

    ``measured`` maps message bytes to all-reduce seconds on ``n`` ranks; ``T(m) = L alpha + B(m) beta``
    with ``L = 2 (n-1)`` and ``B(m) = 2 (n-1)/n · m``, two equations in two unknowns.
    """
    small, large = min(measured), max(measured)
    steps = 2 * (n - 1)
    beta = (measured[large] - measured[small]) / (steps / n * (large - small))
    alpha = (measured[small] - steps / n * small * beta) / steps
    return alpha, beta


def synthetic_measurements(n: int, alpha: float, beta: float, seed: int) -> dict[int, float]:
    """Times of a perfect ring at the smallest and largest size, and of a slower one in between (the
    middle sizes are off the model by 20-60%), inserted out of size order: only a fit through
    ``min`` and ``max`` of the sizes gives back ``alpha`` and ``beta``."""
    rng = random.Random(seed)
    sizes = [4096, 65536, 2**20, 8 * 2**20]
    times = {m: float(ring_allreduce_time(m, n, alpha, beta)) for m in sizes}
    for m in sizes[1:-1]:
        times[m] *= rng.uniform(1.2, 1.6)
    order = [sizes[1], sizes[-1], sizes[0], sizes[2]]   # neither the first nor the last entry is min or max
    return {m: times[m] for m in order}


def check_predict_allreduce(predict_allreduce: Callable, measured: dict[int, float], measured_ranks: int,
                            nbytes: int, n: int, *,
                            synthetic: Sequence[tuple[int, float, float, int, int]] = ((2, 50e-6, 1e-9, 0, 8),),
                            ) -> None:
    """Fail unless ``predict_allreduce(measured, measured_ranks, nbytes, n)`` predicts the time on ``n``
    ranks with the ring model fitted exactly through the smallest and largest message of ``measured``
    (times on ``measured_ranks`` ranks).

    First on ``synthetic`` cases ``(measured_ranks, alpha, beta, seed, n)`` (:func:`synthetic_measurements`:
    the answer is ``ring_allreduce_time`` of the true ``alpha`` and ``beta``), then on the notebook's
    own ``measured`` times. ``measured`` must be left as it was.
    """
    for ranks, alpha, beta, seed, target in synthetic:
        data = synthetic_measurements(ranks, alpha, beta, seed)
        _check_one_prediction(predict_allreduce, data, ranks, 3 * 2**20, target, "synthetic ")
    _check_one_prediction(predict_allreduce, measured, measured_ranks, nbytes, n, "")


def _check_one_prediction(predict_allreduce: Callable, measured: dict[int, float], measured_ranks: int, nbytes: int,
                          n: int, which: str) -> None:
    """One call of ``predict_allreduce``, compared with the two-point fit's prediction."""
    copy = dict(measured)
    call = f"predict_allreduce({which}measured, measured_ranks={measured_ranks}, nbytes={nbytes}, n={n})"
    got = check_number(call_student(predict_allreduce, "predict_allreduce", copy, measured_ranks, nbytes, n), call)
    if copy != measured:
        raise AssertionError(f"`{call}` changed `measured`: read the measurements, leave them as they are.")
    alpha, beta = two_point_fit(measured, measured_ranks)
    want = float(ring_allreduce_time(nbytes, n, alpha, beta))
    if math.isclose(got, want, rel_tol=1e-9):
        return
    why = _explain_prediction(got, measured, measured_ranks, nbytes, n)
    if why.startswith("fit alpha and beta") and not _q2_is_right(predict_allreduce):
        why = ("your Q2 ring_allreduce_seconds gives other times than the ring model, and a prediction built on it "
               "inherits that: fix Q2 first (its check says what is wrong), then run this check again.")
    raise AssertionError(f"`{call}` returned {got:.6g} s, expected {want:.6g} s (alpha = {alpha:.3g} s, "
                         f"beta = {beta:.3g} s/B): {why}")


def _q2_is_right(predict_allreduce: Callable) -> bool:
    """Whether the notebook's own ``ring_allreduce_seconds`` (Q2), if it has one, is the ring model."""
    mine = getattr(predict_allreduce, "__globals__", {}).get("ring_allreduce_seconds")
    if not callable(mine):
        return True
    try:
        return all(math.isclose(float(mine(nbytes, n, 3e-6, 2e-10)), float(ring_allreduce_time(nbytes, n, 3e-6, 2e-10)),
                                rel_tol=1e-9) for nbytes, n in ((2**20, 4), (1000, 3), (8, 1)))
    except Exception:   # noqa: BLE001 - a broken Q2 is a wrong Q2
        return False


def _explain_prediction(got: float, measured: dict[int, float], measured_ranks: int, nbytes: int, n: int) -> str:
    """Which classic slip gives the prediction ``got``."""
    small, large = min(measured), max(measured)
    steps = 2 * (measured_ranks - 1)
    first, last = list(measured)[0], list(measured)[-1]
    alpha0 = measured[small] / steps
    beta0 = (measured[large] - steps * alpha0) / (steps / measured_ranks * large)
    p2p_beta = (measured[large] - measured[small]) / (large - small)
    p2p_alpha = measured[small] - small * p2p_beta

    def ring(a: float, b: float, ranks: int = n) -> float:
        return float(ring_allreduce_time(nbytes, ranks, a, b))

    def fit(lo: int = small, hi: int = large, ranks: int = measured_ranks) -> tuple[float, float]:
        return two_point_fit({lo: measured[lo], hi: measured[hi]}, ranks)

    alpha, beta = fit()
    candidates = [
        (ring(alpha0, beta0), "you took alpha from the smallest message alone, but its time holds a bandwidth "
                              "term too: solve the two equations (smallest and largest) together."),
        (ring(p2p_alpha, p2p_beta), "you fitted t = alpha + nbytes * beta, a single message; fit the ring's own "
                                    "model, T = 2 (n - 1) alpha + 2 (n - 1) / n * nbytes * beta."),
        (ring(*fit(min(first, last), max(first, last))) if first != last else math.nan,
         "you took the first and the last entry of `measured`: a dict keeps insertion order, not size order. "
         "Use min(measured) and max(measured)."),
        (ring(alpha, beta, measured_ranks),   # = ring(*fit(ranks=n)): both are the line through the two points
         "your prediction does not change with the rank count: you fitted and predicted with the same number of "
         "ranks. Fit with measured_ranks (the times were measured there), then predict with n: alpha and beta "
         "belong to the links, and the ring's 2 (n - 1) steps grow with n."),
        (2 * (n - 1) / n * nbytes * beta, "you left out the latency term, 2 (n - 1) alpha."),
        (ring(beta, alpha), "alpha and beta are swapped in the call: ring_allreduce_seconds(nbytes, n, alpha, beta)."),
    ]
    return next((message for value, message in candidates if math.isclose(got, value, rel_tol=1e-9)),
                "fit alpha and beta so that the ring model on measured_ranks ranks gives exactly the smallest and "
                "the largest measured times, then predict with ring_allreduce_seconds(nbytes, n, alpha, beta).")


_FIT = ("steps = 2 * (measured_ranks - 1)\n"
        "    beta = (measured[large] - measured[small]) / (steps / measured_ranks * (large - small))\n"
        "    alpha = (measured[small] - steps / measured_ranks * small * beta) / steps")

MUTANTS = {
    "q1": (
        Mutant("p and 1 - p swapped", "you swapped p and 1 - p", edits=(("(1 - p) + p / n", "p + (1 - p) / n"),)),
        Mutant("no reciprocal", "the speed-up is its reciprocal",
               edits=(("return 1 / ((1 - p) + p / n)", "return (1 - p) + p / n"),)),
        Mutant("Gustafson's law", "Gustafson's scaled speed-up",
               edits=(("return 1 / ((1 - p) + p / n)", "return (1 - p) + p * n"),)),
        Mutant("p times n", "you multiplied p by n", edits=(("p / n", "p * n"),)),
        Mutant("n ignored", "it is the limit for n -> infinity, not S(n)",
               edits=(("return 1 / ((1 - p) + p / n)", "return 1 / (1 - p)"),)),
        Mutant("the limit from a finite n", "the speed-up of a finite number of workers",
               edits=(("max_speedup_95 = 1 / (1 - 0.95)", "max_speedup_95 = amdahl(0.95, 1000)"),)),
        Mutant("the limit as 1 / p", "that is 1 / p", edits=(("1 / (1 - 0.95)", "1 / 0.95"),)),
    ),
    "q2": (
        Mutant("2 n steps", "You counted 2 n steps", edits=(("2 * (n - 1)", "2 * n"),)),
        Mutant("no all-gather", "you forgot the all-gather", edits=(("2 * (n - 1)", "(n - 1)"),)),
        Mutant("whole buffer every step", "You sent the whole buffer at every step",
               edits=(("nbytes / n * beta", "nbytes * beta"),)),
        Mutant("latency paid once", "The latency alpha is paid at every step",
               edits=(("2 * (n - 1) * (alpha + nbytes / n * beta)", "alpha + 2 * (n - 1) * nbytes / n * beta"),)),
        Mutant("2 nbytes on the wire", "2 nbytes is the limit for many ranks",
               edits=(("2 * (n - 1) * (alpha + nbytes / n * beta)", "2 * (n - 1) * alpha + 2 * nbytes * beta"),)),
        Mutant("tree steps", "2 log2(n) steps is a tree all-reduce",
               edits=(("return 2 * (n - 1) * (alpha", "import math\n    return 2 * math.log2(n) * (alpha"),)),
        Mutant("one rank pays a step", "one rank has nobody to talk to",
               edits=(("return 2 * (n - 1) * (alpha + nbytes / n * beta)",
                       "return 2 * max(n - 1, 1) * (alpha + nbytes / n * beta)"),)),
    ),
    "q3": (
        Mutant("GiB/s", "not 2³⁰", edits=(("nbytes / seconds / 1e9", "nbytes / seconds / 2**30"),)),
        Mutant("gigabits", "that is in gigabits per second", edits=(("nbytes / seconds", "8 * nbytes / seconds"),)),
        Mutant("no factor 2", "busbw misses the factor 2", edits=(("algbw * 2 * (n - 1) / n", "algbw * (n - 1) / n"),)),
        Mutant("correction inverted", "you inverted the correction",
               edits=(("algbw * 2 * (n - 1) / n", "algbw * n / (2 * (n - 1))"),)),
        Mutant("all GPUs together", "busbw is not the bandwidth of all n GPUs together",
               edits=(("algbw * 2 * (n - 1) / n", "algbw * n"),)),
        Mutant("no correction", "busbw corrects algbw", edits=(("algbw * 2 * (n - 1) / n", "algbw"),)),
        Mutant("swapped", "you swapped the two", edits=(("return algbw, busbw", "return busbw, algbw"),)),
        Mutant("factor 2 only", "not 2: it counts the chunks", edits=(("algbw * 2 * (n - 1) / n", "algbw * 2"),)),
    ),
    "q4": (
        Mutant("alpha from the smallest message alone", "you took alpha from the smallest message alone", edits=((
            _FIT, "steps = 2 * (measured_ranks - 1)\n    alpha = measured[small] / steps\n"
                  "    beta = (measured[large] - steps * alpha) / (steps / measured_ranks * large)"),)),
        Mutant("a single message's model", "you fitted t = alpha + nbytes * beta", edits=((
            _FIT, "beta = (measured[large] - measured[small]) / (large - small)\n"
                  "    alpha = measured[small] - small * beta"),)),
        Mutant("first and last entries", "a dict keeps insertion order, not size order",
               edits=(("small, large = min(measured), max(measured)",
                       "small, large = sorted([list(measured)[0], list(measured)[-1]])"),)),
        Mutant("fitted with the target ranks", "does not change with the rank count", edits=((
            _FIT, _FIT.replace("measured_ranks", "n")),)),
        Mutant("predicted for the measured ranks", "you fitted and predicted with the same number of ranks",
               edits=(("(nbytes, n, alpha, beta)", "(nbytes, measured_ranks, alpha, beta)"),)),
        Mutant("no latency term", "you left out the latency term",
               edits=(("return ring_allreduce_seconds(nbytes, n, alpha, beta)",
                       "return 2 * (n - 1) / n * nbytes * beta"),)),
        Mutant("alpha and beta swapped", "alpha and beta are swapped",
               edits=(("(nbytes, n, alpha, beta)", "(nbytes, n, beta, alpha)"),)),
    ),
}
