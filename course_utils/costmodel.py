"""Back-of-the-envelope models of parallel training: pure arithmetic, no framework.

Units: bytes, seconds, bytes/second. The alpha-beta (latency-bandwidth) model says sending
``n`` bytes costs ``alpha + n * beta``: ``alpha`` is the per-message latency in seconds and
``beta`` the time per byte (1 / bandwidth).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def amdahl_speedup(parallel_fraction: float, n: int | np.ndarray) -> float | np.ndarray:
    """Amdahl's law: speed-up on ``n`` workers when ``parallel_fraction`` of the work parallelises.

    ``S(n) = 1 / ((1 - p) + p / n)``; it never exceeds ``1 / (1 - p)``, however large ``n``.
    """
    if not 0.0 <= parallel_fraction <= 1.0:
        raise ValueError(f"parallel_fraction must be in [0, 1], got {parallel_fraction}")
    n = np.asarray(n, dtype=float)
    if np.any(n < 1):
        raise ValueError("n (the number of workers) must be >= 1")
    out = 1.0 / ((1.0 - parallel_fraction) + parallel_fraction / n)
    return float(out) if out.ndim == 0 else out


def ring_allreduce_time(nbytes: float | np.ndarray, n: int, alpha: float, beta: float):
    """Time in seconds of a ring all-reduce of ``nbytes`` over ``n`` ranks.

    The ring does ``n - 1`` reduce-scatter steps and ``n - 1`` all-gather steps, each sending a
    chunk of ``nbytes / n``:  ``T = 2 (n-1) alpha + 2 (n-1)/n * nbytes * beta``.
    The latency term grows linearly with ``n``; the bandwidth term approaches ``2 nbytes beta``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if n == 1:
        return np.zeros_like(np.asarray(nbytes, dtype=float)) + 0.0
    steps = 2 * (n - 1)
    return steps * alpha + steps / n * np.asarray(nbytes, dtype=float) * beta


RING_MESSAGES = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1, "all_to_all": 1}   # × (n - 1)


def collective_time(kind: str, sent_bytes: float, n: int, alpha: float, beta: float) -> float:
    """Time in seconds of one collective of ``kind`` on ``n`` ranks in which each rank sends
    ``sent_bytes`` (``commcount.ring_bytes_sent`` gives them from the input): ``alpha`` per message
    — 2 (n-1) messages for a ring all-reduce, n - 1 for an all-gather, a reduce-scatter or an
    all-to-all — plus the bytes at ``beta``. With ``sent_bytes = 2 (n-1)/n · nbytes`` an all-reduce
    is :func:`ring_allreduce_time`."""
    if kind not in RING_MESSAGES:
        raise ValueError(f"unknown collective {kind!r}; one of {sorted(RING_MESSAGES)}")
    if n < 2:
        return 0.0
    return RING_MESSAGES[kind] * (n - 1) * alpha + sent_bytes * beta


def bus_bandwidth(nbytes: float, seconds: float, n: int) -> tuple[float, float]:
    """(algbw, busbw) in bytes/s for an all-reduce, as nccl-tests defines them.

    ``algbw = nbytes / seconds``; ``busbw = algbw * 2 (n-1) / n``, the rate each link really
    carried, comparable to the hardware's link bandwidth whatever ``n`` is.
    """
    algbw = nbytes / seconds
    return algbw, algbw * 2 * (n - 1) / n


@dataclass
class AlphaBeta:
    """A fitted alpha-beta model: ``alpha`` in s, ``beta`` in s/byte, for ``n`` ranks."""

    alpha: float
    beta: float
    n: int

    @property
    def bandwidth(self) -> float:
        """1 / beta, in bytes/s."""
        return 1.0 / self.beta

    def predict(self, nbytes):
        """Predicted all-reduce time (s) for ``nbytes``."""
        return ring_allreduce_time(nbytes, self.n, self.alpha, self.beta)


