"""Comparing two runs: how far apart are their weights? Framework-neutral (NumPy only).

Chapters that train the same model two ways (one device vs many, one framework vs another) check
that the results agree with :func:`max_abs_diff`. For PyTorch modules see
:func:`course_utils.models.max_param_diff`.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def max_abs_diff(a: Sequence, b: Sequence) -> float:
    """Largest ``|x - y|`` over matching arrays of two equally long, same-shaped lists.

    The items may be NumPy arrays or anything ``np.asarray`` converts (TensorFlow tensors, Keras
    variables, lists of numbers).
    """
    xs, ys = [np.asarray(x) for x in a], [np.asarray(y) for y in b]
    if len(xs) != len(ys) or any(x.shape != y.shape for x, y in zip(xs, ys)):
        raise ValueError(f"the two lists do not match: shapes {[x.shape for x in xs]} vs {[y.shape for y in ys]}")
    if not xs:
        raise ValueError("nothing to compare: both lists are empty")
    return max(float(np.max(np.abs(x - y))) for x, y in zip(xs, ys))
