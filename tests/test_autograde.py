"""course_utils.autograde: every solution passes, every untouched stub and planted classic mistake
fails with its specific hint (no traceback from inside torch), and a hanging or crashing answer
leaves no process behind."""
import textwrap

import pytest
import torch
import torch.nn.functional as F

from course_utils.autograde import ch02, ch03, ch04, ch09, ch10, ch11, ch12, ch13, ch14, ch15, ch16
from course_utils.scripts import descendants

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
    (AVERAGE_ONE_BUCKET.replace("    flat /= world_size\n", ""), "forgot to divide by world size"),
    (AVERAGE_ONE_BUCKET.replace("g.copy_(flat[offset:offset + g.numel()].view_as(g))",
                                "g = flat[offset:offset + g.numel()]"), "the result never went back"),
    (AVERAGE_ONE_BUCKET.replace("    dist.all_reduce(flat)\n", ""), "never met"),
    ("def average_gradients(model, world_size):\n"
     "    for p in model.parameters():\n        dist.all_reduce(p.grad)\n        p.grad /= world_size\n",
     "called dist.all_reduce 4 times"),
    ("def average_gradients(model, world_size):\n"
     "    for p in list(model.parameters())[::2]:\n        dist.all_reduce(p.grad)\n        p.grad /= world_size\n",
     "0.bias, 2.bias still hold this rank's own"),
    (AVERAGE_ONE_BUCKET.replace("flat /= world_size", "flat /= world_size\n    flat /= world_size"),
     "divided by world_size twice"),
])
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


@pytest.mark.parametrize("body, hint, sizes", [
    ("def ring_all_reduce(tensor):\n    ...\n", "still this rank's own input", {}),
    (RING.split("    for step in range(world - 1):\n        sending")[0], "The all-gather is missing", {}),
    ("def ring_all_reduce(tensor):\n    dist.all_reduce(tensor)\n", "you called dist.all_reduce", {}),
    (RING.replace("chunks[(rank + 1 - step) % world], right", "chunks[(rank - step) % world], right"),
     "of another size", {}),
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
    (DDP_TRAIN.replace("        sampler.set_epoch(epoch)\n", ""), "sampler epoch not set"),
    (DDP_TRAIN.replace("batch_size=batch_size, sampler=sampler", "batch_size=batch_size"), "drew all 32 samples"),
    (DDP_TRAIN.replace("contextlib.nullcontext() if last else ddp_model.no_sync()", "contextlib.nullcontext()"),
     "after every micro-batch"),
    (DDP_TRAIN.replace(" / accumulate\n", "\n"), "summed over the 2 micro-batches"),
    (DDP_TRAIN.replace("            if last:\n", "            if True:\n"), "once per micro-batch"),
    (DDP_TRAIN.replace("                optimizer.zero_grad()\n", ""), "zero the gradients after each"),
])
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


@pytest.mark.parametrize("body, hint", [
    ("def pipeline_step(stage, x, target, act_shape):\n    ...\n", "it still does nothing"),
    (PIPELINE.replace("    act.requires_grad_()\n", ""), "requires_grad_()"),
    (PIPELINE.replace("        act.backward(grad)\n", ""), "stage 0 (rank 0) got no gradient"),
    (PIPELINE.replace("act.backward(grad)", "act.sum().backward()"), "not from a loss of its own"),
    (PIPELINE.replace("    return loss.item()\n", "    return loss\n"),
     "return None on rank 0 and the loss as a float"),
    (PIPELINE.replace("dist.recv(act, src=0)", "dist.recv(act, src=0)\n    dist.recv(act, src=0)"),
     "waited for each other"),
])
def test_ch09_stub_and_classic_mistakes_get_their_hint(tmp_path, body, hint):
    fails_with(ch09.check_pipeline_step, answer(tmp_path, body), hint)


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


@pytest.mark.parametrize("body, hint", [
    ("def amp_step(ddp_model, optimizer, scaler, x, y):\n    ...\n", "it still does nothing"),
    (AMP.replace("scaler.step(optimizer)", "optimizer.step()"), "Step through the scaler"),
    (AMP.replace("    scaler.update()\n", ""), "call scaler.update() after every scaler.step"),
    (AMP.replace("scaler.scale(loss).backward()", "loss.backward()"), "Scale the loss before backward"),
    (AMP.replace("torch.float16)", "torch.float16, enabled=False)"), "the forward ran in float32"),
    (AMP.replace("    optimizer.zero_grad()\n", ""), "the inf gradients were never cleared"),
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
    (FSDP.replace("            fully_shard(layer, mesh=mesh)\n", "            pass\n"),
     "wrap every layer before the root"),
    (FSDP.replace("    fully_shard(model, mesh=mesh)\n", ""), "the model itself is not"),
    (FSDP.replace("p.to_local().numel()", "p.numel()"), "whose numel() is its global size"),
    (FSDP.replace(" * p.element_size()", ""), "a count of numbers, not bytes"),
])
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
DCP_APPLY = ('    dcp.load(state, checkpoint_id=folder)\n'
             '    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])\n')


