"""Module-level workers for the launch tests (other processes must be able to import them)."""
import os
import signal
import time


def rank_and_sum(rank, world_size):
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    print(f"hello from rank {rank}")
    return {"rank": rank, "world": world_size, "sum": t.item(), "pid": os.getpid()}


def raises(rank, world_size):
    if rank == 1:
        raise KeyError("boom in rank 1")
    import torch.distributed as dist

    dist.barrier()  # rank 0 waits here for rank 1, which never arrives
    return rank


def killed_mid_collective(rank, world_size, pid_dir):
    import torch
    import torch.distributed as dist

    open(os.path.join(pid_dir, f"{rank}.pid"), "w").write(str(os.getpid()))
    dist.barrier()
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    t = torch.ones(1 << 20)
    for _ in range(1000):
        dist.all_reduce(t)
    return rank


def hangs(rank, world_size, pid_dir):
    open(os.path.join(pid_dir, f"{rank}.pid"), "w").write(str(os.getpid()))
    if rank == 0:
        time.sleep(3600)
    return rank


def no_group(rank, world_size):
    import torch.distributed as dist

    return dist.is_initialized(), os.environ["MASTER_ADDR"], int(os.environ["WORLD_SIZE"])


def ring_attention_vs_sdpa(rank, world_size, layout, dtype_name="float64", kv_heads=3):
    """Ring attention on this rank's part == its part of full causal SDPA, forward and backward;
    ``kv_heads`` < 3: grouped-query attention (K/V at their own head count)."""
    import torch
    import torch.nn.functional as F

    from course_utils import context_parallel as cp

    dtype = getattr(torch, dtype_name)
    g = torch.Generator().manual_seed(0)
    B, H, T, hd = 2, 3, 8 * world_size, 4
    q, k, v, dout = (torch.randn(B, heads, T, hd, generator=g, dtype=dtype)
                     for heads in (H, kv_heads, kv_heads, H))
    full = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*full, is_causal=True, enable_gqa=kv_heads != H)
    ref.backward(dout)
    mine = [cp.shard(t, layout, rank, world_size, dim=2).requires_grad_() for t in (q, k, v)]
    out = cp.ring_attention(*mine, layout=layout)
    out.backward(cp.shard(dout, layout, rank, world_size, dim=2))
    part = lambda t: cp.shard(t, layout, rank, world_size, dim=2)  # noqa: E731
    errors = [(out - part(ref)).abs().max().item()]
    errors += [(m.grad - part(f.grad)).abs().max().item() for m, f in zip(mine, full)]
    return errors


