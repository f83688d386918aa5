"""Progress bars: labelled, advancing as processes finish, silent when not asked for; stored finished."""
import subprocess
import sys
from pathlib import Path

import pytest
import workers

from course_utils import launch, progress, subprocesses
from course_utils.placement import cpu_plan  # the workers here use CPU tensors

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
WIDGET = "application/vnd.jupyter.widget-view+json"


def test_bar_needs_a_label():
    with pytest.raises(ValueError, match="desc"):
        progress.bar(range(3), desc="")


def test_bar_counts_a_loop(capsys):
    assert list(progress.bar(range(5), desc="sizes")) == list(range(5))
    err = capsys.readouterr().err  # outside Jupyter: tqdm's text bar on stderr
    assert "sizes: 100%" in err and "5/5" in err


def test_run_commands_shows_finished_commands(capsys):
    subprocesses.run_commands([["true"], ["sleep", "0.6"]], progress="two commands")
    err = capsys.readouterr().err
    assert "two commands" in err and "2/2" in err


def test_launch_run_shows_finished_ranks(capsys):
    out = launch.run(workers.rank_and_sum, 2, plan=cpu_plan(2), output="none", progress="ranks")
    assert [r["rank"] for r in out] == [0, 1]
    err = capsys.readouterr().err
    assert "ranks: 100%" in err and "2/2" in err


def test_no_label_no_bar(capsys):
    subprocesses.run_commands([["true"]])
    assert capsys.readouterr().err == ""


def test_run_command_with_a_label_shows_a_bar_and_still_checks(capsys):
    assert subprocesses.run_command(["echo", "hi"], progress="one command").stdout == "hi\n"
    assert "one command" in capsys.readouterr().err
    with pytest.raises(subprocesses.CommandError):
        subprocesses.run_command(["false"], progress="fails")


# What a notebook stores: the finished bar, as text, the same on every machine (issue 38)

def test_finished_text_has_no_timings():
    assert progress.finished_text("world sizes", 3, 3) == "world sizes: 100%|██████████| 3/3"
    assert progress.finished_text("sizes", 3, 4) == "sizes:  75%|███████▌  | 3/4"
    assert progress.finished_text("lines", 5, None) == "lines: 5"


def test_outside_a_kernel_the_bar_is_on_stderr_not_a_display(capsys):
    assert not progress.in_kernel()
    list(progress.bar(range(2), desc="plain"))
    out, err = capsys.readouterr()
    assert out == "" and "plain: 100%" in err


BAR_CELLS = [
    "from course_utils import progress, subprocesses\nprint('before')\n"
    "for _ in progress.bar(range(3), desc='a loop'):\n    pass\nprint('after')",
    "with progress.Waiting(2, 'ranks', unit='rank') as waiting:\n"
    "    waiting.done(1)\n    waiting.tick()\n    waiting.done(2)",
    "done = subprocesses.run_commands([['sleep', '0.6'], ['true']], progress='two commands')",
    "for i in progress.bar(range(4), desc='stopped early'):\n    if i == 1:\n        break",
]


def _executed_bar_notebook(tmp_path, monkeypatch):
    """A notebook of progress bars, executed as tools/run_notebooks.py executes the chapters."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook
    from run_notebooks import execute

    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    nb = new_notebook(cells=[new_code_cell(source) for source in BAR_CELLS],
                      metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    path = tmp_path / "bars.ipynb"
    nbformat.write(nb, path)
    execute(path, timeout_s=120)
    return path, nbformat.read(path, as_version=4)


def _texts(cell) -> str:
    return "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in cell.outputs)


def test_a_stored_notebook_shows_finished_bars_without_timings(tmp_path, monkeypatch):
    _, nb = _executed_bar_notebook(tmp_path, monkeypatch)
    texts = [_texts(cell) for cell in nb.cells]
    assert texts[0] == "before\na loop: 100%|██████████| 3/3\nafter\n", texts[0]
    assert texts[1] == "ranks: 100%|██████████| 2/2\n", texts[1]
    assert texts[2] == "two commands: 100%|██████████| 2/2\n", texts[2]
    assert texts[3] == "stopped early:  25%|██▌       | 1/4\n", texts[3]
    assert not any(WIDGET in o.get("data", {}) for cell in nb.cells for o in cell.outputs)


def test_strict_nbval_accepts_the_stored_bars(tmp_path, monkeypatch):
    """nbval compares a display as it first appeared (it ignores updates): the stored form must match that."""
    path, _ = _executed_bar_notebook(tmp_path, monkeypatch)
    run = subprocess.run([sys.executable, "-m", "pytest", "--nbval", "--nbval-current-env", "-p", "no:cacheprovider",
                          "-q", path.name], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
