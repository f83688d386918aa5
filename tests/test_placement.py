"""course_utils.placement: where single-process cells and ranks run, for 0, 1, 2 and 8 GPUs (faked)."""
import pytest

from course_utils import placement


@pytest.fixture(autouse=True)
def no_profile(monkeypatch):
    monkeypatch.delenv("COURSE_PROFILE", raising=False)


@pytest.mark.parametrize("gpus, device, backend, rank_devices", [
    (0, "cpu", "gloo", ("cpu", "cpu")),
    (1, "cuda", "gloo", ("cpu", "cpu")),               # NCCL needs a GPU per rank: ranks go to the CPU
    (2, "cuda", "nccl", ("cuda:0", "cuda:1")),
    (8, "cuda", "nccl", ("cuda:0", "cuda:1")),
])
def test_two_ranks(gpus, device, backend, rank_devices):
    p = placement.plan(2, gpus=gpus)
    assert (p.device, p.backend, p.rank_devices) == (device, backend, rank_devices)
    assert p.sizes(cpu="small", gpu="big") == ("big" if gpus else "small")
    # sizes follow where the ranks run: never GPU sizes on CPU ranks
    assert p.rank_sizes(cpu="small", gpu="big") == ("big" if backend == "nccl" else "small")
    assert p.rank_device == ("cuda" if backend == "nccl" else "cpu")


@pytest.mark.parametrize("gpus", [0, 1, 2, 8])
def test_never_two_ranks_on_one_gpu_under_nccl(gpus):
    for world in (1, 2, 3, 4, 8, 9):
        p = placement.plan(world, gpus=gpus)
        assert len(p.rank_devices) == world
        if p.backend == "nccl":
            assert len(set(p.rank_devices)) == world and world <= gpus
        else:
            assert set(p.rank_devices) == {"cpu"}


@pytest.mark.parametrize("gpus", [0, 1, 2, 8])
def test_course_profile_cpu_keeps_everything_on_the_cpu(monkeypatch, gpus):
    monkeypatch.setenv("COURSE_PROFILE", "cpu")
    p = placement.plan(2, gpus=gpus)
    assert (p.device, p.backend, p.profile, p.rank_profile) == ("cpu", "gloo", "cpu", "cpu")
    assert placement.local_backend(1, gpus=gpus) == "gloo"
    # the stored outputs are written with GPUs hidden; the line matches a machine without GPUs,
    # and says so where GPUs are present but left unused
    line = str(p)
    assert line.startswith(str(placement.plan(2, gpus=0)))
    assert ("left unused" in line) == (gpus > 0)


def test_course_profile_gpu_without_a_gpu_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("COURSE_PROFILE", "gpu")
    with pytest.raises(ValueError, match="sees no CUDA GPU.*Unset COURSE_PROFILE"):
        placement.plan(2, gpus=0)
    assert placement.plan(2, gpus=2).backend == "nccl"


def test_bad_arguments(monkeypatch):
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="world_size"):
            placement.plan(bad, gpus=0)
    monkeypatch.setenv("COURSE_PROFILE", "tpu")
    with pytest.raises(ValueError, match="not a profile"):
        placement.plan(1, gpus=0)


def test_the_plan_line_says_where_each_kind_of_cell_runs():
    assert str(placement.plan(1, gpus=0)) == "plan: everything on the CPU at CPU sizes"
    assert str(placement.plan(2, gpus=0)) == "plan: everything on the CPU at CPU sizes; 2 ranks over gloo"
    one = str(placement.plan(2, gpus=1))
    assert "single-process cells on cuda at GPU sizes (1 GPU)" in one
    assert "2 ranks on the CPU over gloo at CPU sizes (NCCL needs one GPU per rank: 1 < 2)" in one
    assert "2 ranks on cuda:0..cuda:1 over nccl at GPU sizes" in str(placement.plan(2, gpus=8))


def test_this_machine():
    """Without faking: the plan agrees with what PyTorch sees."""
    p = placement.plan(2)
    assert p.gpus == placement.gpu_count()
    assert p.device == ("cuda" if p.gpus else "cpu")


# --- simulated nodes: the crash chapter 03 had on any machine with a GPU ---------------------------

def ranks_of_simulated_nodes(nnodes, nproc_per_node, gpus, node_env):
    """(backend, physical GPU or None) of every rank of a job of ``nnodes`` simulated nodes, when
    node ``i`` sees the GPUs ``node_env[i]`` (a CUDA_VISIBLE_DEVICES string; None = all of them)
    and each process picks its backend by ``placement.local_backend`` and local rank."""
    out = []
    for node in range(nnodes):
        env = node_env[node]
        ids = [str(i) for i in range(gpus)] if env is None else [d for d in env.split(",") if d]
        backend = placement.local_backend(nproc_per_node, gpus=len(ids))
        out += [(backend, ids[r] if backend == "nccl" else None) for r in range(nproc_per_node)]
    return out


def old_rule(nnodes, nproc_per_node, gpus):
    """What recipes/train_ddp.py did before: every simulated node saw every GPU, and NCCL was chosen
    when ``device_count() >= LOCAL_WORLD_SIZE``, with device ``cuda:LOCAL_RANK``."""
    backend = "nccl" if gpus >= nproc_per_node else "gloo"
    return [(backend, str(r) if backend == "nccl" else None) for _ in range(nnodes) for r in range(nproc_per_node)]


def shares_a_gpu_under_nccl(ranks):
    used = [gpu for backend, gpu in ranks if backend == "nccl"]
    mixed = len({backend for backend, _ in ranks}) > 1
    return len(used) != len(set(used)) or mixed


