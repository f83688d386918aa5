"""course_utils.launch: results, bad inputs, and failures that must never hang."""
import os
import sys
import tempfile
import time

import pytest
import workers

from course_utils import launch, subprocesses
from course_utils.launch import CommandError, WorkerError
from course_utils.placement import cpu_plan  # the workers here use CPU tensors


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def pids_in(folder) -> list[int]:
    return [int(p.read_text()) for p in folder.iterdir()]


def wait_gone(pids, within_s=5.0) -> list[int]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def test_returns_each_ranks_value_in_rank_order(capsys):
    out = launch.run(workers.rank_and_sum, 2, plan=cpu_plan(2))
    assert [r["rank"] for r in out] == [0, 1]
    assert all(r["world"] == 2 and r["sum"] == 1.0 for r in out)
    assert out[0]["pid"] != out[1]["pid"] != os.getpid()
    assert capsys.readouterr().out == "[rank 0] hello from rank 0\n[rank 1] hello from rank 1\n"


def test_world_size_one_and_three():
    assert [r["sum"] for r in launch.run(workers.rank_and_sum, 1, plan=cpu_plan(1), output="none")] == [0.0]
    assert [r["sum"] for r in launch.run(workers.rank_and_sum, 3, plan=cpu_plan(3), output="none")] == [3.0] * 3


def test_output_rank0_only(capsys):
    launch.run(workers.rank_and_sum, 2, plan=cpu_plan(2), output="rank0")
    assert capsys.readouterr().out == "[rank 0] hello from rank 0\n"


def test_no_process_group_sets_torchrun_environment():
    assert launch.run(workers.no_group, 2, backend=None) == [(False, "127.0.0.1", 2)] * 2


@pytest.mark.parametrize("world_size", [0, -1, 1.5, "2", True])
def test_bad_world_size(world_size):
    with pytest.raises(ValueError, match="world_size must be an integer >= 1"):
        launch.run(workers.rank_and_sum, world_size)   # refused before any plan is made


def test_not_callable():
    with pytest.raises(ValueError, match="worker must be a function"):
        launch.run("rank_and_sum", 2, plan=cpu_plan(2))


def test_function_from_the_notebook_gets_a_clear_error():
    def local(rank, world_size):
        return rank

    with pytest.raises(ValueError, match="%%writefile"):
        launch.run(local, 2, plan=cpu_plan(2))
    with pytest.raises(ValueError, match="lambda or nested"):
        launch.run(lambda r, w: r, 2, plan=cpu_plan(2))
    main_fn = type(local)(local.__code__, {"__name__": "__main__"}, "main_fn")
    main_fn.__module__, main_fn.__qualname__ = "__main__", "main_fn"
    with pytest.raises(ValueError, match="module __main__"):
        launch.run(main_fn, 2, plan=cpu_plan(2))


@pytest.mark.parametrize("backend,msg", [("mpi", "'gloo' \\(CPU\\) or 'nccl'"),
                                          ("nccl", "one CUDA GPU per rank|not available")])
def test_unavailable_backend(backend, msg):
    with pytest.raises(ValueError, match=msg):
        launch.run(workers.rank_and_sum, 2, backend=backend)


def test_fork_is_refused():
    with pytest.raises(ValueError, match="deadlocks"):
        launch.run(workers.rank_and_sum, 2, plan=cpu_plan(2), start_method="fork")


def test_no_rank_tears_its_group_down_before_every_rank_is_done(tmp_path):
    """A rank that leaves early can close the connections a slower peer is still setting up (gloo:
    "connectFullMesh failed ... Connection closed by peer"): the launcher holds each rank at a
    barrier until all have returned."""
    assert launch.run(workers.finishes_unevenly, 3, plan=cpu_plan(3), args=(str(tmp_path),), output="none") == [0, 1, 2]
    last_done = max(float((tmp_path / f"done{r}").read_text()) for r in range(3))
    assert all(float((tmp_path / f"destroyed{r}").read_text()) >= last_done for r in range(3))


