"""Tier 3: the exercises. otter assign builds them; `otter run --debug` grades each version with
the autograder zip an instructor hands to otter (debug: a cell that raises fails the run instead
of being skipped): untouched student versions run to the end and score zero, solutions score full
marks. Four exercises are built and graded at a time (each step is a subprocess that spends much
of its time waiting for its kernel: on 2 cores, 4 at a time take 0.6 of the time of 2). The questions
where students write distributed code give their untouched stub feedback (not a torch traceback),
and `tools/grade_class.py` grades a folder of submissions into a CSV."""
import csv
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
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(EXERCISES, pool.map(lambda name: build_and_grade(name, dest), EXERCISES)))


def test_there_are_at_least_two_questions_per_chapter():
    assert EXERCISES == ["00_setup_and_hardware", "01_why_parallel", "02_data_parallel_from_scratch",
                         "03_pytorch_ddp", "04_mixed_precision", "05_tensorflow_strategies",
                         "06_keras_multi_device", "07_mxnet_legacy", "08_caffe2_legacy", "09_model_parallel",
                         "10_sharded_data_parallel", "11_fault_tolerance", "12_performance_playbook",
                         "13_transformer_accounting", "14_sequence_context_parallel", "15_expert_parallel",
                         "16_composing_parallelism"]
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


# The questions where the student writes distributed code, and what the untouched stub is told
DISTRIBUTED_QUESTIONS = [
    ("00_setup_and_hardware", "q3", "sum_of_squares returned None"),
    ("02_data_parallel_from_scratch", "q4", "average_gradients changed no gradient"),
    ("03_pytorch_ddp", "q3", "train still does nothing"),
    ("04_mixed_precision", "q3", "amp_step changed no weight"),
    ("05_tensorflow_strategies", "q4", "train_mirrored still does nothing"),
    ("06_keras_multi_device", "q4", "fit_parallel never trained the model"),
    ("07_mxnet_legacy", "q3", "sync_sgd_step returned None"),
    ("09_model_parallel", "q4", "pipeline_step left every gradient empty"),
    ("09_model_parallel", "q5", "tensor_parallel_mlp returned None"),
    ("10_sharded_data_parallel", "q3", "shard_model still does nothing"),
    ("11_fault_tolerance", "q3", "save wrote nothing into the folder"),
    ("12_performance_playbook", "q3", "the tensor is still this rank's own input"),
    ("13_transformer_accounting", "q3", "job_flops returned None"),
    ("14_sequence_context_parallel", "q3", "ring_forward returned None"),
    ("15_expert_parallel", "q3", "expert_parallel returned None"),
    ("16_composing_parallelism", "q3", "build_2d returned None"),
]


@pytest.mark.parametrize("name, question, hint", DISTRIBUTED_QUESTIONS)
def test_untouched_distributed_question_scores_zero_with_feedback_not_a_torch_traceback(graded, name, question, hint):
    results = json.loads((graded[name][0].parent / "graded" / name / "student" / "results.json").read_text())
    (test,) = [t for t in results["tests"] if t.get("name") == question]
    assert test["score"] == 0 and hint in test["output"], test["output"]
    assert "site-packages/torch" not in test["output"], test["output"]


def test_grading_a_class_folder_writes_one_csv_row_per_submission(graded, tmp_path):
    import grade_class

    from course_utils.subprocesses import descendants

    name = "02_data_parallel_from_scratch"
    folder = graded[name][0]
    solution = nbformat.read(folder / "autograder" / f"{name}.ipynb", as_version=4)
    untouched = nbformat.read(folder / "student" / f"{name}.ipynb", as_version=4)
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    nbformat.write(solution, submissions / "alice.ipynb")
    nbformat.write(untouched, submissions / "bob.ipynb")
    for cell in solution.cells:   # carol forgot to divide by the world size
        cell.source = cell.source.replace("    flat /= world_size\n", "")
    nbformat.write(solution, submissions / "carol.ipynb")
    untouched.cells.insert(1, nbformat.v4.new_code_cell("import time\ntime.sleep(600)"))
    nbformat.write(untouched, submissions / "dave.ipynb")   # a cell that never ends
    rows = grade_class.grade_folder(folder / "autograder" / "autograder.zip", submissions, tmp_path / "grades.csv",
                                    tmp_path / "results", jobs=4, timeout_s=45)
    with (tmp_path / "grades.csv").open() as f:
        table = {row["submission"]: row for row in csv.DictReader(f)}
    assert [r["submission"] for r in rows] == sorted(table) == ["alice.ipynb", "bob.ipynb", "carol.ipynb", "dave.ipynb"]
    alice, bob, carol, dave = (table[k] for k in sorted(table))
    assert float(alice["total"]) == float(alice["possible"]) > 0 and not alice["error"]
    assert float(bob["total"]) == 0 and not bob["error"]
    assert float(carol["q4"]) == 0 and float(carol["total"]) == float(carol["possible"]) - 2
    carol_feedback = json.loads((tmp_path / "results" / "carol" / "results.json").read_text())
    assert "forgot to divide by world size" in json.dumps(carol_feedback)
    assert "timed out" in dave["error"]
    assert not [c for c in descendants().values() if "otter" in c or "ipykernel" in c]