def test_the_old_rule_put_two_nodes_on_one_gpu():
    """The check below can fail: chapter 03's two 1-process nodes on a 1-GPU machine both took cuda:0."""
    assert shares_a_gpu_under_nccl(old_rule(2, 1, gpus=1))
    assert shares_a_gpu_under_nccl(old_rule(2, 2, gpus=2))


@pytest.mark.parametrize("gpus", [0, 1, 2, 3, 4, 8])
@pytest.mark.parametrize("nnodes, nproc", [(2, 1), (2, 2), (3, 1), (4, 2)])
def test_simulated_nodes_get_their_own_gpus_or_gloo(gpus, nnodes, nproc):
    envs = placement.simulated_node_gpus(nnodes, nproc, gpus=gpus, visible=",".join(map(str, range(gpus))))
    assert len(envs) == nnodes
    ranks = ranks_of_simulated_nodes(nnodes, nproc, gpus, envs)
    assert not shares_a_gpu_under_nccl(ranks)
    if gpus >= nnodes * nproc:
        assert all(backend == "nccl" for backend, _ in ranks)
    else:
        assert all(backend == "gloo" for backend, _ in ranks)


def test_simulated_nodes_slice_the_visible_ids():
    assert placement.simulated_node_gpus(2, 1, gpus=2, visible="3,5") == ["3", "5"]
    uuids = "GPU-a,GPU-b,GPU-c,GPU-d"
    assert placement.simulated_node_gpus(2, 2, gpus=4, visible=uuids) == ["GPU-a,GPU-b", "GPU-c,GPU-d"]
    assert placement.simulated_node_gpus(2, 1, gpus=0, visible="") == ["", ""]


def test_torchrun_nodes_hands_each_node_its_gpus(monkeypatch, tmp_path):
    """subprocesses.torchrun_nodes passes simulated_node_gpus to each agent (recorded, not launched)."""
    from course_utils import subprocesses

    seen = {}

    def fake_run_commands(cmds, **kwargs):
        seen.update(kwargs)
        return []

    monkeypatch.setattr(subprocesses, "run_commands", fake_run_commands)
    monkeypatch.setattr(placement, "gpu_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    script = tmp_path / "s.py"
    script.write_text("")
    subprocesses.torchrun_nodes(script, nnodes=2, nproc_per_node=1)
    assert [e["CUDA_VISIBLE_DEVICES"] for e in seen["envs"]] == ["0", "1"]


def test_env_argument_shows_the_rules_whatever_the_environment(monkeypatch):
    monkeypatch.setenv("COURSE_PROFILE", "cpu")
    assert placement.plan(2, gpus=2, env={}).backend == "nccl"
    assert placement.plan(2, gpus=2).backend == "gloo"


def _rank_device_worker(rank: int, world_size: int) -> str:
    return str(placement.rank_device())


def test_rank_device_is_the_plans_device_and_the_cpu_outside_a_group():
    """What a worker reads back with rank_device() is the device the plan gave its rank (on a GPU machine
    with 2+ GPUs: cuda:0, cuda:1; here: the CPU), and the CPU for ranks launched on gloo on purpose."""
    from course_utils import launch

    assert str(placement.rank_device()) == "cpu"
    plan = placement.plan(2)
    assert launch.run(_rank_device_worker, world_size=2, plan=plan) == list(plan.rank_devices)
    assert launch.run(_rank_device_worker, world_size=2) == list(plan.rank_devices)   # no plan: the same one
    assert launch.run(_rank_device_worker, world_size=2, backend="gloo") == ["cpu", "cpu"]


def test_ranks_get_gpus_is_the_one_rule():
    """NCCL only when each rank has its own GPU, and never under COURSE_PROFILE=cpu."""
    for ranks in (1, 2, 3, 8):
        for gpus in (0, 1, 2, 8):
            assert placement.ranks_get_gpus(ranks, gpus) is (gpus >= ranks)
            assert placement.ranks_get_gpus(ranks, gpus, "gpu") is (gpus >= ranks)
            assert placement.ranks_get_gpus(ranks, gpus, "cpu") is False
            assert placement.local_backend(ranks, gpus=gpus) == ("nccl" if gpus >= ranks else "gloo")


def test_other_frameworks_count_their_own_gpus(monkeypatch):
    monkeypatch.setenv("COURSE_PROFILE", "gpu")       # PyTorch's GPUs do not put TensorFlow on one
    tf = placement.plan(2, gpus=0, framework="TensorFlow")
    assert (tf.device, tf.rank_profile, tf.sizes(cpu=1, gpu=2)) == ("cpu", "cpu", 1)
    assert str(tf) == "plan (TensorFlow sees 0 GPUs): everything on the CPU at CPU sizes"
    monkeypatch.delenv("COURSE_PROFILE")
    one = placement.plan(2, gpus=1, framework="TensorFlow")
    assert (one.sizes(cpu=1, gpu=2), one.rank_sizes(cpu=1, gpu=2)) == (2, 1)
    assert str(one) == ("plan (TensorFlow sees 1 GPU): single-device work on the GPU at GPU sizes; "
                        "replicas on CPU devices at CPU sizes (one GPU per replica needs 2+ GPUs)")
    assert str(placement.plan(2, gpus=4, framework="TensorFlow")).endswith("replicas on the GPUs at GPU sizes")
    mxnet = str(placement.plan(gpus=0, framework="MXNet"))
    assert mxnet == "plan (MXNet sees 0 GPUs): everything on the CPU at CPU sizes"
