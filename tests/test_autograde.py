"""grading: every solution passes, every untouched stub and planted classic mistake fails with its
specific hint (no traceback from inside torch), and a hanging or crashing answer leaves no process
behind. The solutions are the exercise notebooks' own (tests/solutions.py reads them); the stubs and
planted mistakes are this file's. And grading stays beside the library: course_utils never imports it."""
import ast
import textwrap
from pathlib import Path

import pytest
from solutions import planted, solution, solution_file, solution_function

from course_utils.subprocesses import descendants
from grading import (
    checkpointing,
    composing_parallelism,
    context_parallel,
    data_parallel,
    ddp,
    expert_parallel,
    feedback,
    mixed_precision,
    model_parallel,
    performance,
    sharded_data_parallel,
    transformer_flops,
)
from grading.student import load_student

HEADER = "import time\n\nimport torch\nimport torch.distributed as dist\n\n\n"


def answer(tmp_path, body: str, name: str = "ex_worker.py") -> str:
    path = tmp_path / name
    path.write_text(HEADER + textwrap.dedent(body))
    return str(path)


def fails_with(check, path: str, *patterns: str, **kwargs) -> str:
    with pytest.raises(AssertionError) as failure:
        check(path, **kwargs)
    message = str(failure.value)
    for pattern in patterns:
        assert pattern in message, message
    assert "site-packages/torch" not in message and "Traceback" not in message, message
    return message


def test_ch02_solution_passes_on_2_and_3_ranks(tmp_path):
    path = solution_file(tmp_path, "02", "q4")
    data_parallel.check_average_gradients(path)
    data_parallel.check_average_gradients(path, world_size=3, sizes=(5, 7, 3, 1), n=24, seed=4)


@pytest.mark.parametrize("body, hint", [
    ("def average_gradients(model, world_size):\n    ...\n", "still does nothing"),
])   # the classic mistakes: data_parallel.MUTANTS["q4"], run by tests/test_mutants.py
def test_ch02_stub_and_classic_mistakes_get_their_hint(tmp_path, body, hint):
    fails_with(data_parallel.check_average_gradients, answer(tmp_path, body), hint)


def test_a_hanging_or_crashing_answer_fails_in_time_and_leaves_no_process(tmp_path):
    hang = answer(tmp_path, "def average_gradients(model, world_size):\n"
                            "    if dist.get_rank() == 0:\n        time.sleep(60)\n"
                            "    dist.all_reduce(torch.zeros(1))\n", "hang.py")
    print(fails_with(data_parallel.check_average_gradients, hang, "waited for each other", "hang.py, line"))
    crash = answer(tmp_path, "import os\n\ndef average_gradients(model, world_size):\n"
                             "    if dist.get_rank() == 1:\n        os._exit(3)\n", "crash.py")
    print(fails_with(data_parallel.check_average_gradients, crash, "rank 1"))
    assert not [cmd for cmd in descendants().values() if "forkserver" not in cmd and "resource_tracker" not in cmd]


def test_a_missing_file_or_function_says_what_to_do(tmp_path):
    fails_with(data_parallel.check_average_gradients, str(tmp_path / "nope.py"), "run the %%writefile cell")
    fails_with(data_parallel.check_average_gradients, answer(tmp_path, "x = 1\n"),
               "must define a function `average_gradients`")


RING = solution("12", "q3")


def test_ch12_ring_solution_passes_on_4_ranks_and_3_ranks_with_uneven_chunks(tmp_path):
    path = answer(tmp_path, RING)
    performance.check_ring_all_reduce(path)
    performance.check_ring_all_reduce(path, world_size=3, numel=11, seed=5)


