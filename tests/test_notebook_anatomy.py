"""Every chapter follows the notebook anatomy of COURSE_DESIGN.md, and is stored executed."""
import re
from pathlib import Path

import nbformat
import pytest
from nboutputs import png_outputs

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def tags(cell):
    return cell.metadata.get("tags", [])


def test_there_are_chapters():
    assert [p.name[:2] for p in CHAPTERS][:3] == ["00", "01", "02"]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_anatomy(path):
    nb = nbformat.read(path, as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith(f"# {path.name[:2]} ·")
    assert "**Question.**" in nb.cells[0].source and "Runs on:" in nb.cells[0].source
    params = [c for c in nb.cells if "parameters" in tags(c)]
    assert len(params) == 1 and "placement.plan(" in params[0].source   # one decision: device, backend, sizes
    assert "print(PLAN)" in params[0].source                              # ... said in one line
    for heading in ("## What the seed", "## Summary", "## Exercises"):  # "seed says" or "seeds say"
        assert heading in text, heading
    links = re.findall(r"\(\.\./(exercises/[^)]+\.ipynb)\)", text)
    assert links and all((ROOT / link).is_file() for link in links)


MAX_CELL_LINES = 60   # COURSE_DESIGN: a reader sees one idea per cell; a worker module comes in pieces


def long_code_cells(nb) -> list[tuple[int, int]]:
    """(index, lines) of every code cell longer than MAX_CELL_LINES."""
    return [(i, len(c.source.splitlines())) for i, c in enumerate(nb.cells)
            if c.cell_type == "code" and len(c.source.splitlines()) > MAX_CELL_LINES]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_no_code_cell_is_longer_than_60_lines(path):
    long = long_code_cells(nbformat.read(path, as_version=4))
    assert not long, (f"code cells over {MAX_CELL_LINES} lines (cell index, lines): {long}; split a worker module "
                      "into %%writefile parts joined by one cell (re-running any cell stays safe), or into modules "
                      "shown where each is taught")


def test_the_cell_length_check_finds_a_long_cell():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1\n" * 61),
                                         nbformat.v4.new_code_cell("x = 1\n" * 60)])
    assert long_code_cells(nb) == [(0, 61)]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_ignored_outputs_are_paired_with_asserts_and_everything_is_executed(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), "run tools/run_notebooks.py"
    for i, cell in enumerate(code):
        if "nbval-ignore-output" in tags(cell):
            nearby = code[max(0, i - 2): i + 3]
            assert any("assert " in c.source for c in nearby), f"ignored cell {i} has no assert near it"
        # papermill stops at any stored error, even in a raises-exception cell: show a seed's
        # failure with course_utils.failures.expect_error instead
        assert not any(out.output_type == "error" for out in cell.outputs), f"cell {i} stores an error"
        assert "raises-exception" not in tags(cell), f"cell {i}: use expect_error, not raises-exception"


def _badges_tool():
    import importlib.util
    spec = importlib.util.spec_from_file_location("badges", ROOT / "tools" / "badges.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_binder_and_colab_badges_open_this_chapter(path):
    """Badges under the title point at this very notebook; the Colab setup cell is the second cell
    and prints nothing here. Rewrite both with tools/badges.py."""
    badges = _badges_tool()
    repo = badges.repository()
    nb = nbformat.read(path, as_version=4)
    title = nb.cells[0].source
    assert badges.badges(path, repo) in title, "run tools/badges.py"
    rel = f"notebooks/{path.name}"
    assert f"labpath=notebooks%2F{path.name})" in title and f"/blob/main/{rel})" in title
    setup = nb.cells[1]
    assert setup.cell_type == "code" and setup.source == badges.colab_cell(path, repo), "run tools/badges.py"
    assert setup.outputs == [], "the Colab cell must do nothing outside Colab"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_figures_use_the_course_style(path):
    """Every figure comes from course_utils.plots.figure (the style; x and y labels are required
    arguments, with units), never from plt.subplots or plt.figure directly."""
    nb = nbformat.read(path, as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert not re.search(r"plt\.(subplots|figure)\(", code), "make figures with plots.figure(xlabel, ylabel)"
    if png_outputs(nb):
        assert "plots.figure(" in code