def test_ch11_solution_passes(tmp_path):
    path = answer(tmp_path, DCP)
    ch11.check_checkpoint(path)
    ch11.check_checkpoint(path, world_size=3, sizes=(3, 6, 2), n=24, steps=7, save_at=4, seed=5)


@pytest.mark.parametrize("body, hint", [
    ("def save(model, optimizer, step, folder):\n    ...\n\n\ndef load(model, optimizer, folder):\n    ...\n",
     "it still does nothing"),
    (DCP.replace(DCP_APPLY, '    state["model"] = {k: v.clone() for k, v in model_state.items()}\n'
                            '    dcp.load(state, checkpoint_id=folder)\n'), "does not hold the saved weights"),
    (DCP.replace('"optim": optim_state, ', '').replace(DCP_APPLY, '    dcp.load(state, checkpoint_id=folder)\n'),
     "Adam's moments and step counts are not the saved ones"),
    (DCP.replace('    return state["step"]\n', '    return 0\n'), "load returned 0"),
])
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
    ch13.check_job_flops(path, world_size=3, n_layer=3, d_model=32, block=16, batch=6, seed=4)


@pytest.mark.parametrize("body, hint", [
    ("def job_flops(model, idx):\n    ...\n", "it still does nothing"),
    (JOB_FLOPS.replace("    dist.all_reduce(count)\n", ""), "that is one rank's share"),
    (JOB_FLOPS.replace("        loss.backward()\n", "        pass\n"), "the forward pass only"),
    (JOB_FLOPS.replace("accounting.count_flops(step)", "flops(step)") + """
def flops(fn):
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()
""", "attention's own matmuls are missing"),
    (JOB_FLOPS.replace("dtype=torch.int64", "dtype=torch.float32"), "24-bit significand"),
])
def test_ch13_stub_and_classic_mistakes_get_their_hint(tmp_path, body, hint):
    fails_with(ch13.check_job_flops, answer(tmp_path, body), hint, d_model=100, block=31, batch=14)


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


@pytest.mark.parametrize("body, hint", [
    ("def ring_forward(q, k, v):\n    ...\n", "it still does nothing"),
    (RING_ATTENTION.replace("for step in range(1, world_size):", "for step in range(1, 1):"),
     "attention to this rank's own chunk only"),
    (RING_ATTENTION.replace("        if (rank - step) % world_size < rank:\n", "        if True:\n"),
     "the chunks of later ranks are merged in"),
    (RING_ATTENTION.replace("        if (rank - step) % world_size < rank:\n", "        if True:\n")
     .replace("causal=True", "causal=False"), "attention without the causal mask"),
    (RING_ATTENTION.replace("block_attention(q, k, v, causal=True)", "block_attention(q, k, v, causal=False)"),
     "the own chunk needs the causal mask"),
    (RING_ATTENTION.replace("return out", "return out[..., :1, :]"), "must return a tensor shaped like q"),
])
def test_ch14_ring_mistakes_get_their_hint(tmp_path, body, hint):
    fails_with(ch14.check_ring_forward, answer(tmp_path, body), hint, world_size=3, shape=(1, 2, 12, 4))


def test_ch14_merge_and_zigzag_mistakes_get_their_hint():
    def check(function, hint, *args):
        with pytest.raises(AssertionError, match=hint):
            function(*args)

    check(ch14.check_merge, "return a tuple", lambda oa, la, ob, lb: None)
    check(ch14.check_merge, "use torch.logaddexp", lambda oa, la, ob, lb: ((oa + ob) / 2, torch.maximum(la, lb)))
    check(ch14.check_merge, "plain average", lambda oa, la, ob, lb: ((oa + ob) / 2, torch.logaddexp(la, lb)))
    check(ch14.check_merge, "normalised over its own block", lambda oa, la, ob, lb: (oa + ob, torch.logaddexp(la, lb)))
    check(ch14.check_zigzag, "zigzag returned nothing", lambda r, w: None, 2)
    check(ch14.check_zigzag, "exactly one rank", lambda r, w: [r, r + 1], 4)
    check(ch14.check_zigzag, "contiguous layout", lambda r, w: [2 * r, 2 * r + 1], 4)