def test_ch12_a_ring_of_batched_p2p_ops_passes_too(tmp_path):
    """The harness records P2POp/batch_isend_irecv messages without breaking them (P2POp checks its op)."""
    batched = planted(RING, "        sending = dist.isend(mine, right)"
                            "                # isend: both neighbours send at once\n"
                            "        dist.recv(arrived, left)\n        sending.wait()\n",
                      "        for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, right),\n"
                      "                                            dist.P2POp(dist.irecv, arrived, left)]):\n"
                      "            work.wait()\n")
    performance.check_ring_all_reduce(answer(tmp_path, batched), world_size=3, numel=11, seed=5)


@pytest.mark.parametrize("body, hint, sizes", [
    ("def ring_all_reduce(tensor):\n    ...\n", "still this rank's own input", {}),
    (planted(RING, "dist.recv(chunks[(rank - step) % world], left)", "dist.recv(chunks[(rank + step) % world], left)"),
     "hold the full sum but the others do not", {"numel": 8}),   # equal chunks: no size mismatch
])
def test_ch12_stub_and_classic_mistakes_get_their_hint(tmp_path, body, hint, sizes):
    fails_with(performance.check_ring_all_reduce, answer(tmp_path, body), hint, **sizes)


DDP_TRAIN = solution("03", "q3")


def test_ch03_solution_passes(tmp_path):
    path = answer(tmp_path, DDP_TRAIN)
    ddp.check_ddp_training(path)
    ddp.check_ddp_training(path, world_size=3, sizes=(3, 5, 2), n=36, epochs=3, batch_size=2, accumulate=3, seed=7)


@pytest.mark.parametrize("body, hint", [
    ("def train(ddp_model, optimizer, dataset, *, epochs, batch_size, accumulate, seed):\n    ...\n",
     "train still does nothing"),
])   # the classic mistakes: ddp.MUTANTS["q3"], run by tests/test_mutants.py
def test_ch03_stub_and_classic_mistakes_get_their_hint(tmp_path, body, hint):
    fails_with(ddp.check_ddp_training, answer(tmp_path, body), hint)


PIPELINE = solution("09", "q4")


def test_ch09_solution_passes(tmp_path):
    path = answer(tmp_path, PIPELINE)
    model_parallel.check_pipeline_step(path)
    model_parallel.check_pipeline_step(path, sizes=(4, 9, 7, 5, 2), batch=5, split=4, seed=3)


# planted mistakes: model_parallel.MUTANTS (tests/test_mutants.py); here the stub and a hang
@pytest.mark.parametrize("body, hint", [
    ("def pipeline_step(stage, x, target, act_shape):\n    ...\n", "it still does nothing"),
    (planted(PIPELINE, "dist.recv(act, src=0)", "dist.recv(act, src=0)\n    dist.recv(act, src=0)"),
     "waited for each other"),
])
def test_ch09_stub_and_classic_mistakes_get_their_hint(tmp_path, body, hint):
    fails_with(model_parallel.check_pipeline_step, answer(tmp_path, body), hint)


TP_BY_HAND = """
from torch import nn
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor


def tensor_parallel_mlp(mlp, mesh):
    for layer, weight, bias in ((mlp[0], Shard(0), Shard(0)), (mlp[2], Shard(1), Replicate())):
        layer.weight = nn.Parameter(distribute_tensor(layer.weight.data, mesh, [weight]))
        layer.bias = nn.Parameter(distribute_tensor(layer.bias.data, mesh, [bias]))
    mlp.register_forward_pre_hook(lambda m, args: (DTensor.from_local(args[0], mesh, [Replicate()]),))
    mlp.register_forward_hook(lambda m, args, out: out.redistribute(mesh, [Replicate()]).to_local())
    return mlp
"""


def test_ch09_tensor_parallel_by_hand_passes_and_the_stub_gets_its_hint(tmp_path):
    """The prompt allows distribute_tensor by hand instead of parallelize_module: the check must accept it."""
    model_parallel.check_tensor_parallel_mlp(answer(tmp_path, TP_BY_HAND))
    stub = "def tensor_parallel_mlp(mlp, mesh):\n    ...\n"
    fails_with(model_parallel.check_tensor_parallel_mlp, answer(tmp_path, stub, "ex_stub.py"),
               "tensor_parallel_mlp returned None")


