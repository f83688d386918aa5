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


def ring_attention_vs_sdpa(rank, world_size, layout, dtype_name="float64"):
    """Ring attention on this rank's part == its part of full causal SDPA, forward and backward."""
    import torch
    import torch.nn.functional as F

    from course_utils import context_parallel as cp

    dtype = getattr(torch, dtype_name)
    g = torch.Generator().manual_seed(0)
    B, H, T, hd = 2, 3, 8 * world_size, 4
    q, k, v, dout = (torch.randn(B, H, T, hd, generator=g, dtype=dtype) for _ in range(4))
    full = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*full, is_causal=True)
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
    with Collectives() as seen:
        summed = partial.redistribute(mesh, [Replicate()]).to_local()
        whole = sharded.redistribute(mesh, [Replicate()]).to_local()
    return seen.calls, seen.counts(), seen.bytes_sent(), summed[0, 0].item(), tuple(whole.shape)