DISPATCH = """
def expert_parallel(tokens, expert, local_experts):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    per_rank = len(local_experts)
    order = torch.argsort(expert, stable=True)
    per_expert = torch.bincount(expert, minlength=per_rank * world_size)
    incoming = torch.empty_like(per_expert)
    dist.all_to_all_single(incoming, per_expert)
    incoming = incoming.view(world_size, per_rank)
    send, recv = per_expert.view(world_size, per_rank).sum(1).tolist(), incoming.sum(1).tolist()
    rows = tokens.new_empty(sum(recv), tokens.shape[1])
    dist.all_to_all_single(rows, tokens[order].contiguous(), recv, send)
    local = torch.arange(per_rank).repeat(world_size).repeat_interleave(incoming.reshape(-1))
    done = torch.empty_like(rows)
    for j, layer in enumerate(local_experts):
        done[local == j] = layer(rows[local == j])
    back = torch.empty_like(tokens)
    dist.all_to_all_single(back, done, send, recv)
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


@pytest.mark.parametrize("body, hint", [
    ("def expert_parallel(tokens, expert, local_experts):\n    ...\n", "it still does nothing"),
    ("def expert_parallel(tokens, expert, local_experts):\n"
     "    return torch.stack([local_experts[e % len(local_experts)](x) for x, e in zip(tokens, expert.tolist())])\n",
     "that applies this rank's own experts"),
    (DISPATCH.replace("out[order] = back", "out = back"), "the right outputs in the wrong rows"),
    (DISPATCH.replace("all_to_all_single(back, done, send, recv)", "all_to_all_single(back, done, recv, send)"),
     "on the way back the two lists swap places"),
    (DISPATCH.replace("dist.all_to_all_single(incoming, per_expert)\n", "incoming = per_expert.clone()\n"),
     "exchanging the per-expert counts"),
])
def test_ch15_dispatch_mistakes_get_their_hint(tmp_path, body, hint):
    fails_with(ch15.check_expert_parallel, answer(tmp_path, body), hint, world_size=3, n_expert=6, n=9, seed=5,
               skew=True)


def test_ch15_capacity_and_loss_mistakes_get_their_hint():
    def check(function, hint, answer):
        with pytest.raises(AssertionError, match=hint):
            function(answer)

    check(ch15.check_keep, "returned nothing", lambda e, n, c: None)
    check(ch15.check_keep, "keeps the last", lambda e, n, c: keep_within_capacity(e.flip(0), n, c).flip(0))
    check(ch15.check_keep, "not capacity \\+ 1", lambda e, n, c: keep_within_capacity(e, n, c + 1))
    check(ch15.check_keep, "counts all assignments together", lambda e, n, c: torch.arange(len(e)) < c)
    check(ch15.check_balancing_loss, "missing the factor E", lambda p, e, n: load_balancing_loss(p, e, n) / n)
    check(ch15.check_balancing_loss, "a fraction of the assignments",
          lambda p, e, n: load_balancing_loss(p, e, n) * len(e))
    check(ch15.check_balancing_loss, "not its mean probability", lambda p, e, n: n * (p.mean(0) ** 2).sum())
    check(ch15.check_balancing_loss, "not their sum",
          lambda p, e, n: n * (torch.bincount(e, minlength=n) / len(e) * p.sum(0)).sum())
    check(ch15.check_balancing_loss, "no gradient", lambda p, e, n: load_balancing_loss(p.detach(), e, n))


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
    ch16.check_tp_all_reduces(lambda n_layer, pp, m: 4 * (n_layer // pp) * m)
    model = planner.Transformer(layers=8, hidden=512, heads=8, seq=512, vocab=1000)
    ranked = planner.plan(model, 32, planner.Cluster(gpus=8, **planner.H100))
    for limit in (1, 5, 80):
        ch16.check_pick(lambda r, gb: max([x for x in r if x.reason is None and x.memory_gb <= gb],
                                          key=lambda x: x.mfu, default=None), ranked, limit)


@pytest.mark.parametrize("body, hint", [
    ("def build_2d(model, mesh):\n    ...\n", "it still does nothing"),
    (LAYOUT_2D.replace("""    for block in model.blocks:
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
""", ""), "nothing averaged the gradients"),
    (LAYOUT_2D.replace('"tp"', '"swap"').replace('"dp"', '"tp"').replace('"swap"', '"dp"'), "dimensions are swapped"),
])
def test_ch16_layout_mistakes_get_their_hint(tmp_path, body, hint):
    fails_with(ch16.check_build_2d, answer(tmp_path, body), hint)


def test_ch16_pick_and_count_mistakes_get_their_hint():
    from course_utils import planner

    model = planner.Transformer(layers=8, hidden=512, heads=8, seq=512, vocab=1000)
    ranked = planner.plan(model, 32, planner.Cluster(gpus=8, **planner.H100))
    feasible = sorted(x.memory_gb for x in ranked if x.reason is None)
    limit = feasible[len(feasible) // 2]            # some layouts fit under it, some do not
    with pytest.raises(AssertionError, match="cannot run"):
        ch16.check_pick(lambda r, gb: next(x for x in r if x.reason is not None), ranked, limit)
    with pytest.raises(AssertionError, match="over the .* GB limit"):
        ch16.check_pick(lambda r, gb: next(x for x in r if x.reason is None and x.memory_gb > gb), ranked, limit)
    with pytest.raises(AssertionError, match="a faster layout fits"):
        ch16.check_pick(lambda r, gb: [x for x in r if x.reason is None and x.memory_gb <= gb][-1], ranked, limit)
    with pytest.raises(AssertionError, match="returned None"):
        ch16.check_pick(lambda r, gb: None, ranked, limit)
    for wrong, hint in ((lambda n, p, m: 2 * (n // p) * m, "forward only"), (lambda n, p, m: 4 * n * m, "n_layer / pp"),
                        (lambda n, p, m: 4 * (n // p), "every microbatch"), (lambda n, p, m: None, "returned nothing")):
        with pytest.raises(AssertionError, match=hint):
            ch16.check_tp_all_reduces(wrong)
