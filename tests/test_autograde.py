"""grading (chapter NN's grader imported as chNN): every solution passes, every untouched stub and
planted classic mistake fails with its specific hint (no traceback from inside torch), and a hanging or crashing answer
leaves no process behind."""
import textwrap

import pytest
import torch
import torch.nn.functional as F

from course_utils.scripts import descendants
from grading import checkpointing as ch11
from grading import composing_parallelism as ch16
from grading import context_parallel as ch14
from grading import data_parallel as ch02
from grading import ddp as ch03
from grading import expert_parallel as ch15
from grading import mixed_precision as ch04
from grading import model_parallel as ch09
from grading import performance as ch12
from grading import sharded_data_parallel as ch10
from grading import transformer_flops as ch13

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


AVERAGE_ONE_BUCKET = """
def average_gradients(model, world_size):
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.flatten() for g in grads])
    dist.all_reduce(flat)
    flat /= world_size
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
"""


def test_ch02_solution_passes_on_2_and_3_ranks(tmp_path):
    path = answer(tmp_path, AVERAGE_ONE_BUCKET)
    ch02.check_average_gradients(path)
    ch02.check_average_gradients(path, world_size=3, sizes=(5, 7, 3, 1), n=24, seed=4)


@pytest.mark.parametrize("body, hint", [
    ("def average_gradients(model, world_size):\n    ...\n", "still does nothing"),
])   # the classic mistakes: ch02.MUTANTS["q4"], run by tests/test_mutants.py
def test_ch02_stub_and_classic_mistakes_get_their_hint(tmp_path, body, hint):
    fails_with(ch02.check_average_gradients, answer(tmp_path, body), hint)


def test_a_hanging_or_crashing_answer_fails_in_time_and_leaves_no_process(tmp_path):
    hang = answer(tmp_path, "def average_gradients(model, world_size):\n"
                            "    if dist.get_rank() == 0:\n        time.sleep(60)\n"
                            "    dist.all_reduce(torch.zeros(1))\n", "hang.py")
    print(fails_with(ch02.check_average_gradients, hang, "waited for each other", "hang.py, line"))
    crash = answer(tmp_path, "import os\n\ndef average_gradients(model, world_size):\n"
                             "    if dist.get_rank() == 1:\n        os._exit(3)\n", "crash.py")
    print(fails_with(ch02.check_average_gradients, crash, "rank 1"))
    assert not [cmd for cmd in descendants().values() if "forkserver" not in cmd and "resource_tracker" not in cmd]


def test_a_missing_file_or_function_says_what_to_do(tmp_path):
    fails_with(ch02.check_average_gradients, str(tmp_path / "nope.py"), "run the %%writefile cell")
    fails_with(ch02.check_average_gradients, answer(tmp_path, "x = 1\n"), "must define a function `average_gradients`")


RING = """
def ring_all_reduce(tensor):
    rank, world = dist.get_rank(), dist.get_world_size()
    chunks = list(tensor.view(-1).tensor_split(world))
    right, left = (rank + 1) % world, (rank - 1) % world
    for step in range(world - 1):
        mine, theirs = chunks[(rank - step) % world], chunks[(rank - step - 1) % world]
        buffer = torch.empty_like(theirs)
        sending = dist.isend(mine, right)
        dist.recv(buffer, left)
        sending.wait()
        theirs += buffer
    for step in range(world - 1):
        sending = dist.isend(chunks[(rank + 1 - step) % world], right)
        dist.recv(chunks[(rank - step) % world], left)
        sending.wait()
"""


def test_ch12_ring_solution_passes_on_4_ranks_and_3_ranks_with_uneven_chunks(tmp_path):
    path = answer(tmp_path, RING)
    ch12.check_ring_all_reduce(path)
    ch12.check_ring_all_reduce(path, world_size=3, numel=11, seed=5)


