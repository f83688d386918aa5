"""course_utils/__init__.py's docstring is the reader's map of the package: one line per module, in three
groups (lessons, instruments, machinery). The map must list every module there is and nothing else."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import course_utils

PACKAGE = Path(course_utils.__file__).resolve().parent
GROUPS = ("Lessons:", "Instruments:", "Machinery:")

ENTRY = re.compile(r"^- ``(\w+)``", re.MULTILINE)


def modules(package: Path) -> set[str]:
    """The modules of ``package``: its .py files (not __init__) and its sub-packages."""
    files = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    packages = {p.parent.name for p in package.glob("*/__init__.py")}
    return files | packages


def mapped(package: Path) -> list[str]:
    """The module names the package docstring lists, in order (duplicates kept)."""
    text = (package / "__init__.py").read_text()
    doc = re.match(r'\s*(?:[rRuU]?)"""(.*?)"""', text, re.DOTALL)
    assert doc, f"{package / '__init__.py'} starts with no docstring"
    return ENTRY.findall(doc.group(1))


def map_problems(package: Path) -> list[str]:
    """What is wrong with ``package``'s map: modules without a line, lines without a module, repeats."""
    listed = mapped(package)
    there = modules(package)
    problems = [f"{name}: a module with no line in the map" for name in sorted(there - set(listed))]
    problems += [f"{name}: on the map, but there is no such module" for name in sorted(set(listed) - there)]
    problems += [f"{name}: on the map twice" for name in sorted({n for n in listed if listed.count(n) > 1})]
    return problems


def test_the_map_lists_every_module_and_nothing_else():
    assert map_problems(PACKAGE) == []


def test_the_map_has_its_three_groups_in_order():
    text = (PACKAGE / "__init__.py").read_text()
    where = [text.find(f"\n{group}") for group in GROUPS]
    assert -1 not in where and where == sorted(where), f"the groups {GROUPS} must head the map, in that order"


def test_a_module_added_without_a_line_is_reported(tmp_path):
    """The check above can fail: a copy of the package with one more module, and one less, is caught."""
    copy = tmp_path / "course_utils"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert map_problems(copy) == []
    (copy / "newmodule.py").write_text('"""A module nobody put on the map."""\n')
    assert map_problems(copy) == ["newmodule: a module with no line in the map"]
    (copy / "newmodule.py").unlink()
    (copy / "bounds.py").unlink()
    assert map_problems(copy) == ["bounds: on the map, but there is no such module"]
