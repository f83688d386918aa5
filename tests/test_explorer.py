"""course_utils.explorer (the planner's best layouts as a figure, and behind ipywidgets controls) and
plots.predicted_vs_published: read back from the Axes, the bars are the planner's predictions in the
stated units, impossible layouts are shown with their reasons, the widget redraws, bad input is
refused with a message saying what to do."""
from __future__ import annotations

import dataclasses
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from course_utils import explorer, planner, plots, shape  # noqa: E402
from course_utils.layout import Layout  # noqa: E402

ARGS = ("Llama 3.1 70B", 64, 8192, 2**22)          # model, GPUs, sequence, batch tokens (512 sequences)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def bars(ax) -> dict[str, list]:
    """{part: [bar widths]} of the stacked horizontal bars of one panel, in the order stacked."""
    return {c.get_label(): [p.get_width() for p in c.patches] for c in ax.containers}


def test_importing_the_explorer_imports_no_matplotlib_widgets_or_framework():
    """Planted wrong variant: ``from . import plots`` at the module's top imports matplotlib."""
    code = ("import sys; import course_utils.explorer; "
            "bad = [m for m in ('matplotlib', 'ipywidgets', 'IPython', 'torch', 'tensorflow') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_bar_is_named_by_its_layout_and_recipe():
    lay = Layout(dp=2, tp=8, pp=4)
    assert explorer.layout_label(planner.Prediction(lay, planner.Recipe(zero=1, recompute="full"))) == \
        "tp8·pp4·dp2 Z1 full b1"
    odd = planner.Recipe(zero=3, microbatch=2, flash=False, sequence_parallel=False)
    assert explorer.layout_label(planner.Prediction(Layout(), odd)) == "dp1 Z3 none b2 no-flash no-SP"


def test_the_bars_are_the_planners_predictions_in_gb_and_seconds():
    """Each part's bars are its bytes / 10⁹ (memory) and seconds (time), stacked in the fixed order.
    Planted wrong variants: memory in GiB (÷ 2³⁰), a part's widths not ``left``-stacked, the
    candidates not the planner's fastest."""
    fig = explorer.layout_figure(*ARGS)
    mem_ax, time_ax = fig.axes[:2]
    shown = explorer.candidates(*ARGS)
    assert len(shown) == 6 and all(r.reason is None for r in shown)
    # the first bar is planner.plan's answer, asked directly
    model = dataclasses.replace(shape.LLAMA_3_1["70B"], block_size=8192)
    best = planner.plan(model, 512, planner.Cluster(gpus=64, **planner.H100))[0]
    assert (shown[0].layout, shown[0].recipe) == (best.layout, best.recipe)
    assert len({r.layout for r in shown}) == 6                          # one recipe per layout
    for ax, attr, scale, order in ((mem_ax, "memory", 1e9, explorer.MEMORY_ORDER),
                                   (time_ax, "time", 1.0, explorer.TIME_ORDER)):
        drawn = bars(ax)
        assert list(drawn) == [p for p in order if any(getattr(r, attr).get(p, 0) > 0 for r in shown)]
        for part, widths in drawn.items():
            assert widths == pytest.approx([getattr(r, attr).get(part, 0.0) / scale for r in shown])
        # stacked: each bar's parts end to end, the last ending at the total
        for row, r in enumerate(shown):
            patches = [c.patches[row] for c in ax.containers]
            for a, b in zip(patches, patches[1:]):
                assert b.get_x() == pytest.approx(a.get_x() + a.get_width())
            total = r.memory_gb if attr == "memory" else r.step_s
            assert patches[-1].get_x() + patches[-1].get_width() == pytest.approx(total)
    labels = [t.get_text() for t in mem_ax.get_yticklabels()]
    assert labels == [explorer.layout_label(r) for r in shown]
    gb = planner.H100["hbm_gb"]                                     # 80 GiB: 85.9 × 10⁹ bytes
    hbm = [line for line in mem_ax.get_lines() if list(line.get_xdata()) == [gb, gb]]
    assert len(hbm) == 1, f"the HBM line at {gb} GB"
    assert "Llama 3.1 70B on 64 × H100" in fig.get_suptitle()


def test_impossible_layouts_are_greyed_and_hatched_with_their_reason():
    """405B on 8 GPUs fits nowhere: the layouts closest to fitting are shown, each with its reason;
    a named layout that cannot even be predicted (tp across nodes) is shown with its reason too."""
    across = Layout(dp=4, tp=16)
    fig = explorer.layout_figure("Llama 3.1 405B", 8, 8192, 2**22, top=3)
    mem_ax, time_ax = fig.axes[:2]
    labels = [t.get_text() for t in mem_ax.get_yticklabels()]
    assert len(labels) == 3 and all("\n✗ needs " in text and "has 86 GB" in text for text in labels)
    assert all(p.get_hatch() == "//" for c in mem_ax.containers + time_ax.containers for p in c.patches)
    # a bar past the axis's end says its total at the edge
    totals = [t.get_text() for t in mem_ax.texts if t.get_text().endswith("GB ▸")]
    assert len(totals) == 3
    fig = explorer.layout_figure(*ARGS, top=2, named=[across, (Layout(dp=8, tp=8), planner.Recipe(zero=3))])
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    model = dataclasses.replace(shape.LLAMA_3_1["70B"], block_size=8192)
    why = planner.predict(model, across, planner.Recipe(), 512, planner.Cluster(gpus=64, **planner.H100)).reason
    assert why and not planner.predict(model, across, planner.Recipe(), 512,
                                       planner.Cluster(gpus=64, **planner.H100)).memory
    assert len(labels) == 4 and labels[2].startswith("tp16·dp4 Z1 none b1\n✗ " + why[:40])
    assert labels[3] == "tp8·dp8 Z3 none b1" or labels[3].startswith("tp8·dp8 Z3 none b1\n✗ ")
    assert all(c.patches[2].get_width() == 0 for c in fig.axes[0].containers)     # no numbers to draw


def test_parts_the_planner_adds_later_are_stacked_after_the_known_ones(monkeypatch):
    """The explorer takes whatever parts predict returns: a new one comes last, with its own colour."""
    plan = planner.plan

    def with_a_new_part(*args, **kwargs):
        out = plan(*args, **kwargs)
        for r in out:
            if r.memory:
                r.memory = {"workspace": 2e9, **r.memory}
        return out

    monkeypatch.setattr(planner, "plan", with_a_new_part)
    fig = explorer.layout_figure(*ARGS, top=2)
    drawn = bars(fig.axes[0])
    assert list(drawn)[-1] == "workspace" and list(drawn)[:3] == ["weights", "gradients", "optimizer"]
    assert drawn["workspace"] == [2.0, 2.0]
    colours = {c.get_label(): c.patches[0].get_facecolor() for c in fig.axes[0].containers}
    assert len(set(colours.values())) == len(colours)


@pytest.mark.parametrize("args, match", [
    (("Llama 3.1 70B", 0, 8192, 2**22), "gpus must be a positive integer"),
    (("Llama 3.1 70B", True, 8192, 2**22), "gpus must be a positive integer"),
    (("Llama 3.1 70B", 12, 8192, 2**22), "whole number of 8-GPU nodes"),
    (("Llama 3.1 70B", 64, 0, 2**22), "seq_len must be a positive integer"),
    (("Llama 3.1 70B", 64, 3000, 2**22), "does not split into sequences of 3,000"),
    (("Llama 4", 64, 8192, 2**22), "unknown model 'Llama 4'"),
])
def test_bad_input_says_what_to_do(args, match):
    with pytest.raises(ValueError, match=match):
        explorer.layout_figure(*args)


def test_bad_cluster_kind_and_top_are_refused():
    with pytest.raises(ValueError, match=r"unknown cluster_kind 'B200': give one of \('H100', 'H200', 'A100'\)"):
        explorer.layout_figure(*ARGS, cluster_kind="B200")
    with pytest.raises(ValueError, match="top must be a positive integer"):
        explorer.layout_figure(*ARGS, top=0)


def test_sequence_length_sets_the_models_block_size():
    """At 128k tokens the same batch is 32 sequences; the activations grow with the sequence."""
    short = explorer.candidates("Llama 3.1 8B", 64, 8192, 2**22)
    long = explorer.candidates("Llama 3.1 8B", 64, 131072, 2**22)
    model = dataclasses.replace(shape.LLAMA_3_1["8B"], block_size=131072)
    best = planner.plan(model, 32, planner.Cluster(gpus=64, **planner.H100))[0]
    assert (long[0].layout, long[0].recipe) == (best.layout, best.recipe)
    assert max(r.layout.cp for r in long) > max(r.layout.cp for r in short)


def test_the_widget_redraws_when_a_control_changes(capsys):
    """Headless (no frontend): setting a control's value redraws the figure with the new setting."""
    box = explorer.layout_explorer(gpus=64)
    assert "on 64 × H100" in box.figure.get_suptitle() and box.error is None
    first = box.figure
    box.controls["gpus"].value = 256
    assert box.figure is not first and "on 256 × H100" in box.figure.get_suptitle()
    shown = explorer.candidates("Llama 3.1 70B", 256, 8192, 2**22)
    assert [t.get_text() for t in box.figure.axes[0].get_yticklabels()][0] == explorer.layout_label(shown[0])
    box.controls["seq_len"].value = 32768
    assert "sequences of 32,768 tokens" in box.figure.get_suptitle()
    box.controls["model"].value = "GPT-3 6.7B"
    assert box.figure.get_suptitle().startswith("GPT-3 6.7B on 256")
    assert set(box.controls) == {"model", "gpus", "seq_len", "global_batch_tokens", "cluster_kind", "top"}
    assert not plt.get_fignums(), "each figure is closed once shown in the Output (no second copy at the cell's end)"


def test_a_setting_the_planner_refuses_is_said_in_the_widget_not_raised(capsys):
    box = explorer.layout_explorer(gpus=64, gpus_per_node=3)       # figure_kwargs go to every redraw
    assert box.figure is None and "whole number of 3-GPU nodes" in box.error
    assert "cannot draw: gpus=64 is not a whole number" in capsys.readouterr().out
    box.controls["gpus"].value = 8          # still 8 > 3 and not a multiple: the message stays, nothing raised
    assert "gpus=8" in box.error


def test_the_widget_without_ipywidgets_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ipywidgets", None)         # import ipywidgets -> ImportError
    with pytest.raises(ImportError, match="pip install ipywidgets"):
        explorer.layout_explorer()


# -- plots.predicted_vs_published -------------------------------------------------------------

ROWS = [("Megatron-LM 2021", "TFLOP/s per GPU", 137.0, 120.0), ("Megatron-LM 2021", "TFLOP/s per GPU", 163.0, 125.0),
        ("Llama 3", "TFLOP/s per GPU", 400.0, 380.0), ("Llama 3", "memory per GPU (GB)", 70.0, 60.0),
        ("torchtitan", "memory per GPU (GB)", 50.0, 58.0), ("torchtitan", "memory per GPU (GB)", 40.0, None)]


def points(ax) -> dict[str, list]:
    return {c.get_gid().removeprefix("points:"): [tuple(xy) for xy in c.get_offsets()]
            for c in ax.collections if (c.get_gid() or "").startswith("points:")}


def test_predicted_vs_published_draws_a_point_per_row_the_line_and_the_band():
    """Planted wrong variants: the band ±1.5 % (or 0.15 absolute), linear axes, one panel for all."""
    fig, axes = plots.predicted_vs_published(ROWS, "planner vs published")
    assert [ax.get_xlabel() for ax in axes] == ["published TFLOP/s per GPU", "published memory per GPU (GB)"]
    assert points(axes[0]) == {"Megatron-LM 2021": [(137, 120), (163, 125)], "Llama 3": [(400, 380)]}
    assert points(axes[1]) == {"Llama 3": [(70, 60)], "torchtitan": [(50, 58)]}    # None: not drawn
    assert "1 not expressible" in axes[1].get_title() and "not expressible" not in axes[0].get_title()
    # median |error| of 120/137, 125/163, 380/400: 12 %
    assert "median |error| 12%" in axes[0].get_title()
    for ax in axes:
        assert ax.get_xscale() == ax.get_yscale() == "log"
        (band,) = [c for c in ax.collections if c.get_gid() == "band"]
        ratios = {round(y / x, 6) for x, y in band.get_paths()[0].vertices}
        assert ratios == {0.85, 1.15}
        (line,) = [line for line in ax.get_lines() if line.get_gid() == "y=x"]
        assert list(line.get_xdata()) == pytest.approx(list(line.get_ydata()))
    # one colour per source, the same in both panels, and one legend naming each source once
    colour = {}
    for ax in axes:
        for c in ax.collections:
            if (c.get_gid() or "").startswith("points:"):
                colour.setdefault(c.get_gid(), tuple(c.get_facecolor()[0]))
                assert colour[c.get_gid()] == tuple(c.get_facecolor()[0])
    assert len(set(colour.values())) == 3
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()][:3] == ["Megatron-LM 2021", "Llama 3", "torchtitan"]


def test_predicted_vs_published_takes_triples_and_dicts():
    fig, axes = plots.predicted_vs_published([("a", 10, 11), ("b", 20, 19)], "t", quantity="memory per GPU (GB)")
    assert len(axes) == 1 and axes[0].get_xlabel() == "published memory per GPU (GB)"
    assert points(axes[0]) == {"a": [(10, 11)], "b": [(20, 19)]}
    rows = [{"source": "a", "published": 10, "predicted": 11, "quantity": "TFLOP/s per GPU"}]
    _, axes = plots.predicted_vs_published(rows, "t", band=0.25)
    (band,) = [c for c in axes[0].collections if c.get_gid() == "band"]
    assert {round(y / x, 6) for x, y in band.get_paths()[0].vertices} == {0.75, 1.25}


@pytest.mark.parametrize("rows, match", [
    ([], "no rows"),
    ([("a", 0, 1)], "needs positive numbers"),
    ([("a", None, 1)], "needs its published number"),
    ([("a", 1)], "a row must be"),
    ([{"source": "a", "published": 1}], r"lacks \['predicted'\]"),
])
def test_predicted_vs_published_refuses_bad_rows(rows, match):
    with pytest.raises(ValueError, match=match):
        plots.predicted_vs_published(rows, "t")