def test_ch12_a_ring_of_batched_p2p_ops_passes_too(tmp_path):
    """The harness records P2POp/batch_isend_irecv messages without breaking them (P2POp checks its op)."""
    batched = RING.replace("        sending = dist.isend(mine, right)\n        dist.recv(buffer, left)\n"
                           "        sending.wait()\n",
                           "        for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, right),\n"
                           "                                            dist.P2POp(dist.irecv, buffer, left)]):\n"
                           "            work.wait()\n")
    assert batched != RING
    ch12.check_ring_all_reduce(answer(tmp_path, batched), world_size=3, numel=11, seed=5)


@pytest.mark.parametrize("body, hint, sizes", [
    ("def ring_all_reduce(tensor):\n    ...\n", "still this rank's own input", {}),
    (RING.replace("dist.recv(chunks[(rank - step) % world], left)", "dist.recv(chunks[(rank + step) % world], left)"),
     "hold the full sum but the others do not", {"numel": 8}),   # equal chunks: no size mismatch
])
def test_ch12_stub_and_classic_mistakes_get_their_hint(tmp_path, body, hint, sizes):
    fails_with(ch12.check_ring_all_reduce, answer(tmp_path, body), hint, **sizes)


DDP_TRAIN = """
import contextlib
from torch.utils.data import DataLoader, DistributedSampler


def train(ddp_model, optimizer, dataset, *, epochs, batch_size, accumulate, seed):
    sampler = DistributedSampler(dataset, shuffle=True, seed=seed)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(loader):
            last = (i + 1) % accumulate == 0
            with contextlib.nullcontext() if last else ddp_model.no_sync():
                loss = torch.nn.functional.mse_loss(ddp_model(x), y) / accumulate
                loss.backward()
            if last:
                optimizer.step()
                optimizer.zero_grad()
"""


def test_ch03_solution_passes(tmp_path):
    path = answer(tmp_path, DDP_TRAIN)
    ch03.check_ddp_training(path)
    ch03.check_ddp_training(path, world_size=3, sizes=(3, 5, 2), n=36, epochs=3, batch_size=2, accumulate=3, seed=7)


@pytest.mark.parametrize("body, hint", [
    ("def train(ddp_model, optimizer, dataset, *, epochs, batch_size, accumulate, seed):\n    ...\n",
     "train still does nothing"),
])   # the classic mistakes: ch03.MUTANTS["q3"], run by tests/test_mutants.py
def test_ch03_stub_and_classic_mistakes_get_their_hint(tmp_path, body, hint):
    fails_with(ch03.check_ddp_training, answer(tmp_path, body), hint)


PIPELINE = """
def pipeline_step(stage, x, target, act_shape):
    if dist.get_rank() == 0:
        act = stage(x)
        dist.send(act.detach(), dst=1)
        grad = torch.empty(act_shape)
        dist.recv(grad, src=1)
        act.backward(grad)
        return None
    act = torch.empty(act_shape)
    dist.recv(act, src=0)
    act.requires_grad_()
    loss = torch.nn.functional.mse_loss(stage(act), target)
    loss.backward()
    dist.send(act.grad, dst=0)
    return loss.item()
"""


def test_ch09_solution_passes(tmp_path):
    path = answer(tmp_path, PIPELINE)
    ch09.check_pipeline_step(path)
    ch09.check_pipeline_step(path, sizes=(4, 9, 7, 5, 2), batch=5, split=4, seed=3)


# planted mistakes: ch09.MUTANTS (tests/test_mutants.py); here the stub and a hang
@pytest.mark.parametrize("body, hint", [
    ("def pipeline_step(stage, x, target, act_shape):\n    ...\n", "it still does nothing"),
    (PIPELINE.replace("dist.recv(act, src=0)", "dist.recv(act, src=0)\n    dist.recv(act, src=0)"),
     "waited for each other"),
])
def test_ch09_stub_and_classic_mistakes_get_their_hint(tmp_path, body, hint):
    fails_with(ch09.check_pipeline_step, answer(tmp_path, body), hint)


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
    ch09.check_tensor_parallel_mlp(answer(tmp_path, TP_BY_HAND))
    fails_with(ch09.check_tensor_parallel_mlp, answer(tmp_path, "def tensor_parallel_mlp(mlp, mesh):\n    ...\n",
                                                      "ex_stub.py"), "tensor_parallel_mlp returned None")


