"""course_utils.layout: one grid for every parallelism — rank order, groups, ep carved out of dp × cp,
clear errors, and the DeviceMesh built from it holding exactly the groups the arithmetic says."""
import pytest
import workers

from course_utils import launch
from course_utils.layout import AXES, Layout
from course_utils.placement import cpu_plan  # the workers here use CPU tensors


def test_ranks_are_numbered_tensor_parallel_fastest_then_cp_dp_pp():
    layout = Layout(dp=2, tp=2, pp=2, cp=2)
    assert layout.world_size == 16
    assert [layout.coords(r)["tp"] for r in range(4)] == [0, 1, 0, 1]
    assert [layout.coords(r)["cp"] for r in range(4)] == [0, 0, 1, 1]
    assert layout.coords(4) == {"pp": 0, "dp": 1, "cp": 0, "tp": 0, "ep": 0}
    assert layout.coords(8)["pp"] == 1
    assert all(layout.rank(**{a: layout.coords(r)[a] for a in AXES}) == r for r in range(16))


def test_each_dimension_partitions_the_ranks_into_its_groups():
    layout = Layout(dp=2, tp=2, cp=2)
    assert layout.groups("tp") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert layout.groups("cp") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert layout.groups("dp") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert layout.groups("pp") == [[r] for r in range(8)]
    for dim in AXES + ("ep", "edp"):
        assert sorted(r for g in layout.groups(dim) for r in g) == list(range(8))


def test_expert_parallel_is_carved_out_of_dp_times_cp():
    """ep consecutive dp·cp positions form a group (different experts); edp joins the groups' alike
    ranks (the same experts). No extra ranks: world_size is pp·dp·cp·tp."""
    layout = Layout(dp=4, tp=2, ep=2)
    assert layout.world_size == 8
    assert layout.groups("ep") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert layout.groups("edp") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    both = Layout(dp=2, cp=2, ep=4)
    assert both.groups("ep") == [[0, 1, 2, 3]] and both.groups("edp") == [[0], [1], [2], [3]]


@pytest.mark.parametrize("kwargs, message", [
    ({"tp": 0}, "tp must be a positive integer"),
    ({"cp": 1.5}, "cp must be a positive integer"),
    ({"dp": 3, "replicate": 2}, "replicate=2 must divide dp=3"),
    ({"dp": 2, "cp": 3, "ep": 4}, "ep=4 must divide dp·cp=6"),
])
def test_bad_layouts_say_what_is_wrong(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Layout(**kwargs)


def test_bad_questions_say_what_is_wrong():
    with pytest.raises(ValueError, match="rank 4 is outside a layout of 4 ranks"):
        Layout(dp=4).coords(4)
    with pytest.raises(ValueError, match="unknown dimension 'sp'"):
        Layout(dp=4).groups("sp")


def test_a_layout_prints_its_dimensions():
    assert str(Layout(pp=2, dp=2, tp=2)) == "pp=2 × dp=2 × tp=2 = 8 ranks"
    assert str(Layout(dp=4, replicate=2)) == "pp=1 × dp=4 (HSDP 2×2) × tp=1 = 4 ranks"
    assert str(Layout(dp=2, cp=2, ep=4)) == "pp=1 × dp=2 × cp=2 × tp=1 (ep=4 within dp·cp) = 4 ranks"


@pytest.mark.parametrize("layout", [Layout(dp=2, cp=2), Layout(dp=4, ep=2)], ids=["dp2-cp2", "dp4-ep2"])
def test_the_device_meshes_hold_the_groups_the_layout_names(layout):
    per_rank = launch.run(workers.mesh_groups, layout.world_size, plan=cpu_plan(layout.world_size), args=(layout,),
                          output="none")
    for rank, groups in enumerate(per_rank):
        for dim, ranks in groups.items():
            assert ranks == next(g for g in layout.groups(dim) if rank in g), (rank, dim)


@pytest.mark.parametrize("layout, dim", [(Layout(dp=2, cp=2), "cp"), (Layout(dp=2, tp=2, ep=2), "ep")],
                         ids=["ring-attention-on-cp", "experts-on-ep"])
def test_context_and_expert_parallelism_run_on_the_layouts_groups(layout, dim):
    """Ring attention on each cp group and an expert-parallel MoE on each ep group (ranks 0 and 2:
    not consecutive) == one process on that group's data."""
    results = launch.run(workers.parallel_on_a_layout_group, layout.world_size, plan=cpu_plan(layout.world_size),
                         args=(layout, dim), output="none")
    for rank, (error, ranks) in enumerate(results):
        assert error < 1e-10 and ranks == next(g for g in layout.groups(dim) if rank in g), (rank, error, ranks)
