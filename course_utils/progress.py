"""Progress bars for cells that take more than a few seconds.

``bar(iterable, desc=...)`` wraps a loop; ``Waiting(n, desc)`` is what the launchers show while
processes run (``launch.run(..., progress="training")``, ``subprocesses.run_commands(..., progress=...)``).

In a Jupyter kernel the live bar (with elapsed time and rate) is the text of one display that is
updated in place while the cell runs. When the bar closes that display is emptied and the finished
bar is printed once, without timings — ``desc: 100%|██████████| 4/4`` — so what a notebook stores,
what GitHub shows and what strict nbval compares is the finished bar, the same on every machine.
(nbval records a display as it first appeared, ignoring its updates: hence an empty display, which
is the same before and after, and a printed line, rather than a display updated to the finished bar.)
In a terminal it is tqdm's usual text bar on stderr. Imports tqdm only when a bar is made.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from typing import Any

FINISHED_FORMAT = "{l_bar}{bar:10}| {n_fmt}/{total_fmt}"   # no elapsed time, no rate


def finished_text(desc: str, n: int, total: int | None) -> str:
    """The bar's last state as a line that depends only on its counts: ``'sizes:  75%|███████▌  | 3/4'``,
    or ``'sizes: 5'`` when the total is unknown."""
    from tqdm import tqdm

    if not total:
        return f"{desc}: {n}"
    return tqdm.format_meter(n, total, 0, prefix=desc, ascii=False, bar_format=FINISHED_FORMAT)


def in_kernel() -> bool:
    """Whether this code runs in a Jupyter kernel (an IPython shell with a kernel attached)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return getattr(shell, "kernel", None) is not None


class _LiveDisplay:
    """A file for tqdm whose every write replaces the text of one display (an IPython display handle)."""

    encoding = "utf-8"

    def __init__(self) -> None:
        from IPython.display import display

        self.handle = display({"text/plain": ""}, raw=True, display_id=True)

    def write(self, text: str) -> None:
        line = text.rsplit("\r", 1)[-1].rstrip()
        if line:
            self.handle.update({"text/plain": line}, raw=True)

    def flush(self) -> None:
        pass

    def clear(self) -> None:
        self.handle.update({"text/plain": ""}, raw=True)


def _notebook_bar_class() -> type:
    from tqdm import tqdm

    class NotebookBar(tqdm):
        """tqdm drawing into a live display; on close, the display empties and the finished line is printed."""

        def close(self) -> None:
            if self.disable:
                return
            desc, n, total, live = self.desc, self.n, self.total, self.fp
            super().close()
            live.clear()
            print(finished_text(desc, n, total), flush=True)

    return NotebookBar


def bar(iterable: Iterable | None = None, *, desc: str, total: int | None = None, unit: str = "it") -> Any:
    """A tqdm progress bar over ``iterable``, or a manual one with ``total``.

    Use it as ``for x in bar(xs, desc="sizes")`` or ``with bar(total=n, desc=...) as b: b.update()``.
    In a notebook the finished bar is printed as :func:`finished_text` when the bar closes.
    """
    if not desc:
        raise ValueError("give the bar a desc: it is what the reader sees while waiting")
    if in_kernel():
        return _notebook_bar_class()(iterable, desc=desc, total=total, unit=unit, leave=False,
                                     mininterval=0.25, ascii=False, file=_LiveDisplay())
    from tqdm import tqdm

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
