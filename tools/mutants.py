"""Plant wrong answers in an exercise and check that its grader gives each one 0 points and its hint.

    .venv/bin/python tools/mutants.py exercises/14_sequence_context_parallel.ipynb [q3]

Every question of ``exercises/NN_name.ipynb`` has a table of planted wrong answers, ``MUTANTS`` in its
grader, the module of ``grading/`` the notebook imports its checks from (:class:`grading.mutant.Mutant`):
the solution cell with an edit, or a whole other cell, and the words its feedback must contain. This
tool runs a question the way otter's autograder does, in one IPython namespace: the notebook's code
before the question, the question's cells with the solution cell replaced, then each of its test
cases (public and hidden).
A question is all-or-nothing (its config says so, :func:`questions` checks it), so a mutant scores 0
exactly when one test case fails; the check is that one fails, with an ``AssertionError`` (feedback,
not a crash inside the grader) whose message contains the mutant's hint.
"""
from __future__ import annotations

import copy
import importlib
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = ROOT / "exercises"
CONFIG = re.compile(r'^\s*"""\s*# BEGIN TEST CONFIG.*?"""\s*# END TEST CONFIG\s*\n', re.DOTALL)


@dataclass
class TestCell:
    """One test case of a question: its source and whether students see it."""

    source: str
    hidden: bool

    @property
    def body(self) -> str:
        """The test's code without its config header, comments and blank lines (to compare tests)."""
        lines = (line.split("#")[0].rstrip() for line in CONFIG.sub("", self.source).splitlines())
        return "\n".join(line for line in lines if line)


@dataclass
class Question:
    """One ``# BEGIN QUESTION`` block: its code cells in order, which one is the solution, its tests."""

    name: str
    points: float
    all_or_nothing: bool
    cells: list[str] = field(default_factory=list)   # the question's code cells, tests excluded
    solution_index: int = -1                          # which of ``cells`` is the solution cell
    tests: list[TestCell] = field(default_factory=list)

    @property
    def solution(self) -> str:
        return self.cells[self.solution_index]


@dataclass
class Exercise:
    """An exercise notebook split into the code before each question and the questions."""

    path: Path
    questions: dict[str, Question]
    prefix: dict[str, list[str]]   # question name -> code cells to run before it (earlier solutions included)

    @property
    def chapter(self) -> str:
        return self.path.stem[:2]


def read(path: str | os.PathLike) -> Exercise:
    """Parse ``path`` (an otter-assign notebook) into its questions."""
    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    questions: dict[str, Question] = {}
    prefix: dict[str, list[str]] = {}
    before: list[str] = []
    question: Question | None = None
    where = "outside"   # outside, question, solution, tests
    for cell in nb.cells:
        source = cell.source
        if cell.cell_type == "raw":
            head = source.strip().splitlines()[0] if source.strip() else ""
            if head == "# BEGIN QUESTION":
                config = dict(re.findall(r"^(\w+):\s*(.+)$", source, re.MULTILINE))
                question = Question(config["name"], float(config.get("points", 1)),
                                    config.get("all_or_nothing", "false").strip().lower() == "true")
                prefix[question.name] = list(before)
                where = "question"
            elif head == "# BEGIN SOLUTION":
                where = "solution"
            elif head == "# END SOLUTION":
                where = "question"
            elif head == "# BEGIN TESTS":
                where = "tests"
            elif head == "# END TESTS":
                where = "question"
            elif head == "# END QUESTION":
                questions[question.name] = question
                before += question.cells
                question, where = None, "outside"
            continue
        if cell.cell_type != "code":
            continue
        if where == "outside":
            before.append(source)
        elif where == "tests":
            question.tests.append(TestCell(source, "hidden: true" in source.split("END TEST CONFIG")[0]
                                           and "BEGIN TEST CONFIG" in source))
        else:
            if where == "solution":
                if question.solution_index >= 0:
                    raise ValueError(f"{path.name} {question.name}: more than one solution cell")
                question.solution_index = len(question.cells)
            question.cells.append(source)
    return Exercise(path, questions, prefix)


def exercise_path(chapter: str) -> Path:
    """``exercises/NN_*.ipynb`` for chapter ``NN``."""
    (path,) = EXERCISES.glob(f"{chapter}_*.ipynb")
    return path


def grader_module(chapter: str) -> str:
    """The module of ``grading`` that ``exercises/NN_*.ipynb`` imports its checks from, e.g.
    ``"grading.data_parallel"`` for chapter ``"02"`` (the notebook says which; no second table)."""
    path = exercise_path(chapter)
    found = set(re.findall(r"from (grading\.\w+) import", path.read_text()))
    if len(found) != 1:
        raise ValueError(f"{path.name} imports its checks from {sorted(found) or 'no module'} of grading; "
                         "it must import them from exactly one (`from grading.<topic> import check_...`)")
    return found.pop()


def mutant_table(chapter: str) -> dict:
    """``MUTANTS`` of chapter ``NN``'s grader (:func:`grader_module`): question name -> tuple of Mutant."""
    return importlib.import_module(grader_module(chapter)).MUTANTS


@dataclass
class Outcome:
    """What one version of a question's answer got: per test case, None (passed) or the failure."""

    cell_errors: list[str]
    failures: list[tuple[TestCell, str, str] | None]   # (test, exception type name, message)

    @property
    def passed(self) -> bool:
        return not self.cell_errors and all(f is None for f in self.failures)

    def messages(self) -> list[str]:
        return self.cell_errors + [f"{f[1]}: {f[2]}" for f in self.failures if f]


