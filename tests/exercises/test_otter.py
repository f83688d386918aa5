"""Tier 3: the exercises. otter assign builds them (and fails if a solution fails its tests);
student versions execute to the end and score zero; solutions score full marks."""
import json
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import build_exercises  # noqa: E402

EXERCISES = sorted(p.stem for p in (ROOT / "exercises").glob("[0-9]*.ipynb"))
OTTER = Path(sys.executable).with_name("otter")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    dest = tmp_path_factory.mktemp("dist")
    with ThreadPoolExecutor(max_workers=2) as pool:  # otter assign is mostly a subprocess: two at a time
        folders = pool.map(lambda name: build_exercises.build(ROOT / "exercises" / f"{name}.ipynb", dest), EXERCISES)
        return dict(zip(EXERCISES, folders))


def score(autograder_zip: Path, notebook: Path, tmp: Path) -> tuple[float, float]:
    """(points scored, points possible) of ``notebook`` graded by ``otter run``."""
    out = tmp / f"graded_{notebook.parent.name}"
    out.mkdir()
    subprocess.run([str(OTTER), "run", "-a", str(autograder_zip), "-o", str(out), str(notebook)],
                   check=True, capture_output=True, timeout=300)
    tests = [t for t in json.loads((out / "results.json").read_text())["tests"] if "score" in t]
    assert tests, "otter run graded no question"
    return sum(t["score"] for t in tests), sum(t["max_score"] for t in tests)


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
def test_student_version_hides_the_solutions(built, name):
    student = nbformat.read(built[name] / "student" / f"{name}.ipynb", as_version=4)
    code = "\n".join(c.source for c in student.cells if c.cell_type == "code")
    assert "BEGIN SOLUTION" not in code and "# SOLUTION" not in code
    assert "..." in code and 'grader.check("q1")' in code


@pytest.mark.parametrize("name", EXERCISES)
def test_student_version_executes_to_the_end(built, name, tmp_path):
    folder = shutil.copytree(built[name] / "student", tmp_path / "student")
    nb = nbformat.read(folder / f"{name}.ipynb", as_version=4)
    NotebookClient(nb, timeout=120, resources={"metadata": {"path": str(folder)}}).execute()


@pytest.mark.parametrize("name", EXERCISES)
def test_untouched_student_version_scores_zero_and_solution_full_marks(built, name, tmp_path):
    zipped = built[name] / "autograder" / "autograder.zip"
    got, possible = score(zipped, built[name] / "student" / f"{name}.ipynb", tmp_path)
    assert got == 0 and possible > 0
    got, possible = score(zipped, built[name] / "autograder" / f"{name}.ipynb", tmp_path)
    assert got == possible > 0
