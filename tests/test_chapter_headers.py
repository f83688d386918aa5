"""Each chapter's header states its runtime as README's resource table measured it (issue 38).

``tools/run_notebooks.py --readme`` writes both from one measurement; ``--headers`` rewrites the
headers from the table alone.
"""
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import run_notebooks  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
TIMES, CORES = run_notebooks.readme_runtimes()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_header_runtime_agrees_with_readme(path):
    stated = run_notebooks.stated_runtime(nbformat.read(path, as_version=4).cells[0].source)
    assert stated is not None, "the header must state 'about N s on a N-core CPU'"
    assert path.name in TIMES, "README's resource table has no row for this chapter"
    measured = (run_notebooks.runtime_phrase(TIMES[path.name]), CORES)
    assert stated == measured, (f"header says {stated[0]} on {stated[1]} cores; README measured "
                                f"{TIMES[path.name]:.0f} s on {CORES} vCPUs: {measured[0]}. "
                                "Run tools/run_notebooks.py --headers")


def test_runtime_phrase_rounds_to_5_s_then_to_the_minute():   # below two minutes: 5 s
    phrase = run_notebooks.runtime_phrase
    assert [phrase(s) for s in (1, 6, 13, 24, 37, 45, 57)] == [
        "about 5 s", "about 5 s", "about 15 s", "about 25 s", "about 35 s", "about 45 s", "about 55 s"]
    assert [phrase(s) for s in (58, 60, 87, 91, 108, 118, 150, 200)] == [
        "about 60 s", "about 60 s", "about 85 s", "about 90 s", "about 110 s", "about 2 min", "about 2 min",
        "about 3 min"]


def test_with_runtime_keeps_the_rest_of_the_header():
    header = "# 07 · MXNet\n\n*Runs on:* CPU ✓ · about 20 s on a 2-core\nCPU (the seed's).\n"
    new = run_notebooks.with_runtime(header, 130, 4)
    assert new == "# 07 · MXNet\n\n*Runs on:* CPU ✓ · about 2 min on a 4-core\nCPU (the seed's).\n"
    assert run_notebooks.stated_runtime(new) == ("about 2 min", 4)
    with pytest.raises(SystemExit, match="no 'about N s"):
        run_notebooks.with_runtime("# 99 · no runtime here", 10, 2)


def test_headers_mode_rewrites_from_the_table_and_runs_nothing(tmp_path):
    chapter = tmp_path / "06_keras_multi_device.ipynb"
    shutil.copy(ROOT / "notebooks" / chapter.name, chapter)
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "run_notebooks.py"), "--headers", str(chapter)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    header = nbformat.read(chapter, as_version=4).cells[0].source
    assert run_notebooks.stated_runtime(header) == (run_notebooks.runtime_phrase(TIMES[chapter.name]), CORES)
    before = nbformat.read(ROOT / "notebooks" / chapter.name, as_version=4)
    after = nbformat.read(chapter, as_version=4)
    assert [c.source for c in after.cells[1:]] == [c.source for c in before.cells[1:]]
    assert [c.get("id") for c in after.cells] == [c.get("id") for c in before.cells]
