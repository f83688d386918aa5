"""The Colab set-up cell (cell 1 of every chapter), and a script that writes it into every chapter.

    .venv/bin/python tools/colab_setup_cell.py     # rewrite cell 1 of notebooks/NN_*.ipynb (idempotent)

On Colab the cell clones the repository to /content/course, installs what Colab lacks for the
chapter (pinned as in requirements.txt), puts the course on the kernel's ``sys.path`` *and* on
``PYTHONPATH``, so that the processes a chapter starts (launch.run's ranks and their children,
torchrun scripts, TensorFlow cluster tasks, ``!python work/x.py``) import the same course_utils,
and changes into notebooks/. Anywhere else it does nothing and prints nothing.

Only cell 1's source changes: its id, metadata, execution count and (empty) outputs are kept, since
outside Colab the old and the new cell alike do nothing, so no chapter needs re-executing for it
(CI's nbval still runs the new cell and compares its outputs: none).
tools/badges.py writes the same text (its ``colab_cell`` calls :func:`colab_cell`), and
tests/test_notebook_anatomy.py checks that every chapter carries it.
tools/colab_reproduction.sh runs chapters through this cell in a Colab-like environment.
"""
from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
COLAB_MARK = "# Colab only:"
HOME = "/content/course"
# packages a chapter needs that Colab lacks, or has at a version the chapter cannot use (names as in
# requirements.txt, installed at its pins). Colab's own list: github.com/googlecolab/backend-info,
# pip-freeze.txt (it has torchao 0.10.0; chapter 04's float8 training needs requirements.txt's).
COLAB_EXTRAS = {"04": ["torchao"], "08": ["onnx", "onnxruntime", "onnxscript"]}
# chapters that cannot run on Colab, and why (their setup cell says so and stops)
COLAB_UNSUPPORTED = {
    "07": "Chapter 07 needs MXNet 1.9.1 with NumPy < 1.24, which Colab's Python cannot install. "
          "Open it with the Binder badge or run `make lab`.",
}


def repository() -> str:
    """``owner/name`` of the GitHub repository, from pyproject.toml ([project.urls] Repository)."""
    url = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
    match = re.fullmatch(r"https://github\.com/([\w.-]+/[\w.-]+?)/?", url)
    if not match:
        raise SystemExit(f"pyproject.toml Repository must be https://github.com/OWNER/NAME, not {url!r}")
    return match.group(1)


def pins() -> dict[str, str]:
    """``{package: version}`` of every exact pin in requirements.txt."""
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    return dict(line.split("==") for line in lines if "==" in line and not line.startswith("#"))


def colab_cell(number: str, repo: str, pinned: dict[str, str]) -> str:
    """Source of chapter ``number``'s ("00".."16") Colab set-up cell for GitHub repository ``repo``."""
    if number in COLAB_UNSUPPORTED:
        return (f"{COLAB_MARK} this chapter does not run there.\n# Elsewhere this cell does nothing.\n"
                "import sys\n\n"
                'if "google.colab" in sys.modules:\n'
                f"    raise RuntimeError(\n        {COLAB_UNSUPPORTED[number]!r})")
    extras = ", ".join(f'"{name}=={pinned[name]}"' for name in COLAB_EXTRAS.get(number, []))
    install = (f'        subprocess.run([sys.executable, "-m", "pip", "install", "-q", {extras}], check=True)\n'
               if extras else "")
    return (f"{COLAB_MARK} fetch the course (course_utils, worker files) and what Colab lacks.\n"
            "# Elsewhere this cell does nothing.\n"
            "import sys\n\n"
            'if "google.colab" in sys.modules:\n'
            "    import os\n"
            "    import subprocess\n"
            f'    REPO, HOME = "https://github.com/{repo}", "{HOME}"\n'
            "    if not os.path.isdir(HOME):\n"
            '        subprocess.run(["git", "clone", "-q", "--depth=1", REPO, HOME], check=True)\n'
            f"{install}"
            "    sys.path.insert(0, HOME)\n"
            "    # and for the processes the chapter starts (ranks, torchrun scripts, TensorFlow tasks):\n"
            '    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [HOME, os.environ.get("PYTHONPATH")]))\n'
            '    os.chdir(f"{HOME}/notebooks")')


def rewrite(path: Path, source: str) -> bool:
    """Make ``source`` cell 1 of the notebook at ``path`` (keeping its id and metadata); True if it changed."""
    nb = nbformat.read(path, as_version=4)
    cell = nb.cells[1]
    if cell.cell_type != "code" or not cell.source.startswith(COLAB_MARK):
        raise SystemExit(f"{path.name}: cell 1 is not the Colab set-up cell; run tools/badges.py first")
    if cell.outputs:
        raise SystemExit(f"{path.name}: the Colab set-up cell has outputs; outside Colab it must print nothing")
    if cell.source == source:
        return False
    cell.source = source   # its execution count stays: here it ran, and runs, as a no-op (nbval re-checks it)
    nbformat.write(nb, path)
    return True


def main(paths: list[Path]) -> list[str]:
    """Rewrite cell 1 of each chapter in ``paths``; return the names of those that changed."""
    repo, pinned = repository(), pins()
    return [p.name for p in paths if rewrite(p, colab_cell(p.name[:2], repo, pinned))]


if __name__ == "__main__":
    paths = [Path(a).resolve() for a in sys.argv[1:]] or CHAPTERS
    print("rewrote cell 1 of:", ", ".join(main(paths)) or "nothing to change")
