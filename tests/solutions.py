"""The model answers of the exercise notebooks, read from the notebooks themselves (no copies in tests).

An exercise notebook (``exercises/NN_name.ipynb``, otter-grader's assign format) marks each
question's solution cell with raw cells ``# BEGIN SOLUTION`` / ``# END SOLUTION`` around it, and the
lines students replace with ``# BEGIN SOLUTION`` / ``# END SOLUTION`` comments inside it;
``tools/mutants.py``'s :func:`read` parses that. A solution cell is either a ``%%writefile`` cell (a
worker file the check runs on ranks: :func:`solution_file`) or plain function definitions
(:func:`solution_function`).
"""
from __future__ import annotations

import ast
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import mutants  # noqa: E402

MARKERS = ("# BEGIN SOLUTION", "# END SOLUTION")


@functools.cache
def _exercise(chapter: str) -> mutants.Exercise:
    return mutants.read(mutants.exercise_path(chapter))


def solution(chapter: str, question: str) -> str:
    """The source of ``question``'s solution cell in ``exercises/NN_*.ipynb`` (``chapter`` = ``"NN"``),
    without its ``%%writefile`` line and solution markers: the code of the file or of the functions."""
    exercise = _exercise(chapter)
    if question not in exercise.questions:
        raise ValueError(f"{exercise.path.name} has no question {question!r}; it has {sorted(exercise.questions)}")
    lines = exercise.questions[question].solution.splitlines(keepends=True)
    if lines and lines[0].startswith("%%writefile"):
        lines = lines[1:]
    return "".join(line for line in lines if line.strip() not in MARKERS)


def solution_file(folder: str | os.PathLike, chapter: str, question: str) -> str:
    """Write ``question``'s ``%%writefile`` solution into ``folder``, under the file name the cell
    gives, as the notebook's cell would; return its path."""
    cell = _exercise(chapter).questions[question].solution
    first = cell.splitlines()[0] if cell else ""
    if not first.startswith("%%writefile "):
        raise ValueError(f"chapter {chapter} {question}'s solution is not a %%writefile cell (it starts {first!r})")
    path = Path(folder) / Path(first.split(maxsplit=1)[1]).name
    path.write_text(solution(chapter, question))
    return str(path)


def solution_function(chapter: str, question: str, name: str) -> Callable:
    """The function ``name`` defined in ``question``'s solution cell, with the notebook's imports in scope
    (the import statements of the cells before the question; nothing else of theirs runs)."""
    exercise = _exercise(chapter)
    namespace: dict = {}
    for cell in exercise.prefix[question]:
        try:
            tree = ast.parse(cell)
        except SyntaxError:   # a %%writefile cell: no imports of the notebook's namespace
            continue
        imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
        exec(compile(ast.Module(imports, []), f"<{exercise.path.stem} imports>", "exec"), namespace)  # noqa: S102
    source = solution(chapter, question)
    nodes = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == name]
    if len(nodes) != 1:
        raise ValueError(f"{exercise.path.name} {question}: the solution cell defines {len(nodes)} functions "
                         f"named {name!r}, not one")
    exec(compile(ast.Module(nodes, []), f"<{exercise.path.stem} {question}>", "exec"), namespace)  # noqa: S102
    return namespace[name]


def planted(source: str, old: str, new: str) -> str:
    """``source`` with its one occurrence of ``old`` replaced by ``new`` (a planted mistake); a clear error
    when the notebook's solution no longer contains ``old`` exactly once."""
    if source.count(old) != 1:
        raise ValueError(f"{old!r} occurs {source.count(old)} times in the solution (it must occur once): "
                         "update the planted mistake to the notebook's solution")
    return source.replace(old, new)
