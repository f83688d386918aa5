"""The course site: Jupyter Book 1 builds from the stored outputs; the chapters in the course's parts;
every chapter page has its figures and no plumbing (no progress bar frozen at 0%, no Colab set-up
code); every exercise page has its questions, without solutions."""
import html
import re
import sys
from pathlib import Path

import nbformat
import pytest
from nboutputs import png_outputs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import build_book  # noqa: E402

CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
EXERCISES = sorted((ROOT / "exercises").glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    index = build_book.main(str(tmp_path_factory.mktemp("book")))
    return index.parent


def text_of(page: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text()))


def test_table_of_contents_lists_the_chapters_in_order(site):
    index = (site / "intro.html").read_text()  # index.html redirects here
    linked = re.findall(r'href="(notebooks/\d\d_[^"#]+)\.html"', index)
    assert list(dict.fromkeys(linked)) == [f"notebooks/{p.stem}" for p in CHAPTERS]
    shown = text_of(site / "intro.html")
    assert all(build_book.title(p).replace("`", "") in shown for p in CHAPTERS)


def test_table_of_contents_has_the_parts_in_order(site):
    shown = text_of(site / "intro.html")
    parts = [*build_book.PARTS, "Exercises"]
    assert len(parts) >= 5   # foundations, the seed's frameworks, scaling one model, operating at scale, ...
    where = [shown.find(caption) for caption in parts]
    assert -1 not in where and where == sorted(where), f"part captions missing or out of order: {where}"
    for caption, numbers in build_book.PARTS.items():   # each part's chapters come after its caption
        first = next(p for p in CHAPTERS if p.name.startswith(numbers[0]))
        assert shown.find(caption) < shown.find(build_book.title(first).replace("`", ""))


def test_toc_refuses_a_chapter_missing_from_the_parts(tmp_path):
    extra = tmp_path / "99_new_chapter.ipynb"
    with pytest.raises(SystemExit, match="must list every chapter once"):
        build_book.toc([*CHAPTERS, extra], EXERCISES)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_page_shows_no_plumbing(site, chapter):
    """Stored progress bars show their first frame ("0%"): the site drops them. The Colab cell is hidden."""
    source = chapter.read_text()
    page = (site / "notebooks" / f"{chapter.stem}.html").read_text()
    assert "google.colab" in source and "google.colab" not in page
    assert not re.search(r"\b0%\|", text_of(site / "notebooks" / f"{chapter.stem}.html"))
    assert "Open in Colab" in page     # the badge stays: it is how a reader runs the chapter


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_page_has_its_figures(site, chapter):
    page = site / "notebooks" / f"{chapter.stem}.html"
    assert page.is_file(), f"no page for {chapter.name}"
    images = re.findall(r'<img [^>]*src="\.\./(_images/[^"]+\.png)"', page.read_text())
    assert len(images) == png_outputs(nbformat.read(chapter, as_version=4))
    assert all((site / image).stat().st_size > 5_000 for image in images)
    assert "Open in Binder" in page.read_text() and "Open in Colab" in page.read_text()


def solution_lines(path: Path) -> list[str]:
    """Distinctive lines of the solutions in an exercise source notebook."""
    lines, inside = [], 0
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "code":  # raw "# BEGIN SOLUTION" cells bracket a question's cells
            continue
        for line in cell.source.splitlines():
            if "# BEGIN SOLUTION" in line:
                inside += 1
            elif "# END SOLUTION" in line:
                inside -= 1
            elif inside or line.rstrip().endswith("# SOLUTION"):
                line = line.replace("# SOLUTION", "").strip()
                if len(line) > 25:
                    lines.append(line)
    return lines


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda p: p.stem)
def test_exercise_page_has_questions_but_no_solutions(site, exercise):
    page = site / "exercises" / f"{exercise.stem}.html"
    text = text_of(page)
    assert 'grader.check("q1")' in text
    solutions = solution_lines(exercise)
    assert solutions, "the source should have solutions to hide"
    shown = [line for line in solutions if line in text]
    assert not shown, f"solution lines on the student page: {shown}"
