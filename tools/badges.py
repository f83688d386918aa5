"""Stamp every chapter with its Binder and Colab badges and the Colab setup cell.

    .venv/bin/python tools/badges.py     # rewrite notebooks/NN_*.ipynb in place (idempotent)

tests/test_notebook_anatomy.py checks every chapter carries exactly what this script writes.

The repository address comes from pyproject.toml ([project.urls] Repository); after moving the
repository, change it there and re-run this script. Each badge opens the notebook it sits in:
Binder (mybinder.org builds binder/: CPU-only, 1-2 GB) in JupyterLab, Colab from GitHub's copy.

Colab has PyTorch, TensorFlow, Keras and JAX already, but not this repository: the setup cell
(second cell of every chapter, written by tools/colab_setup_cell.py) clones it, puts course_utils on
the path of the kernel and of the processes it starts, changes into notebooks/ and installs the few
pinned packages a chapter needs that Colab lacks. Anywhere else it does
nothing and prints nothing, so the stored outputs and the tests are unaffected.
"""
from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path
from urllib.parse import quote

import nbformat

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
BADGE_LINE = re.compile(r"^\[!\[Open in Binder\].*\n?", re.M)
COLAB_MARK = "# Colab only:"
# the set-up cell's text, and which chapters install what on Colab, live in tools/colab_setup_cell.py
_spec = importlib.util.spec_from_file_location("colab_setup_cell", Path(__file__).with_name("colab_setup_cell.py"))
colab_setup_cell = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(colab_setup_cell)


repository = colab_setup_cell.repository   # owner/name, from pyproject.toml


def badges(path: Path, repo: str) -> str:
    """One markdown line: the Binder and Colab badges for the notebook at ``path``."""
    rel = path.relative_to(ROOT).as_posix()
    binder = f"https://mybinder.org/v2/gh/{repo}/HEAD?labpath={quote(rel, safe='')}"
    colab = f"https://colab.research.google.com/github/{repo}/blob/main/{rel}"
    return (f"[![Open in Binder](https://mybinder.org/badge_logo.svg)]({binder}) "
            f"[![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab})\n")


def pins() -> dict[str, str]:
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    return dict(line.split("==") for line in lines if "==" in line and not line.startswith("#"))


def colab_cell(path: Path, repo: str) -> str:
    """Source of the chapter's Colab setup cell (:func:`colab_setup_cell.colab_cell`)."""
    return colab_setup_cell.colab_cell(path.name[:2], repo, pins())


def stamp(path: Path, repo: str) -> bool:
    """Put badges under the title and the setup cell second; return True if the file changed."""
    nb = nbformat.read(path, as_version=4)
    before = nbformat.writes(nb)
    title = nb.cells[0]
    head, _, rest = BADGE_LINE.sub("", title.source).partition("\n")
    title.source = f"{head}\n\n{badges(path, repo)}\n{rest.lstrip(chr(10))}"
    source = colab_cell(path, repo)
    if nb.cells[1].cell_type == "code" and nb.cells[1].source.startswith(COLAB_MARK):
        if nb.cells[1].source != source:
            nb.cells[1].source, nb.cells[1].execution_count, nb.cells[1].outputs = source, None, []
    else:
        nb.cells.insert(1, nbformat.v4.new_code_cell(source))
    if nbformat.writes(nb) == before:
        return False
    nbformat.write(nb, path)
    return True


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    changed = [p.name for p in CHAPTERS if stamp(p, repository())]
    print("stamped:", ", ".join(changed) or "nothing to change")
