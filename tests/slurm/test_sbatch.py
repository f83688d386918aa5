"""The course's own recipes/slurm/train_ddp.sbatch, submitted to a real (private) SLURM cluster.

It must train what chapter 03 trains (its weights equal the chapter's single-process reference),
on two nodes and on one, and fail the way a user needs when a rank dies: the job FAILED, the dead
rank named in its output, every other task torn down.
"""
import importlib.util
import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import nbformat
import pytest
import torch

from course_utils.subprocesses import free_port

ROOT = Path(__file__).resolve().parents[2]
SBATCH = ROOT / "recipes" / "slurm" / "train_ddp.sbatch"
CHAPTER = ROOT / "notebooks" / "03_pytorch_ddp.ipynb"


def load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def chapter_cells() -> list[str]:
    return [c.source for c in nbformat.read(CHAPTER, as_version=4).cells]


def chapter_reference(workdir: Path) -> dict[str, torch.Tensor]:
    """Chapter 03's single-process reference (its own ``train_reference``, from its %%writefile cells),
    for the arguments the recipe passes to train_ddp.py."""
    for source in chapter_cells():
        if source.startswith("%%writefile work/ch03_"):
            first, body = source.split("\n", 1)
            (workdir / Path(first.split()[-1]).name).write_text(body)
    sys.path.insert(0, str(workdir))     # the chapter's modules import one another
    try:
        reference = load("ch03_reference", workdir / "ch03_reference.py")
    finally:
        sys.path.remove(str(workdir))
    recipe = load("train_ddp", ROOT / "recipes" / "train_ddp.py").parse_args(
        re.search(r"train_ddp\.py\" (.*?) --save", SBATCH.read_text()).group(1).split())
    return reference.train_reference(hidden=recipe.hidden, epochs=recipe.epochs, batch=recipe.batch_size,
                                     lr=recipe.lr, seed=recipe.seed, world_size=2)


def results(output: str) -> list[dict]:
    return [json.loads(line.split("RESULT ", 1)[1]) for line in output.splitlines() if "RESULT " in line]


def submit_recipe(cluster, workdir: Path, *train_args: str, nodes: int, nproc: int | None) -> int:
    """The recipe as a CPU job: no GPUs asked for, ``nproc`` processes per node, output in ``workdir``."""
    env = {"RDZV_PORT": str(free_port()), "NPROC_PER_NODE": str(nproc or "")}
    options = [f"--nodes={nodes}", "--gpus-per-node=0", f"--cpus-per-task={min(2, cluster.cpus)}",
               f"--chdir={workdir}", f"--output={workdir}/%x-%j.out"]
    return cluster.submit(SBATCH, *train_args, options=options, env=env, cwd=ROOT)   # SLURM_SUBMIT_DIR: the course


def output(workdir: Path, job: int) -> str:
    return (workdir / f"train-ddp-{job}.out").read_text()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return chapter_reference(tmp_path_factory.mktemp("chapter03"))


@pytest.mark.parametrize("nodes, nproc", [(2, 1), (1, 2)], ids=["2 nodes x 1 process", "1 node x 2 processes"])
def test_the_recipe_trains_what_chapter_03_trains(cluster, tmp_path, reference, nodes, nproc):
    job = submit_recipe(cluster, tmp_path, nodes=nodes, nproc=nproc)
    info = cluster.wait(job, timeout_s=120)
    text = output(tmp_path, job)
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), text
    assert f"job {job}: {nodes} node(s) x {nproc} process(es), rendezvous at 127.0.0.1:" in text
    assert [r["epoch"] for r in results(text)] == [0, 1, 2] and {r["world_size"] for r in results(text)} == {2}
    state = torch.load(tmp_path / f"train-ddp-{job}.pt")
    diff = max((state[k] - reference[k]).abs().max().item() for k in reference)
    assert diff < 1e-5, f"max |SLURM job - chapter 03's single process| = {diff:.2e}"   # chapter 03's assertion


def test_the_chapter_shows_what_a_real_run_prints(cluster, tmp_path):
    """Chapter 03 shows a run of this job as text; its RESULT lines are what the job prints."""
    job = submit_recipe(cluster, tmp_path, nodes=2, nproc=1)
    assert cluster.wait(job, timeout_s=120)["JobState"] == "COMPLETED"
    shown = next(s for s in chapter_cells() if "the same job on a real scheduler" in s.lower())
    assert results(shown) == results(output(tmp_path, job)) != []
    assert "COMPLETED" in shown and "2 node(s) x 1 process(es)" in shown


def test_a_killed_rank_fails_the_job_and_the_other_node_is_torn_down(cluster, tmp_path):
    """Rank 1 dies as the OOM killer would kill it (SIGKILL) while both ranks train."""
    job = submit_recipe(cluster, tmp_path, "--epochs", "1000", nodes=2, nproc=1)
    deadline = time.monotonic() + 60
    while not (victim := cluster.processes(SLURM_JOB_ID=str(job), RANK="1")) or "RESULT" not in (
            output(tmp_path, job) if (tmp_path / f"train-ddp-{job}.out").exists() else ""):
        assert time.monotonic() < deadline, f"rank 1 of job {job} never started training: {cluster.job(job)}"
        time.sleep(0.2)
    worker = next(pid for pid, cmd in victim.items() if "train_ddp.py" in cmd and "torchrun" not in cmd)
    os.kill(worker, signal.SIGKILL)
    info = cluster.wait(job, timeout_s=60)
    text = output(tmp_path, job)
    assert info["JobState"] == "FAILED" and info["ExitCode"] != "0:0", text
    assert "rank      : 1" in text and "Signal 9 (SIGKILL)" in text, text          # torchrun names the dead rank
    assert re.search(r"srun: error: node\d: task \d: Exited with exit code 1", text), text
    assert f"Terminating StepId={job}.0" in text, text                             # --kill-on-bad-exit at work
    deadline = time.monotonic() + 15
    while (left := cluster.processes(SLURM_JOB_ID=str(job))) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"job {job} ended but left processes: {left}"


def test_a_cpu_job_without_a_process_count_fails_with_what_to_do(cluster, tmp_path):
    job = submit_recipe(cluster, tmp_path, nodes=1, nproc=None)
    info = cluster.wait(job, timeout_s=60)
    text = output(tmp_path, job)
    assert (info["JobState"], info["ExitCode"]) == ("FAILED", "2:0"), text
    assert "has no GPUs on its nodes" in text and "NPROC_PER_NODE=" in text, text


def test_the_recipes_default_request_is_refused_on_a_cluster_without_gpus(cluster, tmp_path):
    """The #SBATCH lines ask for 8 GPUs per node: SLURM refuses at submission, before anything runs."""
    with pytest.raises(RuntimeError, match="Invalid generic resource"):
        cluster.submit(SBATCH, options=[f"--chdir={tmp_path}", f"--output={tmp_path}/%x-%j.out"], cwd=ROOT)
