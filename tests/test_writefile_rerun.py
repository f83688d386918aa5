"""Re-running a notebook's ``%%writefile`` cells writes the same files (issue 38).

A reader re-runs cells: the whole chapter again, or one cell twice. A script built with
``%%writefile -a`` grows a second copy of its appended part each time; ``python work/x.py`` then runs
it twice, or defines a function twice. Here each chapter's ``%%writefile`` cells are run with
IPython's own magic (an ``InteractiveShell`` in a subprocess, in a fresh folder like the notebook's,
nothing else of the chapter run) once in order; then all of them twice; then once each with one cell
run twice in a row. Every written file must be byte-identical to the single pass.
"""
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

RUNNER = r'''
import json, os, sys
from pathlib import Path
from IPython.core.interactiveshell import InteractiveShell

numbered, top = json.loads(sys.stdin.read()), Path(sys.argv[1])
cells = [source for _, source in numbered]
shell = InteractiveShell.instance()
runs = {"once": [cells], "all twice": [cells, cells]}
runs.update({f"cell {n} twice": [cells[:i + 1] + cells[i:]] for i, (n, _) in enumerate(numbered)})
written = {}
for name, passes in runs.items():
    folder = top / str(len(written))
    folder.mkdir()
    os.chdir(folder)
    for source in (s for p in passes for s in p):
        target = source.splitlines()[0].split()[-1]
        Path(target).parent.mkdir(parents=True, exist_ok=True)   # the chapter's own cells make work/
        shell.run_cell(source, store_history=False, silent=True).raise_error()
    written[name] = {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}
print(json.dumps(written))
'''


def writefile_cells(nb) -> list[tuple[int, str]]:
    """(cell number, source) of the code cells that are a ``%%writefile`` cell magic, in order."""
    return [(i, cell.source) for i, cell in enumerate(nb.cells)
            if cell.cell_type == "code" and cell.source.startswith("%%writefile")]


def rerun_differences(nb, tmp_path: Path) -> list[str]:
    """How the files differ when cells are re-run, compared with one pass: one line per difference."""
    cells = writefile_cells(nb)
    if not cells:
        return []
    run = subprocess.run([sys.executable, "-c", RUNNER, str(tmp_path)], input=json.dumps(cells),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    written = json.loads(run.stdout.splitlines()[-1])
    once = written.pop("once")
    assert once, "the %%writefile cells wrote nothing"
    found = []
    for how, files in written.items():
        for path in sorted(set(once) | set(files)):
            if files.get(path) != once.get(path):
                grew = len(files.get(path, "")) - len(once.get(path, ""))
                found.append(f"{how}: {path} differs from one pass ({grew:+d} characters)")
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_rerunning_writefile_cells_writes_the_same_files(path, tmp_path):
    found = rerun_differences(nbformat.read(path, as_version=4), tmp_path)
    assert not found, ("re-running cells changes the scripts they write (%%writefile -a appends again); "
                       "write each file from one cell:\n" + "\n".join(found))


def test_a_planted_append_is_found(tmp_path):
    nb = new_notebook(cells=[new_code_cell("%%writefile work/x.py\nA = 1\n"), new_code_cell("print('not written')"),
                             new_code_cell("%%writefile -a work/x.py\nB = 2\n")])
    found = rerun_differences(nb, tmp_path)
    assert found == ["cell 2 twice: work/x.py differs from one pass (+6 characters)"], found
    # the whole chapter twice is safe here (the first cell starts the file again); one cell twice is not


def test_files_written_once_each_pass(tmp_path):
    nb = new_notebook(cells=[new_code_cell("%%writefile work/x.py\nA = 1\n"),
                             new_code_cell("%%writefile work/sub/y.py\nB = 2\n")])
    assert rerun_differences(nb, tmp_path) == []