AMP = solution("04", "q3")


def test_ch04_solution_passes(tmp_path):
    path = answer(tmp_path, AMP)
    mixed_precision.check_amp_step(path)
    mixed_precision.check_amp_step(path, world_size=4, sizes=(5, 12, 3), batch=8, steps=7, seed=2)


# planted mistakes: mixed_precision.MUTANTS (tests/test_mutants.py); here the stub and autocast switched off
@pytest.mark.parametrize("body, hint", [
    ("def amp_step(ddp_model, optimizer, scaler, x, y):\n    ...\n", "it still does nothing"),
    (planted(AMP, "torch.float16)", "torch.float16, enabled=False)"), "the forward ran in float32"),
])
def test_ch04_stub_and_classic_mistakes_get_their_hint(tmp_path, body, hint):
    fails_with(mixed_precision.check_amp_step, answer(tmp_path, body), hint)


FSDP = solution("10", "q3")


def test_ch10_solution_passes(tmp_path):
    path = answer(tmp_path, FSDP)
    sharded_data_parallel.check_sharding(path)
    sharded_data_parallel.check_sharding(path, world_size=3, sizes=(5, 9, 4), n=12, seed=3)


@pytest.mark.parametrize("body, hint", [
    ("def shard_model(model, mesh):\n    ...\n\n\ndef local_bytes(model):\n    ...\n", "still does nothing"),
])   # the classic mistakes: sharded_data_parallel.MUTANTS["q3"] (tests/test_mutants.py)
def test_ch10_stub_and_classic_mistakes_get_their_hint(tmp_path, body, hint):
    fails_with(sharded_data_parallel.check_sharding, answer(tmp_path, body), hint)


DCP = solution("11", "q3")


def test_ch11_solution_passes(tmp_path):
    path = answer(tmp_path, DCP)
    checkpointing.check_checkpoint(path)
    checkpointing.check_checkpoint(path, world_size=3, sizes=(3, 6, 2), n=24, steps=7, save_at=4, seed=5)


@pytest.mark.parametrize("body, hint", [
    ("def save(model, optimizer, step, folder):\n    ...\n\n\ndef load(model, optimizer, folder):\n    ...\n",
     "it still does nothing"),
])   # the classic mistakes: checkpointing.MUTANTS["q3"] (tests/test_mutants.py)
def test_ch11_stub_and_classic_mistakes_get_their_hint(tmp_path, body, hint):
    fails_with(checkpointing.check_checkpoint, answer(tmp_path, body), hint)


def test_a_file_that_does_not_import_says_where(tmp_path):
    no_colon = "def average_gradients(model, world_size)\n    pass\n"
    fails_with(data_parallel.check_average_gradients, answer(tmp_path, no_colon),
               "ex_worker.py, line 7: expected ':'")
    fails_with(data_parallel.check_average_gradients, answer(tmp_path, "x = undefined_name\n"),
               "ex_worker.py, line 7, on import: NameError")


JOB_FLOPS = solution("13", "q3")


def test_ch13_solution_passes(tmp_path):
    path = answer(tmp_path, JOB_FLOPS)
    transformer_flops.check_job_flops(path)
    transformer_flops.check_job_flops(path, shares=(3, 1, 2), n_layer=3, d_model=32, block=16, seed=4)


def test_ch13_equal_shares_are_refused_by_the_grader(tmp_path):
    """Equal shares would let one rank's count times the world size pass for the job's."""
    with pytest.raises(ValueError, match="unequal shares"):
        transformer_flops.check_job_flops(answer(tmp_path, JOB_FLOPS), shares=(2, 2))


