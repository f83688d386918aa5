"""Progress bars for cells that take more than a few seconds.

``bar(iterable, desc=...)`` wraps a loop; ``Waiting(n, desc)`` is what the launchers show while
processes run (``launch.run(..., progress="training")``, ``scripts.run_commands(..., progress=...)``).

In JupyterLab the bar is a live tqdm widget. What a notebook *stores* is the widget's text form at
the moment it appeared — ``desc:   0%|          | 0/4 [00:00<?, ?it/s]`` — which is the same on
every run, so strict nbval can compare it; the finished bar is kept in the notebook's widget
state. In a terminal it is tqdm's usual text bar on stderr. Imports tqdm only when a bar is made.
"""
from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any


def bar(iterable: Iterable | None = None, *, desc: str, total: int | None = None, unit: str = "it") -> Any:
    """A tqdm progress bar (a widget in Jupyter) over ``iterable``, or a manual one with ``total``.

    Use it as ``for x in bar(xs, desc="sizes")`` or ``with bar(total=n, desc=...) as b: b.update()``.
    """
    from tqdm.auto import tqdm

    if not desc:
        raise ValueError("give the bar a desc: it is what the reader sees while waiting")
    return tqdm(iterable, desc=desc, total=total, unit=unit, leave=True, mininterval=0.25)


class Waiting:
    """A bar over ``n`` processes that a launcher waits for: ``done(k)`` advances it to ``k``
    finished processes; ``tick()`` (called from the launcher's wait loop, at most every 0.5 s
    redrawn) keeps the elapsed time moving while nothing finishes. ``desc=None``: no bar at all."""

    def __init__(self, n: int, desc: str | None, unit: str = "proc"):
        self._bar = bar(total=n, desc=desc, unit=unit) if desc else None
        self._last = 0.0

    def done(self, finished: int) -> None:
        if self._bar is not None and finished > self._bar.n:
            self._bar.update(finished - self._bar.n)

    def tick(self) -> None:
        now = time.monotonic()
        if self._bar is not None and now - self._last >= 0.5:
            self._bar.refresh()
            self._last = now

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> Waiting:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