def fit_alpha_beta(nbytes: Sequence[float], seconds: Sequence[float], n: int) -> AlphaBeta:
    """Fit the ring model to measured all-reduce times by least squares on relative error.

    Relative (1/t-weighted) errors let the small messages, which fix ``alpha``, count as much as
    the big ones, which fix ``beta``. Both are constrained to be >= 0.
    """
    x = np.asarray(nbytes, dtype=float)
    t = np.asarray(seconds, dtype=float)
    if x.shape != t.shape or x.size < 2:
        raise ValueError("need at least two (nbytes, seconds) pairs of equal length")
    if n < 2:
        raise ValueError("an all-reduce over n < 2 ranks moves no data; fit needs n >= 2")
    a = np.stack([np.full_like(x, 2 * (n - 1)), 2 * (n - 1) / n * x], axis=1) / t[:, None]
    coef, *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    alpha, beta = np.maximum(coef, [0.0, 1e-15])
    return AlphaBeta(float(alpha), float(beta), n)


def data_parallel_step_time(compute_s: float, grad_bytes: float, n: int, alpha: float,
                            beta: float, overlap: float = 0.0, messages: int = 1) -> float:
    """Step time (s) of data parallel training on ``n`` ranks with a fixed global batch.

    Compute splits ``n`` ways; the gradient all-reduce does not. The gradients travel in
    ``messages`` all-reduces (one per parameter tensor when done naively; a few buckets in DDP),
    each paying the latency; ``overlap`` (0..1) of the communication hides behind the backward pass.
    """
    if messages < 1:
        raise ValueError("messages must be >= 1")
    comm = float(ring_allreduce_time(grad_bytes / messages, n, alpha, beta)) * messages
    return compute_s / n + (1.0 - overlap) * comm


BYTES_PER_PARAM = {
    # (weights, gradients, optimizer state) in bytes per parameter
    ("fp32", "sgd"): (4, 4, 0),
    ("fp32", "momentum"): (4, 4, 4),
    ("fp32", "adam"): (4, 4, 8),
    # mixed precision: 16-bit weights and grads plus an fp32 master copy inside the optimizer
    ("amp", "adam"): (2, 2, 12),
}


def memory_per_param(precision: str = "fp32", optimizer: str = "adam") -> int:
    """Bytes per parameter for weights + gradients + optimizer state (activations excluded).

    Adam costs 16 B/param in fp32 *and* in classic mixed precision (2+2+4+4+4): AMP saves
    activation memory and time, not model-state memory.
    """
    key = (precision, optimizer)
    if key not in BYTES_PER_PARAM:
        raise ValueError(f"unknown combination {key}; known: {sorted(BYTES_PER_PARAM)}")
    return sum(BYTES_PER_PARAM[key])


ZERO_STAGES = {
    # stage: which of (weights, gradients, optimizer state) are split across the ranks
    0: (False, False, False),   # plain data parallel (DDP): everything replicated
    1: (False, False, True),    # ZeRO-1: optimizer state sharded
    2: (False, True, True),     # ZeRO-2: + gradients (reduce-scatter instead of all-reduce)
    3: (True, True, True),      # ZeRO-3 / FSDP: + parameters (all-gathered layer by layer when needed)
}


def zero_bytes_per_rank(n_params: float, world_size: int, stage: int, precision: str = "fp32",
                        optimizer: str = "adam") -> float:
    """Bytes of model state (weights, gradients, optimizer state) one rank holds under ZeRO ``stage``.

    Activations and the temporarily gathered parameters of ZeRO-3 are excluded. ``stage`` 0 is DDP.
    """
    if stage not in ZERO_STAGES:
        raise ValueError(f"ZeRO stage must be one of {sorted(ZERO_STAGES)}, got {stage!r}")
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    memory_per_param(precision, optimizer)  # validates the combination
    parts = BYTES_PER_PARAM[(precision, optimizer)]
    return float(sum(n_params * b / (world_size if sharded else 1)
                     for b, sharded in zip(parts, ZERO_STAGES[stage])))


def pipeline_bubble(stages: int, microbatches: int) -> float:
    """Idle fraction of a GPipe/1F1B pipeline: ``(p - 1) / (m + p - 1)``."""
    if stages < 1 or microbatches < 1:
        raise ValueError("stages and microbatches must be >= 1")
    return (stages - 1) / (microbatches + stages - 1)
