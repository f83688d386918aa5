"""Every chapter follows the notebook anatomy of COURSE_DESIGN.md, and is stored executed."""
import re
from pathlib import Path

import nbformat
import pytest

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
    assert len(params) == 1 and "course_utils.profile()" in params[0].source
    for heading in ("## What the seed", "## Summary", "## Exercises"):  # "seed says" or "seeds say"
        assert heading in text, heading
    links = re.findall(r"\(\.\./(exercises/[^)]+\.ipynb)\)", text)
    assert links and all((ROOT / link).is_file() for link in links)


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
        # failure with course_utils.seedcode.expect_error instead
        assert not any(out.output_type == "error" for out in cell.outputs), f"cell {i} stores an error"
        assert "raises-exception" not in tags(cell), f"cell {i}: use expect_error, not raises-exception"
