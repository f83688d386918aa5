"""Tier 3: the exercises. otter assign builds them; `otter run --debug` grades each version with
the autograder zip an instructor hands to otter (debug: a cell that raises fails the run instead
of being skipped): untouched student versions run to the end and score zero, solutions score full
marks. Two exercises are built and graded at a time (each step is a subprocess)."""
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import build_exercises  # noqa: E402

EXERCISES = sorted(p.stem for p in (ROOT / "exercises").glob("[0-9]*.ipynb"))
OTTER = Path(sys.executable).with_name("otter")


@dataclass
class Graded:
    """One version of an exercise notebook graded by ``otter run``."""

    returncode: int
    output: str
    score: float = 0.0
    possible: float = 0.0


def grade(autograder_zip: Path, notebook: Path, out: Path) -> Graded:
    """Grade ``notebook`` with ``otter run --debug``: its points, or the failure's output."""
    out.mkdir(parents=True)
    proc = subprocess.run([str(OTTER), "run", "--debug", "-a", str(autograder_zip), "-o", str(out), str(notebook)],
                          capture_output=True, text=True, timeout=300)
    graded = Graded(proc.returncode, (proc.stdout + proc.stderr)[-3000:])
    if proc.returncode == 0:
        tests = [t for t in json.loads((out / "results.json").read_text())["tests"] if "score" in t]
        graded.score = sum(t["score"] for t in tests)
        graded.possible = sum(t["max_score"] for t in tests)
    return graded


def build_and_grade(name: str, dest: Path) -> tuple[Path, Graded, Graded]:
    folder = build_exercises.build(ROOT / "exercises" / f"{name}.ipynb", dest, run_tests=False)
    zipped = folder / "autograder" / "autograder.zip"
    student = grade(zipped, folder / "student" / f"{name}.ipynb", dest / "graded" / name / "student")
    solution = grade(zipped, folder / "autograder" / f"{name}.ipynb", dest / "graded" / name / "solution")
    return folder, student, solution


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict[str, tuple[Path, Graded, Graded]]:
    dest = tmp_path_factory.mktemp("dist")
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(EXERCISES, pool.map(lambda name: build_and_grade(name, dest), EXERCISES)))


def test_there_are_at_least_two_questions_per_chapter():
    assert EXERCISES == ["00_setup_and_hardware", "01_why_parallel", "02_data_parallel_from_scratch",
                         "03_pytorch_ddp", "04_mixed_precision", "05_tensorflow_strategies",
                         "06_keras_multi_device", "07_mxnet_legacy", "08_caffe2_legacy", "09_model_parallel",
                         "10_sharded_data_parallel", "11_fault_tolerance", "12_performance_playbook"]
    for name in EXERCISES:
        nb = nbformat.read(ROOT / "exercises" / f"{name}.ipynb", as_version=4)
        questions = [c for c in nb.cells if c.cell_type == "raw" and c.source.startswith("# BEGIN QUESTION")]
        assert len(questions) >= 2, name


@pytest.mark.parametrize("name", EXERCISES)
def test_student_version_hides_the_solutions(graded, name):
    student = nbformat.read(graded[name][0] / "student" / f"{name}.ipynb", as_version=4)
    code = "\n".join(c.source for c in student.cells if c.cell_type == "code")
    assert "BEGIN SOLUTION" not in code and "# SOLUTION" not in code
    assert "..." in code and 'grader.check("q1")' in code


@pytest.mark.parametrize("name", EXERCISES)
def test_untouched_student_version_runs_to_the_end_and_scores_zero(graded, name):
    student = graded[name][1]
    assert student.returncode == 0, f"the student version failed to run:\n{student.output}"
    assert student.score == 0 and student.possible > 0


@pytest.mark.parametrize("name", EXERCISES)
def test_solution_scores_full_marks(graded, name):
    solution = graded[name][2]
    assert solution.returncode == 0, f"the solution failed to run:\n{solution.output}"
    assert solution.score == solution.possible > 0
