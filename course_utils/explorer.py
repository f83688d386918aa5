"""Which layout, at a glance: the planner's best layouts for a model, a GPU count and a sequence
length, drawn as per-GPU memory and step time by part — a static figure (:func:`layout_figure`,
stored in chapter 16 for the site and nbval) and the same figure behind controls
(:func:`layout_explorer`, ipywidgets, for readers on Binder or a local Jupyter).

Everything shown comes from ``course_utils.planner``: :func:`candidates` asks ``planner.plan`` for
every layout and recipe, keeps the fastest of each layout (or every recipe, ``distinct=False``), and
when fewer than ``top`` fit it fills the rest with those closest to fitting, each with the planner's
reason. The memory and time parts are whatever the planner returns: known parts are stacked in a
fixed order and colour, parts it adds later after them.

The batch is given in tokens (``global_batch_tokens``, as published runs state it: Llama 3 trained
on 16M tokens per step): ``global_batch_tokens / seq_len`` sequences, so a longer sequence means
fewer of them, as it does in practice.

Importing this module imports neither matplotlib nor ipywidgets (nor torch): each function imports
what it draws with.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from . import planner, shape
from .layout import Layout
from .shape import GPTConfig

if TYPE_CHECKING:       # for the annotations only
    from matplotlib.figure import Figure

MODELS: dict[str, GPTConfig] = {
    "Llama 3.1 8B": shape.LLAMA_3_1["8B"],
    "Llama 3.1 70B": shape.LLAMA_3_1["70B"],
    "Llama 3.1 405B": shape.LLAMA_3_1["405B"],
    # GPT-2's block (LayerNorm with biases, 4h GELU MLP, multi-head attention, learned positions):
    # GPT-2 XL (Radford et al. 2019) and GPT-3 6.7B (Brown et al. 2020, Table 2.1), untied heads
    "GPT-2 XL 1.5B": GPTConfig(vocab_size=50_257, block_size=1024, n_layer=48, n_head=25, d_model=1600),
    "GPT-3 6.7B": GPTConfig(vocab_size=50_257, block_size=2048, n_layer=32, n_head=32, d_model=4096),
}
"""The models the explorer offers, by name; :func:`layout_figure` also takes any ``GPTConfig``."""

CLUSTER_KINDS = ("H100", "H200", "A100")
"""GPU kinds: each names a dict of ``planner`` (``planner.H100``: hbm_gb, peak_tflops, links)."""

GPU_COUNTS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
SEQ_LENS = (2048, 4096, 8192, 16384, 32768, 65536, 131072)
BATCH_TOKENS = (2**19, 2**20, 2**21, 2**22, 2**23, 2**24)

MEMORY_ORDER = ("weights", "gradients", "optimizer", "activations", "logits")
TIME_ORDER = ("compute", "bubble", "tensor parallel", "context parallel", "expert parallel",
              "data parallel", "pipeline")
"""Parts stacked first, in this order and with fixed colours; any other part the planner returns
comes after them, in the order first met."""

_DIMS = ("tp", "cp", "pp", "dp", "ep")          # label order: innermost (chattiest) first
_SHORT = {"flash": ("", "no-flash"), "sequence_parallel": ("", "no-SP"), "overlap": ("overlap", ""),
          "dropout": ("dropout", "")}           # Recipe flag -> (text when True, text when False)


def layout_label(prediction: planner.Prediction) -> str:
    """A bar's name: the layout's sizes above 1 and the recipe, e.g. ``"tp8·pp4·dp2 Z1 full b1"``
    (ZeRO stage, recomputation, microbatch size; recipe flags that differ from ``Recipe()``'s
    defaults follow, e.g. ``no-flash``)."""
    lay, how = prediction.layout, prediction.recipe
    grid = "·".join(f"{d}{getattr(lay, d)}" for d in _DIMS if getattr(lay, d) > 1) or "dp1"
    if getattr(lay, "replicate", 1) > 1:
        grid += f"·rep{lay.replicate}"
    text = f"{grid} Z{how.zero} {how.recompute} b{how.microbatch}"
    default = planner.Recipe()
    for f in dataclasses.fields(how):           # whatever fields Recipe has: name the unusual ones
        value = getattr(how, f.name)
        if f.name in ("zero", "recompute", "microbatch") or value == getattr(default, f.name):
            continue
        word = _SHORT[f.name][0 if value else 1] if f.name in _SHORT else f"{f.name}={value}"
        text += f" {word}" if word else ""
    return text


def _short(reason: str, width: int = 60) -> str:
    return reason if len(reason) <= width else reason[:width - 1] + "…"


def _check_int(name: str, value: Any, hint: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}: {hint}")


def resolve(model: GPTConfig | str, gpus: int, seq_len: int, global_batch_tokens: int,
            cluster_kind: str = "H100", gpus_per_node: int = 8) -> tuple[GPTConfig, int, planner.Cluster]:
    """Check the inputs and turn them into the planner's: (the model with ``block_size = seq_len``,
    the global batch in sequences, the ``planner.Cluster``). Raises ValueError saying what to change."""
    if isinstance(model, str):
        if model not in MODELS:
            raise ValueError(f"unknown model {model!r}: give one of {list(MODELS)} or a shape.GPTConfig")
        model = MODELS[model]
    if not isinstance(model, GPTConfig):
        raise ValueError(f"model must be a shape.GPTConfig or one of {list(MODELS)}, got {type(model).__name__}")
    _check_int("gpus", gpus, "the number of GPUs in the cluster, e.g. 64")
    _check_int("gpus_per_node", gpus_per_node, "e.g. 8 for an HGX node")
    if gpus > gpus_per_node and gpus % gpus_per_node:
        raise ValueError(f"gpus={gpus} is not a whole number of {gpus_per_node}-GPU nodes: give a multiple of "
                         f"{gpus_per_node} (or at most one node)")
    _check_int("seq_len", seq_len, "tokens per sequence, e.g. 8192")
    _check_int("global_batch_tokens", global_batch_tokens, "tokens per optimizer step, e.g. 4_194_304 (4M)")
    if global_batch_tokens % seq_len:
        raise ValueError(f"a batch of {global_batch_tokens:,} tokens does not split into sequences of {seq_len:,}: "
                         f"give a multiple of seq_len (e.g. {max(1, global_batch_tokens // seq_len) * seq_len:,})")
    if cluster_kind not in CLUSTER_KINDS:
        raise ValueError(f"unknown cluster_kind {cluster_kind!r}: give one of {CLUSTER_KINDS}")
    cluster = planner.Cluster(gpus=gpus, gpus_per_node=gpus_per_node, **getattr(planner, cluster_kind))
    return dataclasses.replace(model, block_size=seq_len), global_batch_tokens // seq_len, cluster


def candidates(model: GPTConfig | str, gpus: int, seq_len: int, global_batch_tokens: int,
               cluster_kind: str = "H100", top: int = 6, named: Iterable[Layout | tuple[Layout, planner.Recipe]] = (),
               *, distinct: bool = True, gpus_per_node: int = 8, microbatches: tuple[int, ...] = (1, 2, 4, 8),
               efficiency: Any = None) -> list[planner.Prediction]:
    """The predictions :func:`layout_figure` draws, in its order (best first): the ``top`` fastest
    that fit from ``planner.plan`` (with ``distinct``, only the fastest recipe of each layout), then
    — if fewer than ``top`` fit — those closest to fitting (least memory), then each of ``named``
    (a ``Layout``, run with ``planner.Recipe()``, or a ``(Layout, Recipe)`` pair) that is not
    already shown, predicted whether or not it can run. ``microbatches`` and ``efficiency`` go to
    ``planner.plan`` (None: the planner's default efficiency)."""
    model, batch, cluster = resolve(model, gpus, seq_len, global_batch_tokens, cluster_kind, gpus_per_node)
    _check_int("top", top, "how many of the best layouts to show, e.g. 6")
    extra = {} if efficiency is None else {"efficiency": efficiency}
    ranked = planner.plan(model, batch, cluster, microbatches=microbatches, **extra)
    shown: list[planner.Prediction] = []
    seen: set = set()

    def add(prediction: planner.Prediction) -> None:
        key = prediction.layout if distinct else (prediction.layout, prediction.recipe)
        if key not in seen:
            seen.add(key)
            shown.append(prediction)

    for r in ranked:
        if len(shown) < top and r.reason is None:
            add(r)
    if len(shown) < top:        # nothing more fits: show what comes closest, and why it does not
        near = sorted((r for r in ranked if r.reason is not None and r.memory), key=lambda r: r.memory_gb)
        for r in near:
            if len(shown) < top:
                add(r)
    for item in named:
        lay, how = item if isinstance(item, tuple) else (item, planner.Recipe())
        if not isinstance(lay, Layout) or not isinstance(how, planner.Recipe):
            raise ValueError(f"named takes Layouts or (Layout, Recipe) pairs, got {item!r}")
        prediction = planner.predict(model, lay, how, batch, cluster, **extra)
        if (lay, how) not in {(s.layout, s.recipe) for s in shown}:
            shown.append(prediction)
    return shown


def _order(parts: Iterable[str], known: Sequence[str]) -> list[str]:
    """``known`` parts first (those present), then the others in the order first met."""
    parts = list(dict.fromkeys(parts))
    return [p for p in known if p in parts] + [p for p in parts if p not in known]


def _colours(order: list[str], known: Sequence[str]) -> dict[str, Any]:
    """A fixed colour per known part (tab20's first colours, by position in ``known``); unknown
    parts take the next ones."""
    from matplotlib import colormaps
    palette = colormaps["tab20"].colors
    out, spare = {}, len(known)
    for part in order:
        if part in known:
            out[part] = palette[known.index(part) * 2 % 20]
        else:
            out[part] = palette[(spare * 2 + 1) % 20]
            spare += 1
    return out


def title_of(model: GPTConfig | str, gpus: int, seq_len: int, global_batch_tokens: int,
             cluster_kind: str = "H100") -> str:
    """The figure's title: what was asked (model, GPUs, sequence and batch)."""
    name = model if isinstance(model, str) else next((k for k, v in MODELS.items() if v == model),
                                                     f"{model.params / 1e9:.1f}B GPT")
    return (f"{name} on {gpus:,} × {cluster_kind}: sequences of {seq_len:,} tokens, "
            f"batch {global_batch_tokens:,} tokens ({global_batch_tokens // seq_len:,} sequences)")


def layout_figure(model: GPTConfig | str, gpus: int, seq_len: int, global_batch_tokens: int,
                  cluster_kind: str = "H100", top: int = 6,
                  named: Iterable[Layout | tuple[Layout, planner.Recipe]] = (), *, distinct: bool = True,
                  gpus_per_node: int = 8, microbatches: tuple[int, ...] = (1, 2, 4, 8),
                  efficiency: Any = None, title: str | None = None) -> Figure:
    """The planner's best layouts (:func:`candidates`) as two panels of horizontal stacked bars, one
    row per layout (best on top, labelled by :func:`layout_label`): per-GPU memory by part in GB
    (10⁹ bytes; a dashed line at the GPU's HBM) and step time by part in seconds (MFU written after
    each bar). Layouts that cannot run are faded and hatched, their label (grey) followed by the planner's
    reason; a bar past the memory axis's end is cut there and its total written at the edge.

    ``model`` is a ``shape.GPTConfig`` or a name of :data:`MODELS`; ``seq_len`` replaces its
    ``block_size``; ``global_batch_tokens`` is tokens per step (a multiple of ``seq_len``);
    ``cluster_kind`` one of :data:`CLUSTER_KINDS`. Deterministic: pure arithmetic, no timing."""
    from matplotlib.patches import Patch

    from . import plots

    shown = candidates(model, gpus, seq_len, global_batch_tokens, cluster_kind, top, named, distinct=distinct,
                       gpus_per_node=gpus_per_node, microbatches=microbatches, efficiency=efficiency)
    hbm = getattr(planner, cluster_kind)["hbm_gb"]
    fig, (mem_ax, time_ax) = plots.figure("memory per GPU (GB)", "", ncols=2,
                                          title=title or title_of(model, gpus, seq_len, global_batch_tokens,
                                                                  cluster_kind))
    fig.set_size_inches(13.0, 2.2 + 0.55 * len(shown))
    fig.set_layout_engine("constrained")     # room for the legends outside, below the panels
    rows = list(range(len(shown)))
    labels = [layout_label(r) + ("" if r.reason is None else f"\n✗ {_short(r.reason)}") for r in shown]
    fits = [r.reason is None for r in shown]
    fitting_gb = [r.memory_gb for r in shown if r.reason is None]
    mem_limit = max([1.25 * hbm] + [1.1 * gb for gb in fitting_gb])

    for ax, attr, known, scale in ((mem_ax, "memory", MEMORY_ORDER, 1e9), (time_ax, "time", TIME_ORDER, 1.0)):
        parts = _order((p for r in shown for p, v in getattr(r, attr).items() if v > 0), known)
        colours = _colours(parts, known)
        left = [0.0] * len(shown)
        for part in parts:
            widths = [getattr(r, attr).get(part, 0.0) / scale for r in shown]
            bars = ax.barh(rows, widths, left=left, height=0.7, label=part, color=colours[part],
                           edgecolor="white", linewidth=0.5)
            for bar, ok in zip(bars.patches, fits):
                if not ok:          # cannot run: the same parts, faded and hatched
                    bar.set_alpha(0.35)
                    bar.set_edgecolor("0.4")
                    bar.set_hatch("//")
            left = [a + b for a, b in zip(left, widths)]
        ax.set_yticks(rows, labels)
        for tick, ok in zip(ax.get_yticklabels(), fits):
            tick.set_color("black" if ok else "0.45")
        ax.invert_yaxis()
        if parts:       # explicit handles: a faded first bar must not fade the legend
            handles = [Patch(facecolor=colours[p], label=p) for p in parts]
            fig.legend(handles=handles, loc="outside lower left" if ax is mem_ax else "outside lower right",
                       ncol=min(4, len(parts)), fontsize=8, title=f"{attr} by part", title_fontsize=8)
    mem_ax.axvline(hbm, color="k", linestyle="--", linewidth=1, label="_hbm")
    mem_ax.text(hbm, -0.6, f" HBM {hbm:.0f} GB", va="bottom", fontsize=8)
    mem_ax.set_xlim(0, mem_limit)
    for row, r in zip(rows, shown):
        if r.memory_gb > mem_limit:
            mem_ax.text(mem_limit, row, f"{r.memory_gb:,.0f} GB ▸", ha="right", va="center", fontsize=8)
        if r.time:
            note = f" MFU {r.mfu:.0%}" if r.reason is None else " (cannot run)"
            time_ax.text(r.step_s, row, note, va="center", fontsize=8, color="black" if r.reason is None else "0.45")
    time_ax.set_xlabel("time per step (s)")
    time_ax.set_ylabel("")
    time_ax.tick_params(labelleft=False)
    time_ax.set_xlim(0, 1.2 * max([r.step_s for r in shown if r.time] + [1e-9]))
    return fig


def layout_explorer(model: str = "Llama 3.1 70B", gpus: int = 64, seq_len: int = 8192,
                    global_batch_tokens: int = 2**22, cluster_kind: str = "H100", top: int = 6,
                    **figure_kwargs: Any):
    """:func:`layout_figure` behind controls (ipywidgets): model, GPUs, sequence length, batch in
    tokens, GPU kind and how many layouts; each change redraws the figure in an ``Output`` below.
    Returns the ``VBox``; its ``controls`` dict holds the controls by argument name, ``figure`` the
    Figure last drawn, ``error`` the last ValueError's message (or None). Needs ipywidgets (on Binder
    it is installed); ``figure_kwargs`` go to every :func:`layout_figure` call."""
    try:
        import ipywidgets as widgets
    except ImportError as missing:
        raise ImportError("layout_explorer needs ipywidgets: `pip install ipywidgets` and restart the kernel. "
                          "The static figure above (explorer.layout_figure) shows one setting without it.") from missing
    import matplotlib.pyplot as plt
    from IPython.display import display

    def k(n: int) -> str:
        return f"{n // 1024}k" if n < 2**20 else f"{n / 2**20:g}M"

    style = {"description_width": "initial"}
    controls = {
        "model": widgets.Dropdown(options=list(MODELS), value=model, description="model", style=style),
        "gpus": widgets.Dropdown(options=list(GPU_COUNTS), value=gpus, description="GPUs", style=style),
        "seq_len": widgets.SelectionSlider(options=[(k(n), n) for n in SEQ_LENS], value=seq_len,
                                           description="sequence (tokens)", continuous_update=False, style=style),
        "global_batch_tokens": widgets.SelectionSlider(options=[(k(n), n) for n in BATCH_TOKENS],
                                                       value=global_batch_tokens, description="batch (tokens)",
                                                       continuous_update=False, style=style),
        "cluster_kind": widgets.Dropdown(options=list(CLUSTER_KINDS), value=cluster_kind, description="GPU",
                                         style=style),
        "top": widgets.IntSlider(value=top, min=1, max=12, description="layouts", continuous_update=False,
                                 style=style),
    }
    out = widgets.Output()
    box = widgets.VBox([widgets.HBox(list(controls.values())[:3]), widgets.HBox(list(controls.values())[3:]), out])
    box.controls, box.figure, box.error = controls, None, None

    def redraw(_change: Any = None) -> None:
        settings = {name: control.value for name, control in controls.items()}
        with out:
            out.clear_output(wait=True)
            try:
                fig = layout_figure(**settings, **figure_kwargs)
            except ValueError as bad:        # e.g. a batch too small for the sequence: say so, keep the controls
                box.error = str(bad)
                print(f"cannot draw: {bad}")
                return
            box.figure, box.error = fig, None
            display(fig)
            plt.close(fig)           # shown once, in the Output; not again at the cell's end

    for control in controls.values():
        control.observe(redraw, names="value")
    redraw()
    return box