def test_worker_exception_is_reraised_with_its_traceback(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where run() keeps the ranks' logs
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        launch.run(workers.raises, 2, plan=cpu_plan(2), timeout_s=60)
    assert time.monotonic() - start < 30  # rank 0 was stuck in a barrier: killed, not awaited for 60 s
    assert not list(tmp_path.glob("course_launch_*"))  # its logs were removed (they used to pile up in /tmp)
    err = info.value
    assert err.rank == 1  # the root cause, not rank 0's "connection closed" that follows it
    assert "KeyError: 'boom in rank 1'" in str(err)
    assert 'workers.py", line' in err.remote_traceback and "raises" in err.remote_traceback


def test_rank_killed_mid_collective_fails_fast_and_leaves_no_process(tmp_path):
    start = time.monotonic()
    with pytest.raises(WorkerError, match="rank 1 killed by SIGKILL"):
        launch.run(workers.killed_mid_collective, 2, plan=cpu_plan(2), args=(str(tmp_path),), timeout_s=120)
    assert time.monotonic() - start < 60  # failed fast, not at the timeout (bounds are loose: a loaded CI)
    pids = pids_in(tmp_path)
    assert len(pids) == 2
    assert wait_gone(pids) == []


def test_hung_rank_hits_the_wall_clock_timeout_and_is_reaped(tmp_path):
    start = time.monotonic()
    with pytest.raises(WorkerError, match=r"timed out after 3 s; ranks \[0\]"):
        launch.run(workers.hangs, 2, plan=cpu_plan(2), args=(str(tmp_path),), timeout_s=3)
    assert time.monotonic() - start < 40  # the hung rank sleeps for ever: stopped by the 3 s timeout
    assert wait_gone(pids_in(tmp_path)) == []


def test_bad_output_and_timeouts():
    with pytest.raises(ValueError, match="output must be"):
        launch.run(workers.rank_and_sum, 2, plan=cpu_plan(2), output="rank1")
    with pytest.raises(ValueError, match="positive"):
        launch.run(workers.rank_and_sum, 2, plan=cpu_plan(2), timeout_s=0)


def test_run_command_timeout_kills_the_whole_process_tree(tmp_path):
    pidfile = tmp_path / "child.pid"
    code = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(3600)']); open(sys.argv[1], 'w').write(str(p.pid)); time.sleep(3600)")
    with pytest.raises(CommandError, match="timed out after 2 s"):
        launch.run_command([sys.executable, "-c", code, str(pidfile)], timeout_s=2)
    assert wait_gone([int(pidfile.read_text())]) == []


def test_run_command_failure_shows_the_output():
    with pytest.raises(CommandError, match="(?s)exit code 3.*to stdout"):
        launch.run_command([sys.executable, "-c", "print('to stdout'); raise SystemExit(3)"])


def test_torchrun_runs_a_script_and_shows_rank0(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import os, torch, torch.distributed as dist\n"
        "from datetime import timedelta\n"
        "dist.init_process_group('gloo', timeout=timedelta(seconds=30))\n"
        "t = torch.tensor([float(dist.get_rank())]); dist.all_reduce(t)\n"
        "print(f'rank {dist.get_rank()} of {dist.get_world_size()} sum {t.item()}', flush=True)\n"
        "dist.destroy_process_group()\n")
    out = launch.torchrun(script, nproc_per_node=2, timeout_s=90)
    assert "rank 0 of 2 sum 1.0" in out
    assert "rank 1 of 2" not in out
    with pytest.raises(ValueError, match="no script"):
        launch.torchrun(tmp_path / "missing.py")


def test_run_commands_runs_concurrently_and_stops_the_rest_when_one_fails():
    start = time.monotonic()
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    with pytest.raises(CommandError, match="(?s)command 1 .*exit code 4.*the others were stopped.*boom"):
        launch.run_commands([sleeper, [sys.executable, "-c", "print('boom'); raise SystemExit(4)"]], timeout_s=120)
    assert time.monotonic() - start < 60  # the sleeper was stopped, not awaited (600 s) or timed out (120 s)
    out = launch.run_commands([[sys.executable, "-c", f"print({i})"] for i in range(3)])
    assert [r.stdout.strip() for r in out] == ["0", "1", "2"]


def test_run_commands_timeout_kills_all():
    sleeper = [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"]
    with pytest.raises(CommandError, match="(?s)timed out after 3 s.*started"):
        launch.run_commands([sleeper, sleeper], timeout_s=3)


def test_torchrun_nodes_forms_one_job_from_two_local_nodes(tmp_path):
    script = tmp_path / "nodes.py"
    script.write_text(
        "import os, torch, torch.distributed as dist\n"
        "from datetime import timedelta\n"
        "dist.init_process_group('gloo', timeout=timedelta(seconds=30))\n"
        "t = torch.tensor([float(dist.get_rank())]); dist.all_reduce(t)\n"
        "print(f\"node {os.environ['GROUP_RANK']} rank {dist.get_rank()} of {dist.get_world_size()} sum {t.item()}\")\n"
        "dist.destroy_process_group()\n")
    outs = launch.torchrun_nodes(script, nnodes=2, nproc_per_node=1, timeout_s=90)
    assert len(outs) == 2
    lines = sorted(line.split(":", 1)[1] for out in outs for line in out.splitlines() if "sum" in line)
    assert lines == ["node 0 rank 0 of 2 sum 1.0", "node 1 rank 1 of 2 sum 1.0"]
    with pytest.raises(ValueError, match="nnodes"):
        launch.torchrun_nodes(script, nnodes=0)


def test_stop_forkserver_frees_it_and_run_starts_a_new_one():
    launch.run(workers.no_group, 1, backend=None, output="none")
    server_pids = [pid for pid, cmd in subprocesses.descendants().items() if "forkserver" in cmd]
    assert server_pids and launch.stop_forkserver() is True
    assert not [pid for pid, cmd in subprocesses.descendants().items() if "forkserver" in cmd]
    assert launch.stop_forkserver() is False
    assert launch.run(workers.no_group, 1, backend=None, output="none")[0][0] is False


def test_join_parts_rewrites_the_whole_script(tmp_path, capsys):
    from course_utils.launch import join_parts

    (tmp_path / "w_part1.py").write_text("import os\n")
    (tmp_path / "w_part2.py").write_text("\ndef main():\n    return os.sep\n")
    first = join_parts("w", 2, tmp_path).read_text()
    assert join_parts("w", 2, tmp_path).read_text() == first == "import os\n\n\ndef main():\n    return os.sep\n"
    assert f"{tmp_path.name}/w.py: parts 1-2 joined, 5 lines" in capsys.readouterr().out
    with pytest.raises(FileNotFoundError, match="part 3 first"):
        join_parts("w", 3, tmp_path)


# --- where the ranks run: the plan's decision (faked GPUs: tests/fake_cuda.py) ------------------------

@pytest.fixture
def nccl_built(monkeypatch):
    """This CPU build of PyTorch has no NCCL; with faked GPUs, pretend it has, to reach the placement checks."""
    import torch.distributed as dist

    monkeypatch.setattr(dist, "is_backend_available", lambda backend: backend in ("gloo", "nccl"))
    monkeypatch.delenv("COURSE_PROFILE", raising=False)


@pytest.mark.parametrize("count", [1, 2, 8])
@pytest.mark.parametrize("card", ["T4", "A100", "H100"])
def test_ranks_go_where_the_plan_says(monkeypatch, nccl_built, card, count):
    from fake_cuda import fake_cuda

    from course_utils import placement

    fake_cuda(monkeypatch, card, count=count)
    for world in (1, 2, 4, 8):
        plan = placement.plan(world)
        for launched in range(1, world + 1):
            backend, devices = launch.rank_placement(launched, plan)
            assert (backend, devices) == (plan.backend, plan.rank_devices[:launched])
            if backend == "nccl":        # every rank its own GPU, and only with one for each
                assert devices == tuple(f"cuda:{r}" for r in range(launched)) and 1 < world <= count
            else:
                assert devices == ("cpu",) * launched and not 1 < world <= count
        # without a plan, the course's rule decides, not a fixed backend
        assert launch.rank_placement(world) == (placement.plan(world).backend, placement.plan(world).rank_devices)
    monkeypatch.setenv("COURSE_PROFILE", "cpu")
    assert launch.rank_placement(2) == ("gloo", ("cpu", "cpu"))


@pytest.mark.parametrize("profile", [None, "gpu"])
@pytest.mark.parametrize("count", [2, 8])
@pytest.mark.parametrize("card", ["T4", "H100"])
def test_a_cpu_plan_keeps_the_ranks_on_the_cpu_whatever_the_machine_has(monkeypatch, nccl_built, card, count,
                                                                          profile):
    """Cells that measure CPU time or heap (ch10's heap, ch16's bubble) launch with placement.cpu_plan(n)."""
    from fake_cuda import fake_cuda

    from course_utils import placement

    fake_cuda(monkeypatch, card, count=count)
    if profile:
        monkeypatch.setenv("COURSE_PROFILE", profile)
    assert placement.plan(2).backend == "nccl"             # the machine's plan would take the GPUs
    cpu = placement.cpu_plan(2)
    assert launch.rank_placement(2, cpu) == ("gloo", ("cpu", "cpu")) and cpu.rank_profile == "cpu"


@pytest.mark.parametrize("count", [1, 2, 8])
@pytest.mark.parametrize("card", ["T4", "A100", "H100"])
def test_nccl_without_a_gpu_per_rank_is_a_clear_error(monkeypatch, nccl_built, card, count):
    from fake_cuda import fake_cuda

    from course_utils import placement

    fake_cuda(monkeypatch, card, count=count)
    assert launch.rank_placement(count, backend="nccl")[0] == "nccl"
    with pytest.raises(ValueError, match=f"one CUDA GPU per rank: world_size={count + 1} but {count} GPU"):
        launch.rank_placement(count + 1, backend="nccl")
    with pytest.raises(ValueError, match="one CUDA GPU per rank"):   # a plan made for GPUs this machine lacks
        launch.rank_placement(count + 1, placement.plan(count + 1, gpus=count + 1))
    monkeypatch.setenv("COURSE_PROFILE", "cpu")
    with pytest.raises(ValueError, match="COURSE_PROFILE=cpu keeps ranks on the CPU"):
        launch.rank_placement(count, backend="nccl")


@pytest.mark.parametrize("count", [1, 2, 8])
@pytest.mark.parametrize("card", ["T4", "A100", "H100"])
def test_a_world_size_the_plan_was_not_made_for_is_a_clear_error(monkeypatch, nccl_built, card, count):
    import dataclasses

    from fake_cuda import fake_cuda

    from course_utils import placement

    fake_cuda(monkeypatch, card, count=count)
    plan = placement.plan(2)
    with pytest.raises(ValueError, match=r"made for 2 rank\(s\).*3 are launched: make it with placement.plan\(3\)"):
        launch.rank_placement(3, plan)
    short = dataclasses.replace(plan, rank_devices=plan.rank_devices[:1])   # does not cover rank 1
    with pytest.raises(ValueError, match=r"1 rank device\(s\)\) but 2 are launched"):
        launch.rank_placement(2, short)
    if count >= 2:
        shared = dataclasses.replace(plan, rank_devices=("cuda:0", "cuda:0"))
        with pytest.raises(ValueError, match="one GPU per rank"):
            launch.rank_placement(2, shared)
    with pytest.raises(ValueError, match="plan= or backend=, not both"):
        launch.rank_placement(2, plan, backend="gloo")
    with pytest.raises(ValueError, match="counts TensorFlow's GPUs"):
        launch.rank_placement(2, placement.plan(2, framework="TensorFlow"))


def test_a_plan_for_too_few_ranks_starts_no_process(tmp_path):
    from course_utils import placement

    with pytest.raises(ValueError, match=r"placement.plan\(3\)"):
        launch.run(workers.hangs, 3, plan=placement.plan(2), args=(str(tmp_path),))
    assert list(tmp_path.iterdir()) == []