@pytest.mark.parametrize("body, hint", [
    ("def job_flops(model, idx):\n    ...\n", "it still does nothing"),
])
def test_ch13_stub_and_classic_mistakes_get_their_hint(tmp_path, body, hint):
    fails_with(transformer_flops.check_job_flops, answer(tmp_path, body), hint, d_model=100, block=31, shares=(5, 9))


RING_ATTENTION = solution("14", "q3")


def test_ch14_solutions_pass(tmp_path):
    path = answer(tmp_path, RING_ATTENTION)
    context_parallel.check_ring_forward(path)
    context_parallel.check_ring_forward(path, world_size=4, shape=(1, 2, 24, 8), seed=3)
    context_parallel.check_merge(solution_function("14", "q1", "merge"))
    for t in (1, 2, 3, 4, 8):
        context_parallel.check_zigzag(solution_function("14", "q2", "zigzag"), t)


@pytest.mark.parametrize("body, hint", [   # the classic mistakes: context_parallel.MUTANTS (tests/test_mutants.py)
    ("def ring_forward(q, k, v):\n    ...\n", "it still does nothing"),
    (planted(RING_ATTENTION, "return out\n", "return out[..., :1, :]\n"), "must return a tensor shaped like q"),
])
def test_ch14_ring_stub_and_wrong_shape_get_their_hint(tmp_path, body, hint):
    fails_with(context_parallel.check_ring_forward, answer(tmp_path, body), hint, world_size=3, shape=(1, 2, 12, 4))


def test_ch14_merge_and_zigzag_stubs_get_their_hint():   # the classic mistakes: context_parallel.MUTANTS
    def check(function, hint, *args):
        with pytest.raises(AssertionError, match=hint):
            function(*args)

    check(context_parallel.check_merge, "return a tuple", lambda oa, la, ob, lb: None)
    check(context_parallel.check_merge, "merge raised ZeroDivisionError", lambda oa, la, ob, lb: 1 / 0)
    check(context_parallel.check_zigzag, "zigzag returned nothing", lambda r, w: None, 2)
    check(context_parallel.check_zigzag, "the same chunks for every t", lambda r, w: [r, r + 1], 4)


DISPATCH = solution("15", "q3")


keep_within_capacity = solution_function("15", "q1", "keep_within_capacity")
load_balancing_loss = solution_function("15", "q2", "load_balancing_loss")


def test_ch15_solutions_pass(tmp_path):
    path = answer(tmp_path, DISPATCH)
    expert_parallel.check_expert_parallel(path)
    expert_parallel.check_expert_parallel(path, world_size=4, n_expert=8, n=10, seed=2)
    expert_parallel.check_expert_parallel(path, world_size=3, n_expert=6, n=9, seed=5, skew=True)   # a rank: none
    expert_parallel.check_keep(keep_within_capacity)
    expert_parallel.check_keep(keep_within_capacity, n=200, n_expert=8, capacity=20, seed=4)
    expert_parallel.check_balancing_loss(load_balancing_loss)
    expert_parallel.check_balancing_loss(load_balancing_loss, n=64, n_expert=8, top_k=1, seed=3)


@pytest.mark.parametrize("body, hint", [   # the classic mistakes: expert_parallel.MUTANTS (tests/test_mutants.py)
    ("def expert_parallel(tokens, expert, local_experts):\n    ...\n", "it still does nothing"),
])
def test_ch15_dispatch_stub_gets_its_hint(tmp_path, body, hint):
    fails_with(expert_parallel.check_expert_parallel, answer(tmp_path, body), hint, world_size=3, n_expert=6, n=9,
               seed=5, skew=True)


