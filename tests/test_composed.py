"""DP × TP × PP composed (course_utils.composed): the layout's arithmetic, clear errors, and the GPT
trained on each composition == one process on gloo ranks."""
import pytest
import workers

from course_utils import composed, launch
from course_utils.gpt import GPT, GPTConfig
from course_utils.placement import cpu_plan  # the workers here use CPU tensors

CONFIG = GPTConfig(vocab_size=16, block_size=8, n_layer=4, n_head=4, d_model=16)
NAMES = sorted(n for n, _ in GPT(CONFIG).named_parameters())


def test_ranks_are_laid_out_tensor_parallel_fastest():
    layout = composed.Layout(pp=2, dp=2, tp=2)
    assert layout.world_size == 8
    assert [tuple(layout.coords(r)[a] for a in ("pp", "dp", "tp")) for r in range(8)] == [
        (0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (1, 0, 0), (1, 0, 1), (1, 1, 0), (1, 1, 1)]
    assert str(composed.Layout(dp=4, replicate=2)) == "pp=1 × dp=4 (HSDP 2×2) × tp=1 = 4 ranks"


@pytest.mark.parametrize("kwargs, message", [
    ({"dp": 0}, "dp must be a positive integer"),
    ({"dp": 3, "replicate": 2}, "replicate=2 must divide dp=3"),
    ({"dp": 2, "cp": 3, "ep": 4}, "ep=4 must divide dp·cp=6"),
])
def test_bad_layouts_say_what_is_wrong(kwargs, message):
    with pytest.raises(ValueError, match=message):
        composed.Layout(**kwargs)


def test_stages_keep_the_whole_models_parameter_names():
    model = GPT(GPTConfig(vocab_size=16, block_size=8, n_layer=4, n_head=4, d_model=16))
    stages = [composed.pipeline_stage(model, s, 2) for s in range(2)]
    names = [n for stage in stages for n, _ in stage.named_parameters()]
    assert sorted(names) == NAMES
    assert stages[0].is_first and not stages[0].is_last and stages[1].is_last
    with pytest.raises(ValueError, match="n_layer=4 blocks do not split into 3"):
        composed.pipeline_stage(model, 0, 3)


def test_stage_ids_one_looped_or_v_shaped():
    assert composed.stage_ids("Schedule1F1B", 1, 2) == [1]
    assert composed.stage_ids("ScheduleInterleaved1F1B", 1, 2) == [1, 3]
    assert composed.stage_ids("ScheduleZBVZeroBubble", 0, 2) == [0, 3]
    with pytest.raises(ValueError, match="unknown schedule 'Schedule2F2B'"):
        composed.stage_ids("Schedule2F2B", 0, 2)


def test_zero_bubble_with_a_unit_per_block_is_refused():
    model = GPT(GPTConfig(vocab_size=16, block_size=8, n_layer=4, n_head=4, d_model=16))
    with pytest.raises(ValueError, match="per_block=False"):
        composed.shard_data_parallel(model, None, schedule="ScheduleZBVZeroBubble")


def check(results, names=NAMES):
    held = sorted({n for names_, *_ in results for n in names_})
    assert held == names
    assert max(diff for _, diff, *_ in results) < 1e-6
    sliced = [losses for _, _, losses, _ in results if losses is not None]
    assert sliced
    mean = [sum(step) / len(sliced) for step in zip(*(mine for mine, _ in sliced))]   # over the dp slices
    assert max(abs(a - b) for a, b in zip(mean, sliced[0][1])) < 1e-6


@pytest.mark.parametrize("sequence_parallel", [False, True])
def test_fsdp_times_tensor_parallel_equals_one_process(sequence_parallel):
    layout = composed.Layout(dp=2, tp=2)
    check(launch.run(workers.composed_vs_one_process, 4, plan=cpu_plan(4), args=(layout,),
                     kwargs={"sequence_parallel": sequence_parallel}, output="none"))


def test_hsdp_equals_one_process_and_all_reduces_across_the_replicas():
    layout = composed.Layout(dp=4, replicate=2)
    results = launch.run(workers.composed_vs_one_process, 4, plan=cpu_plan(4), args=(layout,), output="none")
    check(results)
    talk = results[0][3]                 # rank 0's collectives, by mesh dimension
    assert set(talk["shard"]) == {"all_gather", "reduce_scatter"} and set(talk["replicate"]) == {"all_reduce"}


def test_each_mesh_dimension_issues_its_own_collectives():
    layout = composed.Layout(dp=2, tp=2)
    talk = launch.run(workers.composed_vs_one_process, 4, plan=cpu_plan(4), args=(layout,), output="none")[0][3]
    assert set(talk) == {"dp", "tp"}
    assert talk["tp"] == ["all_reduce"] * 16          # 4 blocks × (2 forward + 2 backward)
    assert set(talk["dp"]) == {"all_gather", "reduce_scatter"} and talk["dp"].count("reduce_scatter") == 5


@pytest.mark.parametrize("schedule", composed.SCHEDULES)
def test_every_pipeline_schedule_times_fsdp_equals_one_process(schedule):
    """Per-block FSDP units where they are right, one unit per stage under the split-backward
    schedules (with a unit per block those are wrong: chapter 16 shows it)."""
    layout = composed.Layout(pp=2, dp=2)
    per_block = schedule not in composed.SPLIT_BACKWARD
    check(launch.run(workers.composed_vs_one_process, 4, plan=cpu_plan(4), args=(layout, schedule),
                     kwargs={"per_block": per_block, "n_microbatches": 4}, output="none"))


def test_pipeline_times_tensor_parallel_equals_one_process():
    layout = composed.Layout(pp=2, tp=2)
    check(launch.run(workers.composed_vs_one_process, 4, plan=cpu_plan(4), args=(layout, "Schedule1F1B"),
                     output="none"))


def test_three_dimensions_on_eight_ranks_equal_one_process():
    layout = composed.Layout(pp=2, dp=2, tp=2)
    check(launch.run(workers.composed_vs_one_process, 8, plan=cpu_plan(8), args=(layout, "Schedule1F1B"),
                     output="none"))


def test_too_few_microbatches_is_refused_before_it_hangs():
    with pytest.raises(launch.WorkerError, match="needs at least 2 microbatches, got 1"):
        launch.run(workers.composed_vs_one_process, 2, plan=cpu_plan(2), args=(composed.Layout(pp=2), "Schedule1F1B"),
                   kwargs={"n_microbatches": 1}, output="none")


@pytest.mark.parametrize("version,backend,refused", [
    ("2.11.0+cu130", "gloo", True), ("2.13.0", "gloo", False), ("2.11.0", "nccl", False)])
def test_v_schedules_over_gloo_on_an_old_torch_say_why_they_would_fail(monkeypatch, version, backend, refused):
    """torch 2.11's pipeline warm-up sends a tensor to its own rank, which gloo cannot do."""
    import types

    import torch
    import torch.distributed as dist
    import torch.distributed.pipelining as pipelining

    monkeypatch.setattr(torch, "__version__", version)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: backend)
    stage = types.SimpleNamespace(group_size=2, num_stages=4, group=None)
    built = []
    monkeypatch.setattr(pipelining, "ScheduleZBVZeroBubble", lambda *a, **k: built.append(a))
    if refused:
        with pytest.raises(RuntimeError, match="needs a torch newer than 2.11.0.*Pair is not connected"):
            composed.make_schedule("ScheduleZBVZeroBubble", [stage, stage], 4, loss_fn=None)
    else:
        composed.make_schedule("ScheduleZBVZeroBubble", [stage, stage], 4, loss_fn=None)
        assert built