class Runner:
    """Runs a question's variants in one IPython shell, in a scratch folder, as otter would."""

    def __init__(self, folder: str | os.PathLike):
        from IPython.core.interactiveshell import InteractiveShell

        self.folder = Path(folder)
        self.shell = InteractiveShell.instance()

    def _run(self, source: str, name: str) -> BaseException | None:
        code = self.shell.transform_cell(source)
        try:
            exec(compile(code, name, "exec"), self.shell.user_ns)   # noqa: S102 - the notebook's own cells
        except BaseException as error:   # noqa: BLE001 - a student's cell may raise anything
            if isinstance(error, KeyboardInterrupt):
                raise
            return error
        return None

    @contextmanager
    def _inside(self) -> Iterator[None]:
        old_cwd, old_path = os.getcwd(), list(sys.path)
        os.chdir(self.folder)
        try:
            yield
        finally:
            os.chdir(old_cwd)
            sys.path[:] = old_path

    def _forget_work_modules(self) -> None:
        """Drop modules imported from the scratch folder: each variant imports its own file afresh."""
        for name, module in list(sys.modules.items()):
            file = getattr(module, "__file__", None) or ""
            if file.startswith(str(self.folder)):
                del sys.modules[name]

    def prepare(self, exercise: Exercise, question: str) -> dict:
        """Run the notebook's code before ``question``; return the namespace to start each variant from."""
        self.shell.reset(new_session=False)
        self.shell.user_ns.setdefault("__spec__", None)   # as in a kernel: multiprocessing reads __main__.__spec__
        with self._inside():
            for i, source in enumerate(exercise.prefix[question]):
                error = self._run(source, f"<{exercise.path.stem} before {question}, cell {i}>")
                if error is not None:
                    raise RuntimeError(f"{exercise.path.name}: the code before {question} raised "
                                       f"{type(error).__name__}: {error}")
        return dict(self.shell.user_ns)

    def attempt(self, exercise: Exercise, question: str, answer: str, start: dict, until: str | None = None) -> Outcome:
        """Grade ``answer`` (the source of the solution cell) for ``question``, from namespace ``start``.

        With ``until``, the test cases after the first ``AssertionError`` containing it are not run
        (the answer already scores 0 with that feedback; it saves the slow distributed ones)."""
        q = exercise.questions[question]
        self.shell.user_ns.clear()
        self.shell.user_ns.update(copy.copy(start))
        self._forget_work_modules()
        cell_errors, failures = [], []
        with self._inside():
            for i, source in enumerate(q.cells):
                error = self._run(answer if i == q.solution_index else source, f"<{question} cell {i}>")
                if error is not None:
                    cell_errors.append(f"cell {i} raised {type(error).__name__}: {error}")
            for i, test in enumerate(q.tests):
                error = self._run(test.source, f"<{question} test {i}>")
                failures.append(None if error is None else (test, type(error).__name__, str(error)))
                if until is not None and isinstance(error, AssertionError) and until in str(error):
                    break
        return Outcome(cell_errors, failures)


def planted(exercise: Exercise, question: str, mutant) -> str:
    """The solution cell of ``question`` with ``mutant`` planted in it."""
    solution = exercise.questions[question].solution
    if mutant.source is not None:
        return mutant.source
    text = solution
    for old, new in mutant.edits:
        if text.count(old) != 1:
            raise ValueError(f"mutant {mutant.name!r} of {exercise.path.stem} {question}: its edit {old!r} occurs "
                             f"{text.count(old)} times in the solution cell (it must occur once)")
        text = text.replace(old, new)
    return text


def verdict(outcome: Outcome, hint: str) -> str | None:
    """Why a mutant's outcome is not a proper 0 with feedback, or None when it is."""
    failed = [f for f in outcome.failures if f]
    if not failed:
        return "it passed every test case: the grader accepts this wrong answer"
    messages = [message for _, kind, message in failed if kind == "AssertionError"]
    if not messages:
        kinds = ", ".join(sorted({kind for _, kind, _ in failed}))
        return f"it failed with {kinds}, not with feedback (AssertionError): {outcome.messages()[0][:300]}"
    if not any(hint in message for message in messages):
        return f"its feedback lacks the hint {hint!r}: " + " | ".join(m[:300] for m in messages)
    if any("site-packages/torch" in m or "Traceback" in m for m in messages):
        return "its feedback shows a traceback from inside a framework"
    return None


def main(argv: list[str]) -> int:
    import tempfile

    path = Path(argv[0])
    exercise = read(path)
    table = mutant_table(exercise.chapter)
    wanted = argv[1:] or list(exercise.questions)
    bad = 0
    with tempfile.TemporaryDirectory(prefix="course_mutants_") as folder:
        runner = Runner(folder)
        for question in wanted:
            start = runner.prepare(exercise, question)
            solution = runner.attempt(exercise, question, exercise.questions[question].solution, start)
            said = "passes" if solution.passed else "FAILS: " + " | ".join(solution.messages())
            print(f"{question}: solution {said}")
            for mutant in table.get(question, ()):
                outcome = runner.attempt(exercise, question, planted(exercise, question, mutant), start, mutant.hint)
                why = verdict(outcome, mutant.hint)
                bad += why is not None
                print(f"  {'ok  ' if why is None else 'BAD '} {mutant.name}" + ("" if why is None else f": {why}"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
