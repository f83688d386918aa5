"""The parameters cell works: papermill runs a chapter with an overridden size, top to bottom."""
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]


def test_papermill_overrides_a_parameter(tmp_path):
    out = tmp_path / "02.ipynb"
    subprocess.run([sys.executable, "-m", "papermill", "--no-progress-bar", "--cwd", str(ROOT / "notebooks"),
                    str(ROOT / "notebooks" / "02_data_parallel_from_scratch.ipynb"), str(out),
                    "-y", "WORLD_SIZES: [2]"], check=True, capture_output=True, timeout=300,
                   env={**__import__("os").environ, "COURSE_PROFILE": "cpu"})
    nb = nbformat.read(out, as_version=4)
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert injected and "WORLD_SIZES = [2]" in injected[0].source
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "2 processes vs 1" in printed and "4 processes vs 1" not in printed
