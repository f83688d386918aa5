"""Measuring time honestly: warm up, synchronise the device, repeat, report the median.

GPU kernels run asynchronously: ``time.perf_counter()`` around a CUDA op measures only the
launch unless the device is synchronised first. :func:`time_fn` does that for you.
"""
from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .gpu_facts import GPU, largest_fitting


def synchronize(device: str = "cpu") -> None:
    """Wait until all queued work on ``device`` ("cpu", "cuda", "cuda:1", "mps") has finished."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)
    elif device == "mps":
        import torch

        torch.mps.synchronize()


@dataclass
class Timing:
    """Repeated measurements of one operation, in seconds."""

    samples: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def best(self) -> float:
        return min(self.samples)

    def __str__(self) -> str:
        return f"median {self.median * 1e3:.3f} ms (best {self.best * 1e3:.3f} ms, n={len(self.samples)})"


def time_fn(fn: Callable[[], object], *, repeats: int = 10, warmup: int = 2,
            device: str = "cpu", min_time_s: float = 0.0) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` timed calls, each synchronised.

    With ``min_time_s`` > 0, each sample loops ``fn`` until that much time passed and reports the
    time per call (for operations far shorter than the timer's resolution).
    """
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    for _ in range(warmup):
        fn()
    synchronize(device)
    samples = []
    for _ in range(repeats):
        calls, start = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            synchronize(device)
            elapsed = time.perf_counter() - start
            if elapsed >= min_time_s:
                break
        samples.append(elapsed / calls)
    return Timing(samples)


def count_allreduces(ddp_model) -> list[int]:
    """Instrument a ``DistributedDataParallel`` model: its gradient all-reduces run as before (DDP's
    default hook) and are counted. Returns a one-element list holding the count (``counter[0]``).

    A Python comm hook runs on gloo's threads: destroy the process group only after the model is
    gone and ``gc.collect()`` ran (pytorch/pytorch#56297), or the two can deadlock on the GIL.
    """
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    counter = [0]

    def counting_allreduce(state, bucket):
        counter[0] += 1
        return default_hooks.allreduce_hook(None, bucket)

    ddp_model.register_comm_hook(None, counting_allreduce)
    return counter


def record_buckets(ddp_model) -> list[dict]:
    """Instrument a ``DistributedDataParallel`` model: record each gradient bucket's all-reduce as a dict
    (``bucket`` index, ``params`` names, ``bytes``, ``start`` and ``end`` in ``time.perf_counter()``
    seconds: when DDP launched it and when its future completed, host time). Returns the list the
    records are appended to; clear it between steps. Under NCCL a future completes when the
    collective is queued on the GPU, not when it finishes: time GPU collectives with CUDA events.
    """
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    names = {id(p): n for n, p in ddp_model.module.named_parameters()}
    events: list[dict] = []

    def timed_allreduce(state, bucket):
        event = {"bucket": bucket.index(), "start": time.perf_counter(),
                 "params": [names[id(p)] for p in bucket.parameters()],
                 "bytes": bucket.buffer().numel() * bucket.buffer().element_size()}
        events.append(event)

        def done(fut):
            event["end"] = time.perf_counter()
            return fut.value()
        return default_hooks.allreduce_hook(None, bucket).then(done)

    ddp_model.register_comm_hook(None, timed_allreduce)
    return events


def heap_bytes() -> int:
    """Bytes this process has allocated on the C heap right now: glibc's ``mallinfo2`` in-use arena
    plus its mmap-ed blocks. PyTorch's CPU tensors live there, so the difference between two calls
    is what the tensors created in between hold (the allocator's own view, not the RSS).
    Linux with glibc only; elsewhere a RuntimeError says so.
    """
    import ctypes
    import ctypes.util

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                                         "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallinfo2 = libc.mallinfo2
    except (OSError, AttributeError):
        raise RuntimeError("heap_bytes needs glibc 2.33+ (mallinfo2): Linux only") from None
    mallinfo2.restype = MallInfo2
    info = mallinfo2()
    return info.uordblks + info.hblkhd


def matmul_gflops(n: int, seconds: float) -> float:
    """GFLOP/s of an ``n x n`` by ``n x n`` matmul that took ``seconds`` (2 n^3 flops)."""
    return 2 * n**3 / seconds / 1e9


