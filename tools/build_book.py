"""Build the course site with Jupyter Book 1 from the stored outputs (nothing is re-executed).

    .venv/bin/python tools/build_book.py [OUT]        (what `make book` runs; OUT defaults to build/)

Stages OUT/book-src/: book/_config.yml and book/intro.md, every chapter as notebooks/NN_name.ipynb,
and the student version of every exercise (solutions removed by `otter assign --no-run-tests`) as
exercises/NN_name.ipynb, so the chapters' ../exercises/ links keep working. Writes the table of
contents in the course's parts (:data:`PARTS`), then runs `jupyter-book build`; the site is
OUT/book/_build/html/.

The staged chapters differ from the stored ones in two ways, both plumbing a reader of the site
should not meet: the Colab set-up cell is tagged ``remove-cell`` (it still runs on Colab), and what is
left of a live progress bar is dropped: the empty display it cleared when it finished (the finished
bar itself is printed below it and stays), or, in a notebook stored before course_utils.progress
printed finished bars, the widget's first frame, "0%", which on a static page reads like a hang.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_exercises import build as build_exercise  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
JUPYTER_BOOK = Path(sys.executable).with_name("jupyter-book")
# The table of contents: the chapters (by number) of each part of the course
PARTS = {
    "Foundations": ["00", "01", "02", "03", "04"],
    "The frameworks of the seed": ["05", "06", "07", "08"],
    "Scaling one model over many devices": ["09", "10"],
    "Operating at scale": ["11", "12"],
    "Transformers: what they cost, and how to split them": ["13", "14", "15", "16"],
}
WIDGET = "application/vnd.jupyter.widget-view+json"
PROGRESS = re.compile(r"\d+%\|")      # tqdm's text form: "label:   0%|          | 0/3 [00:00<?, ?it/s]"


def title(path: Path) -> str:
    """The notebook's first heading, e.g. '00 · Setup and hardware: ...'."""
    first = nbformat.read(path, as_version=4).cells[0].source
    for line in first.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    raise SystemExit(f"{path} does not start with a '# NN · Title' heading")


def is_progress_bar(output: dict) -> bool:
    """A live bar's leftovers: the empty display it cleared on finishing, or an old widget's first frame."""
    data = output.get("data", {})
    if output.get("output_type") == "display_data" and not any(str(v).strip() for v in data.values()):
        return True
    return WIDGET in data and bool(PROGRESS.search(data.get("text/plain", "")))


def for_the_site(chapter: Path, dest: Path) -> None:
    """Copy ``chapter`` to ``dest`` without its progress bars, its Colab cell hidden."""
    nb = nbformat.read(chapter, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if "google.colab" in cell.source:
            cell.metadata["tags"] = [*cell.metadata.get("tags", []), "remove-cell"]
        cell.outputs = [o for o in cell.outputs if not is_progress_bar(o)]
    nbformat.write(nb, dest)


def toc(chapters: list[Path], exercises: list[Path]) -> str:
    """_toc.yml: the chapters in their parts, then the exercises."""
    by_number = {p.name[:2]: p for p in chapters}
    placed = [n for numbers in PARTS.values() for n in numbers]
    if sorted(placed) != sorted(by_number):
        raise SystemExit(f"tools/build_book.py PARTS must list every chapter once: it lists {placed}, "
                         f"the chapters are {sorted(by_number)}")
    lines = ["# written by tools/build_book.py", "format: jb-book", "root: intro", "parts:"]
    for caption, numbers in PARTS.items():
        lines += [f"- caption: {json.dumps(caption)}", "  chapters:"]   # quoted: a caption may hold ": "
        lines += [f"  - file: notebooks/{by_number[n].stem}" for n in numbers]
    lines += ["- caption: Exercises", "  chapters:"] + [f"  - file: exercises/{p.stem}" for p in exercises]
    return "\n".join(lines) + "\n"


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
        for_the_site(chapter, src / "notebooks" / chapter.name)
    exercises = sorted((ROOT / "exercises").glob("[0-9][0-9]_*.ipynb"))
    for exercise in exercises:
        built = build_exercise(exercise, out / "exercises", run_tests=False)
        shutil.copy(built / "student" / exercise.name, src / "exercises" / exercise.name)
    (src / "_toc.yml").write_text(toc(chapters, exercises))
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