AMP = """
def amp_step(ddp_model, optimizer, scaler, x, y):
    with torch.autocast(device_type=x.device.type, dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(ddp_model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    return loss.item()
"""


def test_ch04_solution_passes(tmp_path):
    path = answer(tmp_path, AMP)
    ch04.check_amp_step(path)
    ch04.check_amp_step(path, world_size=4, sizes=(5, 12, 3), batch=8, steps=7, seed=2)


# planted mistakes: ch04.MUTANTS (tests/test_mutants.py); here the stub and autocast switched off
@pytest.mark.parametrize("body, hint", [
    ("def amp_step(ddp_model, optimizer, scaler, x, y):\n    ...\n", "it still does nothing"),
    (AMP.replace("torch.float16)", "torch.float16, enabled=False)"), "the forward ran in float32"),
])
def test_ch04_stub_and_classic_mistakes_get_their_hint(tmp_path, body, hint):
    fails_with(ch04.check_amp_step, answer(tmp_path, body), hint)


FSDP = """
from torch import nn
from torch.distributed.fsdp import fully_shard


def shard_model(model, mesh):
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)


def local_bytes(model):
    return sum(p.to_local().numel() * p.element_size() for p in model.parameters())
"""


def test_ch10_solution_passes(tmp_path):
    path = answer(tmp_path, FSDP)
    ch10.check_sharding(path)
    ch10.check_sharding(path, world_size=3, sizes=(5, 9, 4), n=12, seed=3)


@pytest.mark.parametrize("body, hint", [
    ("def shard_model(model, mesh):\n    ...\n\n\ndef local_bytes(model):\n    ...\n", "still does nothing"),
])   # the classic mistakes: ch10.MUTANTS["q3"] (tests/test_mutants.py)
def test_ch10_stub_and_classic_mistakes_get_their_hint(tmp_path, body, hint):
    fails_with(ch10.check_sharding, answer(tmp_path, body), hint)


DCP = """
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict


def save(model, optimizer, step, folder):
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state, "step": step}, checkpoint_id=folder)


def load(model, optimizer, folder):
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state, "step": 0}
    dcp.load(state, checkpoint_id=folder)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return state["step"]
"""


def test_ch11_solution_passes(tmp_path):
    path = answer(tmp_path, DCP)
    ch11.check_checkpoint(path)
    ch11.check_checkpoint(path, world_size=3, sizes=(3, 6, 2), n=24, steps=7, save_at=4, seed=5)


@pytest.mark.parametrize("body, hint", [
    ("def save(model, optimizer, step, folder):\n    ...\n\n\ndef load(model, optimizer, folder):\n    ...\n",
     "it still does nothing"),
])   # the classic mistakes: ch11.MUTANTS["q3"] (tests/test_mutants.py)
def test_ch11_stub_and_classic_mistakes_get_their_hint(tmp_path, body, hint):
    fails_with(ch11.check_checkpoint, answer(tmp_path, body), hint)


def test_a_file_that_does_not_import_says_where(tmp_path):
    fails_with(ch02.check_average_gradients, answer(tmp_path, "def average_gradients(model, world_size)\n    pass\n"),
               "ex_worker.py, line 7: expected ':'")
    fails_with(ch02.check_average_gradients, answer(tmp_path, "x = undefined_name\n"),
               "ex_worker.py, line 7, on import: NameError")


JOB_FLOPS = """
from course_utils import accounting


def job_flops(model, idx):
    def step():
        _, loss = model(idx, idx)
        loss.backward()

    count = torch.tensor(accounting.count_flops(step), dtype=torch.int64)
    dist.all_reduce(count)
    return int(count)
"""


def test_ch13_solution_passes(tmp_path):
    path = answer(tmp_path, JOB_FLOPS)
    ch13.check_job_flops(path)
    ch13.check_job_flops(path, shares=(3, 1, 2), n_layer=3, d_model=32, block=16, seed=4)


