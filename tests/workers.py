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