def amp_step_bytes(width: int, layers: int = 4) -> int:
    """Peak bytes of chapter 04's speed table at ``width`` (batch = width): ``layers`` width x width
    Linear layers with fp32 weights and gradients and 16-bit copies under autocast (10 B/weight),
    about two fp32 activations saved per layer and sample (40 B x width^2 in all for 4 layers), and
    the three width x width matrices of the matmul timing (12 B x width^2)."""
    weights = layers * width * width
    return 10 * weights + 8 * (layers + 1) * width * width + 12 * width * width


def amp_bench_width(gpu: GPU | None, cpu_width: int = 256,
                    gpu_widths: Sequence[int] = (1024, 2048, 4096, 8192)) -> int:
    """Width of chapter 04's speed table: ``cpu_width`` without a GPU, else the largest of ``gpu_widths``
    whose :func:`amp_step_bytes` fits in half the GPU's free memory (8192, ~6 GB, on a T4 or
    larger; 4096 on an 8 GB card or a half-full one)."""
    if gpu is None:
        return cpu_width
    return largest_fitting(list(gpu_widths), amp_step_bytes, gpu)


def allreduce_worker(rank: int, world_size: int, sizes_bytes: Sequence[int], repeats: int = 10,
                     warmup: int = 3, device: str | None = None, stat: str = "median") -> list[dict]:
    """Launched worker: time ``dist.all_reduce`` for each message size (float32 tensors), on ``device``
    (default: the device ``launch.run`` gave this rank, :func:`course_utils.placement.rank_device`).

    Returns, on every rank, one row per size: bytes, seconds (each rank's ``stat`` of its samples,
    then the max over ranks, since a collective is as slow as its slowest rank), algbw and busbw in
    B/s. ``stat="best"`` (the minimum) suits a shared, noisy machine, where noise only ever adds time.
    """
    if stat not in ("median", "best"):
        raise ValueError(f"stat must be 'median' or 'best', not {stat!r}")
    import torch
    import torch.distributed as dist

    from .costmodel import bus_bandwidth
    from .placement import rank_device

    device = device or str(rank_device())
    rows = []
    for nbytes in sizes_bytes:
        x = torch.ones(max(1, int(nbytes) // 4), device=device)

        def step():
            dist.all_reduce(x)

        timing = time_fn(step, repeats=repeats, warmup=warmup, device=device)
        t = torch.tensor([timing.best if stat == "best" else timing.median], device=x.device)  # nccl: on the GPU
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        algbw, busbw = bus_bandwidth(x.numel() * 4, t.item(), world_size)
        rows.append({"bytes": x.numel() * 4, "seconds": t.item(), "algbw": algbw, "busbw": busbw})
    return rows


def ddp_step_worker(rank: int, world_size: int, sizes: Sequence[int], batch_per_rank: int, steps: int = 10,
                    warmup: int = 3, device: str = "cpu") -> dict:
    """Launched worker: median time (s) of one DDP training step of ``mlp(sizes)`` on
    ``batch_per_rank`` random samples, with the gradient all-reduce (``step_s``) and without it
    (``compute_s``: the same step inside ``no_sync()``, so DDP communicates nothing).

    Returns the max over ranks of both medians (a step is as slow as its slowest rank) and the
    gradient size in bytes. With ``world_size`` 1 there is no process group: plain training.
    """
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from .models import mlp

    torch.manual_seed(rank)
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())  # the GPU launch.run gave this rank
    model = mlp(list(sizes), seed=0).to(dev)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    if world_size > 1:
        model = DDP(model, device_ids=[dev.index] if dev.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch_per_rank, sizes[0], device=dev)
    y = torch.randint(0, sizes[-1], (batch_per_rank,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    def local_step():
        with model.no_sync() if world_size > 1 else contextlib.nullcontext():
            step()

    with_comm = time_fn(step, repeats=steps, warmup=warmup, device=str(dev)).median
    compute = time_fn(local_step, repeats=steps, warmup=warmup, device=str(dev)).median
    times = torch.tensor([with_comm, compute], device=dev)
    if world_size > 1:
        dist.all_reduce(times, op=dist.ReduceOp.MAX)
    return {"step_s": times[0].item(), "compute_s": times[1].item(), "grad_bytes": grad_bytes}

