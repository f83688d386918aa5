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
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

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


def _validation_rows(rows, quantity: str) -> list[tuple[str, str, float | None, float | None]]:
    """(source, quantity, published, predicted) from tuples of 3 (source, published, predicted:
    ``quantity`` is theirs), tuples of 4 (source, quantity, published, predicted) or dicts with
    those keys (``quantity`` optional)."""
    out = []
    for row in rows:
        if isinstance(row, dict):
            missing = {"source", "published", "predicted"} - set(row)
            if missing:
                raise ValueError(f"a row {row!r} lacks {sorted(missing)}: give source, published, predicted "
                                 f"(and optionally quantity)")
            out.append((str(row["source"]), str(row.get("quantity", quantity)), row["published"], row["predicted"]))
        elif isinstance(row, (tuple, list)) and len(row) in (3, 4):
            source, *middle, published, predicted = row
            out.append((str(source), str(middle[0]) if middle else quantity, published, predicted))
        else:
            raise ValueError(f"a row must be (source, published, predicted), (source, quantity, published, "
                             f"predicted) or a dict with those keys, got {row!r}")
    for source, what, published, predicted in out:
        for name, value in (("published", published), ("predicted", predicted)):
            if value is not None and not value > 0:
                raise ValueError(f"{source} ({what}): {name} = {value!r}; a log-log plot needs positive numbers "
                                 f"(give None for a run the planner cannot express)")
        if published is None:
            raise ValueError(f"{source} ({what}): published is None; every row needs its published number")
    return out


def predicted_vs_published(rows, title: str, *, quantity: str = "TFLOP/s per GPU", band: float = 0.15):
    """Predicted against published on log-log axes, one panel per quantity (e.g. "memory per GPU
    (GB)", "TFLOP/s per GPU"; the quantity names the unit): a point per row coloured by its
    source (the same colour in every panel, one legend), the line y = x (gid ``"y=x"``) and the
    ± ``band`` (0.15: ±15 %) band around it (gid ``"band"``: predicted between (1 − band) and
    (1 + band) × published); each panel's title gives the median |predicted / published − 1|.

    ``rows``: tuples ``(source, published, predicted)`` (all of ``quantity``), tuples
    ``(source, quantity, published, predicted)``, or dicts with keys ``source``, ``published``,
    ``predicted`` and optionally ``quantity``. A row whose ``predicted`` is None (a run the
    planner cannot express) is counted in its panel's title, not drawn. Returns ``(fig, axes)``,
    one axis per quantity, in order of first appearance."""
    import numpy as np

    table = _validation_rows(rows, quantity)
    if not table:
        raise ValueError("no rows to plot: give (source, published, predicted) tuples")
    if not 0 < band < 1:
        raise ValueError(f"band must be a fraction between 0 and 1 (0.15 for ±15 %), got {band!r}")
    quantities = list(dict.fromkeys(q for _, q, _, _ in table))
    sources = list(dict.fromkeys(s for s, _, _, _ in table))
    colour = {s: f"C{i % 10}" for i, s in enumerate(sources)}
    fig, axes = figure("published", "predicted", title, ncols=len(quantities))
    axes = list(np.atleast_1d(axes))
    fig.set_size_inches(4.6 * len(quantities) + 1.8, 4.4)
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    for ax, what in zip(axes, quantities):
        here = [(s, pub, pred) for s, q, pub, pred in table if q == what]
        drawn = [(s, pub, pred) for s, pub, pred in here if pred is not None]
        values = [v for _, pub, pred in drawn for v in (pub, pred)] or [pub for _, pub, _ in here]
        low, high = min(values) / 1.5, max(values) * 1.5
        x = np.geomspace(low, high, 50)
        ax.fill_between(x, (1 - band) * x, (1 + band) * x, color="0.85", linewidth=0, gid="band",
                        label=f"±{band:.0%}")
        ax.plot(x, x, "k--", linewidth=1, gid="y=x", label="y = x")
        for source in sources:
            points = [(pub, pred) for s, pub, pred in drawn if s == source]
            if points:
                ax.scatter(*zip(*points), color=colour[source], label=source, zorder=3, gid=f"points:{source}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(plain)
            axis.set_minor_formatter(NullFormatter())
        ax.set_xlim(low, high)
        ax.set_ylim(low, high)
        ax.set_aspect("equal")
        ax.set_xlabel(f"published {what}")
        ax.set_ylabel(f"predicted {what}")
        errors = sorted(abs(pred / pub - 1) for _, pub, pred in drawn)
        median = float(np.median(errors)) if errors else float("nan")
        unexpressed = len(here) - len(drawn)
        ax.set_title(f"{what}: median |error| {median:.0%}"
                     + (f", {unexpressed} not expressible" if unexpressed else ""), fontsize=10)
    handles = [Line2D([], [], marker="o", linestyle="", color=colour[s], label=s) for s in sources]
    handles += [Line2D([], [], color="k", linestyle="--", label="y = x"),
                Patch(color="0.85", label=f"within ±{band:.0%}")]
    fig.set_layout_engine("constrained")        # room for the legend outside, right of the panels
    fig.legend(handles=handles, loc="outside right upper", fontsize=8)
    return fig, axes
