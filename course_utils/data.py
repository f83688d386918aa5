"""Datasets used across chapters, as NumPy arrays (framework-neutral; no downloads).

Every function is deterministic given ``seed``. Features are float32, class labels int64.
"""
from __future__ import annotations

import gzip
import importlib.machinery
from pathlib import Path

import numpy as np


def linear_regression(n: int = 256, d: int = 10, noise: float = 0.1, seed: int = 0):
    """``(X, y, w_true)``: ``X`` is (n, d), ``y = X @ w_true + noise * N(0, 1)`` is (n, 1).

    Features and labels come out *together*: shard them with the same indices.
    """
    if n < 1 or d < 1:
        raise ValueError("n and d must be >= 1")
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(np.float32)
    w_true = rng.standard_normal((d, 1)).astype(np.float32)
    y = (X @ w_true + noise * rng.standard_normal((n, 1))).astype(np.float32)
    return X, y, w_true


def digits(test_fraction: float = 0.25, seed: int = 0):
    """scikit-learn's bundled 8x8 digits (1797 images, 10 classes), standardised.

    Returns ``(X_train, y_train, X_test, y_test)``; ``X`` is (n, 64) float32 with zero mean and
    unit variance per pixel (statistics from the training split), ``y`` is (n,) int64.
    """
    X, y = _sklearn_digits()
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    n_test = int(round(test_fraction * len(y)))
    test, train = order[:n_test], order[n_test:]
    mean = X[train].mean(axis=0)
    std = X[train].std(axis=0) + 1e-6
    X = ((X - mean) / std).astype(np.float32)
    return X[train], y[train].astype(np.int64), X[test], y[test].astype(np.int64)


def zen_of_python() -> str:
    """The Zen of Python (what ``import this`` prints): 856 characters of text that ship with every
    Python, unchanged since 2004 — a character-level corpus that needs no download."""
    import codecs
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):   # importing `this` prints the poem
        import this
    return codecs.decode(this.s, "rot13")


def char_tokens(text: str) -> tuple[np.ndarray, list[str]]:
    """Character-level tokens of ``text``: ``(ids, vocab)``, ids (len(text),) int64 indexing the
    sorted list of distinct characters ``vocab``."""
    vocab = sorted(set(text))
    index = {c: i for i, c in enumerate(vocab)}
    return np.array([index[c] for c in text], dtype=np.int64), vocab


def token_windows(ids: np.ndarray, batch: int, block: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``batch`` random windows of ``block`` tokens and their next tokens: ``(x, y)``, both
    (batch, block) int64, ``y[:, t] = ids[start + t + 1]`` — the language-modelling targets."""
    if not 1 <= block < len(ids):
        raise ValueError(f"block must be between 1 and {len(ids) - 1} (the text has {len(ids)} tokens), got {block}")
    starts = np.random.default_rng(seed).integers(0, len(ids) - block, size=batch)
    x = np.stack([ids[s:s + block] for s in starts])
    y = np.stack([ids[s + 1:s + block + 1] for s in starts])
    return x, y


def _sklearn_digits() -> tuple[np.ndarray, np.ndarray]:
    """``load_digits(return_X_y=True)`` read from the file scikit-learn ships, without importing
    scikit-learn (which would import SciPy too: ~0.5 s and ~50 MB in every worker that needs data).

    ``X`` is (1797, 64) float64 pixel intensities 0..16, ``y`` is (1797,) int.
    """
    spec = importlib.machinery.PathFinder.find_spec("sklearn")   # finds the package, imports nothing
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the digits dataset ships with scikit-learn: pip install scikit-learn "
                                  "(`make install` installs it)")
    path = Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / "digits.csv.gz"
    with gzip.open(path) as f:
        table = np.loadtxt(f, delimiter=",")
    return table[:, :-1], table[:, -1].astype(int)


def shard(n: int, rank: int, world_size: int) -> np.ndarray:
    """Indices of rank ``rank``'s shard of ``n`` samples: every ``world_size``-th, from ``rank``.

    The shards are disjoint and together cover every index once (sizes differ by at most 1).
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    return np.arange(rank, n, world_size)