def test_ch15_capacity_and_loss_stubs_get_their_hint():   # the classic mistakes: expert_parallel.MUTANTS
    def check(function, hint, answer):
        with pytest.raises(AssertionError, match=hint):
            function(answer)

    check(expert_parallel.check_keep, "returned nothing", lambda e, n, c: None)
    check(expert_parallel.check_keep, "raised IndexError", lambda e, n, c: e[len(e)])
    check(expert_parallel.check_balancing_loss, "returned nothing", lambda p, e, n: None)
    check(expert_parallel.check_balancing_loss, "return a scalar tensor",
          lambda p, e, n: load_balancing_loss(p, e, n).item())


LAYOUT_2D = solution("16", "q3")


def test_ch16_solutions_pass(tmp_path):
    from course_utils import planner

    composing_parallelism.check_build_2d(answer(tmp_path, LAYOUT_2D))
    tp_all_reduces = solution_function("16", "q2", "tp_all_reduces")
    composing_parallelism.check_tp_all_reduces(tp_all_reduces, [(2, 1, 2, True), (3, 3, 1, False), (4, 3, 1, False)])
    model = planner.GPTConfig(vocab_size=1000, block_size=512, n_layer=8, n_head=8, d_model=512)
    ranked = planner.plan(model, 32, planner.Cluster(gpus=8, **planner.H100))
    for limit in (1, 5, 80):
        composing_parallelism.check_pick(solution_function("16", "q1", "pick"), ranked, limit)


# --- grading lives beside the library ------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]


def imports_of_grading(folder: Path) -> list[str]:
    """``file:line`` of every import of ``grading`` (or a module of it) in the Python files under ``folder``."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [node.args[0].value] if isinstance(node, ast.Call) and node.args
                     and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
                     and getattr(node.func, "attr", getattr(node.func, "id", "")) in ("import_module", "__import__")
                     else [])
            if any(name == "grading" or name.startswith("grading.") for name in names):
                found.append(f"{path.relative_to(folder.parent)}:{node.lineno}")
    return found


def test_course_utils_never_imports_grading(tmp_path):
    """The library is what learners read; the graders use it, never the other way round."""
    assert not imports_of_grading(ROOT / "course_utils"), (
        f"course_utils imports grading at {imports_of_grading(ROOT / 'course_utils')}: move what it needs into "
        "course_utils, or the code that needs grading out of it")
    planted_import = tmp_path / "course_utils"   # the scan finds each way of importing it
    planted_import.mkdir()
    (planted_import / "a.py").write_text("import grading.ranks\nfrom grading import feedback\n"
                                         "import importlib\nimportlib.import_module('grading.ddp')\n"
                                         "from .grading import x\nimport gradings\n")
    assert imports_of_grading(planted_import) == ["course_utils/a.py:1", "course_utils/a.py:2", "course_utils/a.py:4"]


def test_the_table_of_grading_names_each_notebooks_grader():
    """grading/__init__.py's table (chapter -> module) is the module each exercise notebook imports."""
    import re

    import mutants

    import grading

    table = dict(re.findall(r"^(\d\d)\s+``(\w+)``", grading.__doc__, re.MULTILINE))
    chapters = sorted(path.stem[:2] for path in mutants.EXERCISES.glob("[0-9]*.ipynb"))
    assert sorted(table) == chapters
    for chapter in chapters:
        assert mutants.grader_module(chapter) == f"grading.{table[chapter]}", chapter


def test_feedback_shows_the_students_line_from_a_file_inside_the_course_folder():
    """Only course_utils/ and grading/ are the course's code: a student's file in exercises/work/ (inside the
    repository, like them) is theirs, and the feedback quotes its line."""
    work = ROOT / "exercises" / "work"
    work.mkdir(exist_ok=True)
    path = work / "test_autograde_student_line.py"
    path.write_text("def speedup(p, n):\n    return 1 / (1 - p)\n")
    try:
        speedup = load_student(path).speedup
        with pytest.raises(AssertionError, match=r"ZeroDivisionError.*in your code, line 2: `return 1 / \(1 - p\)`"):
            feedback.call_student(speedup, "speedup", 1.0, 8)
    finally:
        path.unlink()