def test_ch13_equal_shares_are_refused_by_the_grader(tmp_path):
    """Equal shares would let one rank's count times the world size pass for the job's."""
    with pytest.raises(ValueError, match="unequal shares"):
        ch13.check_job_flops(answer(tmp_path, JOB_FLOPS), shares=(2, 2))


@pytest.mark.parametrize("body, hint", [
    ("def job_flops(model, idx):\n    ...\n", "it still does nothing"),
])
def test_ch13_stub_and_classic_mistakes_get_their_hint(tmp_path, body, hint):
    fails_with(ch13.check_job_flops, answer(tmp_path, body), hint, d_model=100, block=31, shares=(5, 9))


RING_ATTENTION = """
def block_attention(q, k, v, causal):
    scores = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    if causal:
        scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
    lse = scores.logsumexp(-1)
    return (scores - lse[..., None]).exp() @ v, lse


def ring_forward(q, k, v):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    out, lse = block_attention(q, k, v, causal=True)
    kv = torch.stack([k, v])
    for step in range(1, world_size):
        incoming = torch.empty_like(kv)
        ops = [dist.P2POp(dist.isend, kv, (rank + 1) % world_size),
               dist.P2POp(dist.irecv, incoming, (rank - 1) % world_size)]
        for request in dist.batch_isend_irecv(ops):
            request.wait()
        kv = incoming
        if (rank - step) % world_size < rank:
            o, l = block_attention(q, kv[0], kv[1], causal=False)
            new = torch.logaddexp(lse, l)
            out = out * (lse - new).exp()[..., None] + o * (l - new).exp()[..., None]
            lse = new
    return out
"""


def test_ch14_solutions_pass(tmp_path):
    path = answer(tmp_path, RING_ATTENTION)
    ch14.check_ring_forward(path)
    ch14.check_ring_forward(path, world_size=4, shape=(1, 2, 24, 8), seed=3)

    def merge(out_a, lse_a, out_b, lse_b):
        lse = torch.logaddexp(lse_a, lse_b)
        return out_a * (lse_a - lse).exp()[..., None] + out_b * (lse_b - lse).exp()[..., None], lse

    ch14.check_merge(merge)
    for t in (1, 2, 3, 4, 8):
        ch14.check_zigzag(lambda r, w: [r, 2 * w - 1 - r], t)


@pytest.mark.parametrize("body, hint", [   # the classic mistakes: ch14.MUTANTS (tests/test_mutants.py)
    ("def ring_forward(q, k, v):\n    ...\n", "it still does nothing"),
    (RING_ATTENTION.replace("return out", "return out[..., :1, :]"), "must return a tensor shaped like q"),
])
def test_ch14_ring_stub_and_wrong_shape_get_their_hint(tmp_path, body, hint):
    fails_with(ch14.check_ring_forward, answer(tmp_path, body), hint, world_size=3, shape=(1, 2, 12, 4))


def test_ch14_merge_and_zigzag_stubs_get_their_hint():   # the classic mistakes: ch14.MUTANTS
    def check(function, hint, *args):
        with pytest.raises(AssertionError, match=hint):
            function(*args)

    check(ch14.check_merge, "return a tuple", lambda oa, la, ob, lb: None)
    check(ch14.check_merge, "merge raised ZeroDivisionError", lambda oa, la, ob, lb: 1 / 0)
    check(ch14.check_zigzag, "zigzag returned nothing", lambda r, w: None, 2)
    check(ch14.check_zigzag, "the same chunks for every t", lambda r, w: [r, r + 1], 4)


