"""Train an MLP on the digits with DistributedDataParallel — the script to launch with torchrun.

    torchrun --standalone --nproc-per-node=2 recipes/train_ddp.py --epochs 3
    torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d --rdzv-endpoint=HEAD:29500 \
             --rdzv-id=JOB recipes/train_ddp.py            # on every node (see slurm/, kubernetes/)

Uses NCCL with one GPU per process when every process on the node has its own GPU, gloo on the CPU
otherwise (``course_utils.placement.local_device``; ``COURSE_PROFILE=cpu`` forces the CPU). Every process
group has a timeout; the data order is seeded (DistributedSampler + set_epoch); only rank 0 logs.
Rank 0 prints one ``RESULT {json}`` line per epoch and, with ``--save``, writes the final
``state_dict`` (CPU tensors) there.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import timedelta


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32, help="samples per process per step")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout-s", type=float, default=60.0, help="process-group timeout (seconds)")
    p.add_argument("--save", default="", help="path for rank 0 to save the final state_dict")
    args = p.parse_args(argv)
    if args.epochs < 1 or args.batch_size < 1 or args.lr <= 0 or args.timeout_s <= 0:
        p.error("--epochs and --batch-size must be >= 1, --lr and --timeout-s > 0")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        sys.exit("train_ddp.py is a distributed script: launch it with torchrun, e.g.\n"
                 "  torchrun --standalone --nproc-per-node=2 recipes/train_ddp.py")
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    from course_utils import data, models, placement

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    # nccl with its own GPU when every process on this node has one, else gloo on the CPU
    backend, device = placement.local_device(local_rank, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    dist.init_process_group(backend, timeout=timedelta(seconds=args.timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        X, y, X_test, y_test = data.digits(seed=args.seed)
        train = TensorDataset(torch.from_numpy(X), torch.from_numpy(y))
        sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=args.seed,
                                     drop_last=True)
        loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler, drop_last=True)
        model = DDP(models.mlp([64, args.hidden, 10], seed=args.seed).to(device),
                    device_ids=[local_rank] if device.type == "cuda" else None)
        opt = torch.optim.SGD(model.parameters(), lr=args.lr)
        if rank == 0:
            print(f"world size {world}, backend {backend}, {len(loader)} steps/epoch of "
                  f"{args.batch_size}x{world} samples", flush=True)
        for epoch in range(args.epochs):
            sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
            total = torch.zeros(2, device=device)
            for xb, yb in loader:
                xb, yb = xb.to(device), yb.to(device)
                loss = torch.nn.functional.cross_entropy(model(xb), yb)
                opt.zero_grad()
                loss.backward()   # DDP all-reduces (averages) the gradients here
                opt.step()
                total += torch.stack([loss.detach() * len(yb), torch.tensor(float(len(yb)), device=device)])
            dist.all_reduce(total)  # mean training loss over all ranks
            with torch.no_grad():
                acc = (model(torch.from_numpy(X_test).to(device)).argmax(1).cpu() == torch.from_numpy(y_test))
            if rank == 0:
                print("RESULT " + json.dumps({"epoch": epoch, "world_size": world, "backend": backend,
                                              "loss": round((total[0] / total[1]).item(), 3),
                                              "test_accuracy": round(acc.float().mean().item(), 4)}), flush=True)
        if rank == 0 and args.save:
            torch.save({k: v.cpu() for k, v in model.module.state_dict().items()}, args.save)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