def collectives_seen(rank, world_size):
    """What commcount.Collectives records for one DTensor all-reduce and one all-gather."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

    from course_utils.commcount import Collectives

    mesh = init_device_mesh("cpu", (world_size,))
    partial = DTensor.from_local(torch.ones(4, 8), mesh, [Partial()])   # 128 bytes per rank
    sharded = DTensor.from_local(torch.ones(2, 8), mesh, [Shard(0)])    # 64 bytes per rank
    send = [1, 3] if rank == 0 else [2, 2]     # rows of 8 float32 (32 bytes) for ranks 0, 1
    recv = [1, 2] if rank == 0 else [3, 2]
    rows = torch.full((sum(send), 8), float(rank))
    out = rows.new_empty(sum(recv), 8)
    with Collectives() as seen:
        summed = partial.redistribute(mesh, [Replicate()]).to_local()
        whole = sharded.redistribute(mesh, [Replicate()]).to_local()
        torch.distributed.all_to_all_single(out, rows, recv, send)
        flat = torch.empty(2 * 6)                                    # FSDP2's flat all-gather
        torch.distributed.all_gather_into_tensor(flat, torch.ones(6))  # 24 bytes per rank
        torch.distributed.reduce_scatter_tensor(torch.empty(6), torch.ones(12))   # 48 bytes in
        torch.distributed.all_reduce(torch.ones(3))                   # 12 bytes, as HSDP's replicas do
    with Collectives() as nothing_here:   # rank 0 sends no row (a rank whose tokens all went elsewhere)
        torch.distributed.all_to_all_single(rows.new_empty(1, 8), rows[:0] if rank == 0 else rows[:2],
                                            [0, 1], [0, 0] if rank == 0 else [1, 1])
    return (seen.calls, seen.counts(), seen.bytes_sent(), summed[0, 0].item(), tuple(whole.shape), out[:, 0].tolist(),
            nothing_here.calls)


def expert_parallel_vs_one_process(rank, world_size, n_expert, top_k, capacity_factor):
    """An expert-parallel MoE layer on this rank's sequences == its part of the one-process layer with
    one group per rank: outputs, input gradients, and (summed over ranks) the router's and the
    experts' gradients. Returns max |diff| and the tokens dropped here."""
    import torch
    import torch.distributed as dist

    from course_utils.expert_parallel import ExpertParallelMoE
    from course_utils.moe import MoE

    d, B, T = 8, 2 * world_size, 6
    x = torch.randn(B, T, d, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    one = MoE(d, n_expert, top_k, capacity_factor, groups=world_size, seed=3).double()
    whole = x.clone().requires_grad_()
    ref = one(whole)
    ref.pow(2).sum().backward()
    ep = ExpertParallelMoE(MoE(d, n_expert, top_k, capacity_factor, seed=3).double())
    mine = x.chunk(world_size)[rank].clone().requires_grad_()
    out = ep(mine)
    out.pow(2).sum().backward()
    errors = [(out - ref.chunk(world_size)[rank]).abs().max().item(),
              (mine.grad - whole.grad.chunk(world_size)[rank]).abs().max().item()]
    router_grad = ep.router.weight.grad.clone()
    dist.all_reduce(router_grad)                 # replicated: each rank holds its tokens' share
    errors.append((router_grad - one.router.weight.grad).abs().max().item())
    first = rank * len(ep.experts)
    for j, expert in enumerate(ep.experts):      # sharded: already complete, from every rank's tokens
        for p, q in zip(expert.parameters(), one.experts[first + j].parameters()):
            errors.append((p.grad - q.grad).abs().max().item())
    return max(errors), ep.dropped


LLAMA = dict(vocab_size=16, block_size=8, n_layer=4, n_head=4, d_model=16, n_kv_head=2, ffn_hidden=24, bias=False,
             mlp="swiglu", norm="rmsnorm", positions="rope")   # the small Llama of the parallel tests


def planted_llama_plan(planted):
    """Replace ``tensor_parallel.llama_block_plan`` in this process by a wrong one: ``"down_colwise"``
    (SwiGLU's down split by columns) or ``"kv_whole"`` (k and v left whole on every rank)."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput

    from course_utils import tensor_parallel

    right = tensor_parallel.llama_block_plan

    def wrong(sequence_parallel=False):
        plan = right(sequence_parallel)
        if planted == "down_colwise":
            plan["mlp.down"] = ColwiseParallel()
        elif planted == "kv_whole":   # and attention's input a plain tensor, so that nothing raises
            del plan["attn.k"], plan["attn.v"]
            plan["attn"] = PrepareModuleInput(input_layouts=(Replicate(), None),
                                              desired_input_layouts=(Replicate(), None), use_local_output=True)
        else:
            raise ValueError(f"unknown planted plan {planted!r}")
        return plan
    tensor_parallel.llama_block_plan = wrong


def composed_vs_one_process(rank, world_size, layout, schedule=None, n_microbatches=2, sequence_parallel=False,
                            per_block=True, steps=2, n_layer=4, llama=False, planted=None):
    """The GPT (``llama``: the Llama of :data:`LLAMA`) trained on ``layout`` (course_utils.composed) for
    ``steps`` SGD steps == one process on the same global batches. Returns (names of the parameters
    this rank holds, max |param diff| over them, (this data-parallel slice's losses, one process's) or
    None where this rank holds no last stage, the collectives of the last step by mesh dimension).
    ``planted``: a wrong tensor-parallel plan for the Llama (:func:`planted_llama_plan`)."""
    import torch
    import torch.nn.functional as F
    from torch.distributed.tensor import DTensor

    from course_utils import composed
    from course_utils.commcount import Collectives
    from course_utils.gpt import GPT, GPTConfig
    from course_utils.llama import Llama

    if planted:
        planted_llama_plan(planted)
    gpt = dict(vocab_size=16, block_size=8, n_layer=n_layer, n_head=4, d_model=16)
    config = GPTConfig(**LLAMA) if llama else GPTConfig(**gpt)
    Model = Llama if llama else GPT
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randint(16, (8, 8), generator=g), torch.randint(16, (8, 8), generator=g)) for _ in range(steps)]

    def loss_fn(logits, targets):
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    ref = Model(config, seed=1)
    opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    ref_losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = loss_fn(ref(x), y)
        loss.backward()
        opt.step()
        ref_losses.append(loss.item())

    mesh, dp_rank = composed.make_mesh(layout), layout.coords(rank)["dp"]   # losses: this dp rank's slice
    mine = composed.parallelize(Model(config, seed=1), layout, mesh, rank, schedule=schedule, loss_fn=loss_fn,
                                n_microbatches=n_microbatches, per_block=per_block, sequence_parallel=sequence_parallel)
    opt = torch.optim.SGD(mine.parameters(), lr=0.5)
    losses = []
    for x, y in batches:
        opt.zero_grad()
        with Collectives() as seen:
            loss = mine.forward_backward(*(composed.batch_slice(t, dp_rank, layout.dp) for t in (x, y)), loss_fn)
        opt.step()
        if loss is not None:
            losses.append(loss.item())
    ref_params = dict(ref.named_parameters())
    full = {n: (p.full_tensor() if isinstance(p, DTensor) else p).detach() for n, p in mine.named_parameters().items()}
    param_diff = max((full[n] - ref_params[n]).abs().max().item() for n in full)
    per_dim = {dim: [c.kind for c in calls] for dim, calls in composed.by_dimension(seen.calls, mesh).items()}
    return sorted(full), param_diff, (losses, ref_losses) if losses else None, per_dim


def llama_context_parallel_vs_one_process(rank, world_size, layout="zigzag", n_kv_head=2, true_positions=True):
    """The Llama of :data:`LLAMA` in float64 with each sequence split over the ranks (ring attention,
    q and k rotated by each rank's true positions; ``true_positions=False`` plants 0..T_local-1
    instead): loss and every parameter's gradient == one process. Returns (|loss diff|, max |grad
    diff|, {"forward", "backward": bytes this rank sent round the ring, every isend counted})."""
    import functools

    import torch
    import torch.distributed as dist

    from course_utils import context_parallel as cp
    from course_utils.llama import Llama
    from course_utils.shape import GPTConfig

    config = GPTConfig(**{**LLAMA, "n_kv_head": n_kv_head})
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randint(config.vocab_size, (2, config.block_size), generator=g) for _ in range(2))
    ref = Llama(config, seed=1).double()
    _, ref_loss = ref(x, y)
    ref_loss.backward()

    model = Llama(config, seed=1).double()
    for block in model.blocks:
        block.attn.attend = functools.partial(cp.ring_attention, layout=layout)
    mine = [cp.shard(t, layout, rank, world_size, dim=1) for t in (x, y)]
    positions = cp.positions(config.block_size, layout, rank, world_size) if true_positions else None
    sent, phase, real = {"forward": 0, "backward": 0}, ["forward"], dist.batch_isend_irecv

    def counting(ops):
        sent[phase[0]] += sum(op.tensor.numel() * op.tensor.element_size() for op in ops if op.op is dist.isend)
        return real(ops)
    dist.batch_isend_irecv = counting
    try:
        _, loss = model(*mine, positions=positions)     # the mean over this rank's tokens
        phase[0] = "backward"
        (loss / world_size).backward()                  # the sequence's mean: the ranks' average
    finally:
        dist.batch_isend_irecv = real
    for p in model.parameters():                        # every rank holds every weight: add the parts
        dist.all_reduce(p.grad)
    dist.all_reduce(loss := loss.detach() / world_size)
    ref_grads = {n: p.grad for n, p in ref.named_parameters()}
    grad_diff = max((p.grad - ref_grads[n]).abs().max().item() for n, p in model.named_parameters())
    return abs(loss.item() - ref_loss.item()), grad_diff, sent


def finishes_unevenly(rank, world_size, log_dir):
    """Rank 0 returns at once, the others after a while, without a collective between: the launcher
    must not tear rank 0's process group down before the others are done with theirs."""
    import torch.distributed as dist

    original = dist.destroy_process_group

    def destroy_and_record(*args, **kwargs):
        open(os.path.join(log_dir, f"destroyed{rank}"), "w").write(repr(time.time()))
        return original(*args, **kwargs)

    dist.destroy_process_group = destroy_and_record    # the launcher looks it up when it tears down
    if rank:
        time.sleep(1.0)
    open(os.path.join(log_dir, f"done{rank}"), "w").write(repr(time.time()))
    return rank


