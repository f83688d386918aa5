"""Count the collectives a piece of PyTorch code issues, and the bytes each rank sends for them.

An instrument, not a lesson: ``with Collectives() as seen: loss.backward()`` records every
functional collective DTensor issues (all-reduce, all-gather, reduce-scatter, all-to-all), the
flat all-gathers and reduce-scatters of FSDP2 (``dist.all_gather_into_tensor``,
``dist.reduce_scatter_tensor``), ``dist.all_reduce`` (HSDP's all-reduce across replicas) and
``dist.all_to_all_single`` (expert parallelism's uneven all-to-all), with the bytes of its input
on this rank and the bytes it sends. An uneven all-to-all sends exactly its input minus the rows it
keeps; for the others :func:`ring_bytes_sent` gives the bytes a rank sends under the ring
algorithm, the bandwidth-optimal one NCCL and gloo use for large messages:

- all-reduce of ``n`` bytes: ``2 (t-1)/t · n`` (a reduce-scatter, then an all-gather);
- all-gather of ``n`` bytes per rank (output ``t · n``): ``(t-1) · n``;
- reduce-scatter of ``n`` bytes (output ``n / t``): ``(t-1)/t · n``;
- all-to-all of ``n`` bytes: ``(t-1)/t · n`` when the splits are even.
"""
from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from torch.utils._python_dispatch import TorchDispatchMode

KINDS = {"all_reduce": "all_reduce", "all_gather_into_tensor": "all_gather",
         "reduce_scatter_tensor": "reduce_scatter", "all_to_all_single": "all_to_all"}

C10D_FLAT = {"_allgather_base_": "all_gather", "_reduce_scatter_base_": "reduce_scatter"}


def ring_bytes_sent(kind: str, input_bytes: int, world_size: int) -> float:
    """Bytes one rank sends for one collective on ``world_size`` ranks, ``input_bytes`` its input."""
    t = world_size
    factors = {"all_reduce": 2 * (t - 1) / t, "all_gather": t - 1, "reduce_scatter": (t - 1) / t,
               "all_to_all": (t - 1) / t}
    if kind not in factors:
        raise ValueError(f"unknown collective {kind!r}; one of {sorted(factors)}")
    return factors[kind] * input_bytes


class Call(NamedTuple):
    """One collective as this rank saw it; ``sent``: the bytes it sent to other ranks; ``group``: the
    global ranks taking part (which mesh dimension it ran on)."""
    kind: str
    input_bytes: int
    group_size: int
    sent: float
    group: tuple[int, ...] = ()


def _ranks(group) -> tuple[int, ...]:
    import torch.distributed as dist

    return tuple(dist.get_process_group_ranks(group))


class Collectives(TorchDispatchMode):
    """A dispatch mode recording a :class:`Call` for each collective (see the module's docstring)."""

    def __init__(self):
        super().__init__()
        self.calls: list[Call] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._overloadpacket.__name__
        if func.namespace == "_c10d_functional" and name in KINDS:
            from torch.distributed.distributed_c10d import _resolve_process_group

            group = _resolve_process_group(args[-1])
            n, t = args[0].numel() * args[0].element_size(), group.size()
            self.calls.append(Call(KINDS[name], n, t, ring_bytes_sent(KINDS[name], n, t), _ranks(group)))
        elif func.namespace == "c10d" and name in C10D_FLAT:           # FSDP2's flat buffers
            import torch.distributed as dist

            group = dist.ProcessGroup.unbox(args[2])
            n, t = args[1].numel() * args[1].element_size(), group.size()
            self.calls.append(Call(C10D_FLAT[name], n, t, ring_bytes_sent(C10D_FLAT[name], n, t), _ranks(group)))
        elif func.namespace == "c10d" and name == "allreduce_":       # dist.all_reduce (HSDP's replicas)
            import torch.distributed as dist

            group = dist.ProcessGroup.unbox(args[1])
            n, t = sum(x.numel() * x.element_size() for x in args[0]), group.size()
            self.calls.append(Call("all_reduce", n, t, ring_bytes_sent("all_reduce", n, t), _ranks(group)))
        elif func.namespace == "c10d" and name == "alltoall_base_":   # dist.all_to_all_single
            import torch.distributed as dist

            data, group, send_rows = args[1], dist.ProcessGroup.unbox(args[2]), args[4]
            n, t = data.numel() * data.element_size(), group.size()
            rows = sum(send_rows)   # 0: an even split ([]), or a rank with nothing to send
            kept = send_rows[group.rank()] / rows if rows else 1 / t
            self.calls.append(Call("all_to_all", n, t, n * (1 - kept) if data.numel() else 0.0, _ranks(group)))
        return func(*args, **(kwargs or {}))

    def counts(self) -> dict[str, int]:
        """How many collectives of each kind were issued."""
        return dict(Counter(call.kind for call in self.calls))

    def bytes_sent(self) -> float:
        """Bytes this rank sent to other ranks for all of them."""
        return sum(call.sent for call in self.calls)
