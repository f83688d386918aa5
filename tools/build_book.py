"""Build the course site with Jupyter Book 1 from the stored outputs (nothing is re-executed).

    .venv/bin/python tools/build_book.py [OUT]        (what `make book` runs; OUT defaults to build/)

Stages OUT/book-src/: book/_config.yml and book/intro.md, every chapter as notebooks/NN_name.ipynb,
and the student version of every exercise (solutions removed by `otter assign --no-run-tests`) as
exercises/NN_name.ipynb, so the chapters' ../exercises/ links keep working. Writes the table of
contents in chapter order, then runs `jupyter-book build`; the site is OUT/book/_build/html/.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_exercises import build as build_exercise  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
JUPYTER_BOOK = Path(sys.executable).with_name("jupyter-book")


def title(path: Path) -> str:
    """The notebook's first heading, e.g. '00 · Setup and hardware: ...'."""
    first = nbformat.read(path, as_version=4).cells[0].source
    for line in first.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    raise SystemExit(f"{path} does not start with a '# NN · Title' heading")


def stage(out: Path) -> Path:
    """Copy config, chapters and student exercises into ``out/book-src``; return that folder."""
    src = out / "book-src"
    shutil.rmtree(src, ignore_errors=True)
    (src / "notebooks").mkdir(parents=True)
    (src / "exercises").mkdir()
    for name in ("_config.yml", "intro.md"):
        shutil.copy(ROOT / "book" / name, src / name)
    chapters = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    for chapter in chapters:
        shutil.copy(chapter, src / "notebooks" / chapter.name)
    exercises = sorted((ROOT / "exercises").glob("[0-9][0-9]_*.ipynb"))
    for exercise in exercises:
        built = build_exercise(exercise, out / "exercises", run_tests=False)
        shutil.copy(built / "student" / exercise.name, src / "exercises" / exercise.name)
    toc = ["# written by tools/build_book.py", "format: jb-book", "root: intro", "parts:",
           "- caption: Chapters", "  chapters:"]
    toc += [f"  - file: notebooks/{p.stem}" for p in chapters]
    toc += ["- caption: Exercises", "  chapters:"]
    toc += [f"  - file: exercises/{p.stem}" for p in exercises]
    (src / "_toc.yml").write_text("\n".join(toc) + "\n")
    return src


def main(out: str = "build") -> Path:
    out_dir = (ROOT / out).resolve() if not Path(out).is_absolute() else Path(out)
    src = stage(out_dir)
    html = out_dir / "book"
    shutil.rmtree(html, ignore_errors=True)
    proc = subprocess.run([str(JUPYTER_BOOK), "build", str(src), "--path-output", str(html), "--builder", "html"],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"jupyter-book build failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    warnings = [line for line in proc.stdout.splitlines() + proc.stderr.splitlines() if "WARNING" in line]
    for line in warnings:
        print(line)
    index = html / "_build" / "html" / "index.html"
    print(f"site: {index} ({len(warnings)} warnings)")
    return index


if __name__ == "__main__":
    main(*sys.argv[1:])