def mesh_groups(rank, world_size, layout):
    """This rank's group of every dimension of ``layout.make_mesh`` and ``layout.expert_mesh``
    (course_utils.layout), as sorted global ranks."""
    from course_utils.layout import expert_mesh, make_mesh

    dense, experts = make_mesh(layout), expert_mesh(layout)
    groups = {dim: sorted(dense[dim].mesh.flatten().tolist()) for dim in dense.mesh_dim_names}
    return groups | {dim: sorted(experts[dim].mesh.flatten().tolist()) for dim in ("ep", "edp")}


def parallel_on_a_layout_group(rank, world_size, layout, dim):
    """Ring attention (dim "cp") or an expert-parallel MoE layer (dim "ep") over this rank's group of
    ``layout`` (course_utils.layout's meshes), each group on its own data, == the one-process result
    for that group's data. Returns max |diff| (outputs and input gradients) and the group's ranks."""
    import torch
    import torch.nn.functional as F

    from course_utils import context_parallel as cp
    from course_utils.expert_parallel import ExpertParallelMoE
    from course_utils.layout import expert_mesh, make_mesh
    from course_utils.moe import MoE

    mesh = make_mesh(layout)[dim] if dim == "cp" else expert_mesh(layout)["ep"]
    group, size, me = mesh.get_group(), mesh.size(), mesh.get_local_rank()
    which = next(i for i, g in enumerate(layout.groups(dim)) if rank in g)       # this group's data
    g = torch.Generator().manual_seed(which)
    if dim == "cp":
        q, k, v = (torch.randn(1, 2, 4 * size, 4, generator=g, dtype=torch.float64, requires_grad=True)
                   for _ in range(3))
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        ref.pow(2).sum().backward()
        mine = [cp.shard(t.detach(), "zigzag", me, size, dim=2).requires_grad_() for t in (q, k, v)]
        out = cp.ring_attention(*mine, layout="zigzag", group=group)
        out.pow(2).sum().backward()
        errors = [(out - cp.shard(ref, "zigzag", me, size, dim=2)).abs().max().item(),
                  (mine[0].grad - cp.shard(q.grad, "zigzag", me, size, dim=2)).abs().max().item()]
    else:
        x = torch.randn(2 * size, 6, 8, generator=g, dtype=torch.float64)
        one = MoE(8, 4, 2, 1.25, groups=size, seed=3).double()
        whole = x.clone().requires_grad_()
        ref = one(whole)
        ref.pow(2).sum().backward()
        ep = ExpertParallelMoE(MoE(8, 4, 2, 1.25, seed=3).double(), group)
        mine = x.chunk(size)[me].clone().requires_grad_()
        out = ep(mine)
        out.pow(2).sum().backward()
        errors = [(out - ref.chunk(size)[me]).abs().max().item(),
                  (mine.grad - whole.grad.chunk(size)[me]).abs().max().item()]
    return max(errors), sorted(mesh.mesh.flatten().tolist())