DISPATCH = """
from course_utils.expert_parallel import AllToAll


def all_to_all(rows, send, recv):
    return AllToAll.apply(rows, send, recv, None)


def expert_parallel(tokens, expert, local_experts):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    per_rank = len(local_experts)
    order = torch.argsort(expert, stable=True)
    per_expert = torch.bincount(expert, minlength=per_rank * world_size)
    incoming = torch.empty_like(per_expert)
    dist.all_to_all_single(incoming, per_expert)
    incoming = incoming.view(world_size, per_rank)
    send, recv = per_expert.view(world_size, per_rank).sum(1).tolist(), incoming.sum(1).tolist()
    rows = all_to_all(tokens[order], send, recv)
    local = torch.arange(per_rank).repeat(world_size).repeat_interleave(incoming.reshape(-1))
    done = torch.empty_like(rows)
    for j, layer in enumerate(local_experts):
        done[local == j] = layer(rows[local == j])
    back = all_to_all(done, recv, send)
    out = torch.empty_like(tokens)
    out[order] = back
    return out
"""


def keep_within_capacity(expert, n_expert, capacity):
    offered = F.one_hot(expert, n_expert)
    return (offered.cumsum(dim=0) * offered).sum(dim=-1) - 1 < capacity


def load_balancing_loss(probs, expert, n_expert):
    fraction = torch.bincount(expert, minlength=n_expert).to(probs.dtype) / len(expert)
    return n_expert * (fraction * probs.mean(dim=0)).sum()


def test_ch15_solutions_pass(tmp_path):
    path = answer(tmp_path, DISPATCH)
    ch15.check_expert_parallel(path)
    ch15.check_expert_parallel(path, world_size=4, n_expert=8, n=10, seed=2)
    ch15.check_expert_parallel(path, world_size=3, n_expert=6, n=9, seed=5, skew=True)   # a rank gets nothing
    ch15.check_keep(keep_within_capacity)
    ch15.check_keep(keep_within_capacity, n=200, n_expert=8, capacity=20, seed=4)
    ch15.check_balancing_loss(load_balancing_loss)
    ch15.check_balancing_loss(load_balancing_loss, n=64, n_expert=8, top_k=1, seed=3)


@pytest.mark.parametrize("body, hint", [   # the classic mistakes: ch15.MUTANTS (tests/test_mutants.py)
    ("def expert_parallel(tokens, expert, local_experts):\n    ...\n", "it still does nothing"),
])
def test_ch15_dispatch_stub_gets_its_hint(tmp_path, body, hint):
    fails_with(ch15.check_expert_parallel, answer(tmp_path, body), hint, world_size=3, n_expert=6, n=9, seed=5,
               skew=True)


def test_ch15_capacity_and_loss_stubs_get_their_hint():   # the classic mistakes: ch15.MUTANTS
    def check(function, hint, answer):
        with pytest.raises(AssertionError, match=hint):
            function(answer)

    check(ch15.check_keep, "returned nothing", lambda e, n, c: None)
    check(ch15.check_keep, "raised IndexError", lambda e, n, c: e[len(e)])
    check(ch15.check_balancing_loss, "returned nothing", lambda p, e, n: None)
    check(ch15.check_balancing_loss, "return a scalar tensor", lambda p, e, n: load_balancing_loss(p, e, n).item())


LAYOUT_2D = """
from torch.distributed.fsdp import fully_shard

from course_utils.tensor_parallel import parallelize_gpt


def build_2d(model, mesh):
    parallelize_gpt(model, mesh["tp"])
    for block in model.blocks:
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    return model
"""


def test_ch16_solutions_pass(tmp_path):
    from course_utils import planner

    ch16.check_build_2d(answer(tmp_path, LAYOUT_2D))
    def tp_all_reduces(n_layer, pp, microbatches, recompute):
        if n_layer % pp:
            raise ValueError("uneven stages")
        return (6 if recompute else 4) * (n_layer // pp) * microbatches

    ch16.check_tp_all_reduces(tp_all_reduces, [(2, 1, 2, True), (3, 3, 1, False), (4, 3, 1, False)])
    model = planner.Transformer(layers=8, hidden=512, heads=8, seq=512, vocab=1000)
    ranked = planner.plan(model, 32, planner.Cluster(gpus=8, **planner.H100))
    for limit in (1, 5, 80):
        ch16.check_pick(lambda r, gb: max([x for x in r if x.reason is None and x.memory_gb <= gb],
                                          key=lambda x: x.mfu, default=None), ranked, limit)
