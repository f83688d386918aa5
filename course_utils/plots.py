"""One figure style for the whole course: labelled axes with units, a light grid, same colours."""
from __future__ import annotations

import matplotlib

matplotlib.rcParams.update({
    "figure.figsize": (6.4, 4.0),
    "figure.dpi": 100,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
    "font.size": 10,
})

import matplotlib.pyplot as plt  # noqa: E402  (after the style is set)
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

COLORS = {"measured": "C0", "model": "C1", "single": "C2", "parallel": "C0", "bug": "C3"}


def human_bytes(n: float) -> str:
    """4096 -> '4 KiB', 16777216 -> '16 MiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def figure(xlabel: str, ylabel: str, title: str | None = None, *, logx: bool = False,
           logy: bool = False, bytes_x: bool = False, ncols: int = 1):
    """A new ``(fig, ax)`` in the course style. Log x axes are base 2 (sizes, ranks, bytes) with
    plain tick labels; ``bytes_x`` labels the x axis as KiB/MiB.

    Put units in the labels: ``figure("message size", "time (ms)")``. With ``ncols`` > 1,
    ``ax`` is an array of axes sharing the labels' style.
    """
    fig, axes = plt.subplots(1, ncols, figsize=(6.4 * ncols if ncols > 1 else 6.4, 4.0))
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    for ax in (axes if ncols > 1 else [axes]):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if logx:  # the course's x values are powers of two: sizes, ranks, bytes
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: human_bytes(v)) if bytes_x else plain)
            ax.xaxis.set_minor_formatter(NullFormatter())
        if logy:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(NullFormatter())
    if title:
        fig.suptitle(title)
    return fig, axes
