"""Expert parallelism: a MoE layer's experts split over ranks, tokens sent to them by all-to-all.

With ``t`` ranks and ``E`` experts, rank ``r`` holds experts ``r·E/t … (r+1)·E/t − 1``; the router
(and the rest of the model) is replicated, and each rank routes its own tokens — one group of
``course_utils.moe`` (so capacity is per rank, as in GShard). A forward pass on rank ``r``:

1. route its tokens: the kept assignments, sorted by expert, so those for one rank are adjacent;
2. **dispatch**: ``all_to_all_single`` sends rank ``p`` the rows for ``p``'s experts — uneven
   splits, since the router decides how many go where (the counts are exchanged first);
3. each local expert runs on the rows it received, from every rank;
4. **combine**: the same all-to-all with the splits swapped brings every row's output home, where it
   is weighted by its gate and added to its token.

Autograd sees two :class:`AllToAll` calls; the backward of an all-to-all is the all-to-all with the
splits swapped (the gradient of each received row goes back to whoever sent it). Gradients: an
expert's arrive from every rank's tokens through the all-to-alls, so they need no all-reduce; the
replicated parameters (router, attention, embeddings) are all-reduced like data parallelism's.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from .moe import MoE, route


class AllToAll(torch.autograd.Function):
    """Rows of ``x`` (R, …) go to the ranks in ``send`` counts; returns the rows received, (sum(recv), …)."""

    @staticmethod
    def forward(ctx, x, send: list[int], recv: list[int], group):
        ctx.send, ctx.recv, ctx.group = send, recv, group
        out = x.new_empty(sum(recv), *x.shape[1:])
        dist.all_to_all_single(out, x.contiguous(), recv, send, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        back = grad.new_empty(sum(ctx.send), *grad.shape[1:])
        dist.all_to_all_single(back, grad.contiguous(), ctx.send, ctx.recv, group=ctx.group)
        return back, None, None, None


def exchange_counts(per_expert: torch.Tensor, group=None) -> torch.Tensor:
    """Every rank's count of rows per expert (E,) -> the rows this rank will receive from each rank
    for each of its local experts, (t, E/t)."""
    t = dist.get_world_size(group)
    incoming = torch.empty_like(per_expert)
    dist.all_to_all_single(incoming, per_expert.contiguous(), group=group)   # E/t counts to each rank
    return incoming.view(t, -1)


class ExpertParallelMoE(nn.Module):
    """The layer ``moe`` with only this rank's experts; the router copied. x: this rank's (B, T, d).
    ``group``: the ranks that split the experts, the expert-parallel group of the process grid
    (``course_utils.layout.expert_mesh(grid)["ep"].get_group()``, carved out of dp × cp); None: every
    rank. After each call, as ``MoE``: ``aux_loss``, ``dropped``, ``load`` (E,), and ``kept`` (E,) the
    rows this rank sent to each expert."""

    def __init__(self, moe: MoE, group=None):
        super().__init__()
        self.group, t, rank = group, dist.get_world_size(group), dist.get_rank(group)
        n_expert = len(moe.experts)
        if n_expert % t:
            raise ValueError(f"{n_expert} experts do not split evenly over {t} ranks")
        self.per_rank, self.n_expert = n_expert // t, n_expert
        self.top_k, self.capacity_factor = moe.top_k, moe.capacity_factor
        self.router = moe.router
        self.experts = nn.ModuleList(moe.experts[rank * self.per_rank:(rank + 1) * self.per_rank])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        tokens = x.reshape(-1, d)
        r = route(self.router(tokens), self.top_k, self.capacity_factor)
        per_expert = torch.bincount(r.expert, minlength=self.n_expert)
        incoming = exchange_counts(per_expert, self.group)                   # (t, E/t)
        send = per_expert.view(-1, self.per_rank).sum(dim=1).tolist()
        rows = AllToAll.apply(tokens[r.token], send, incoming.sum(dim=1).tolist(), self.group)
        local = torch.arange(self.per_rank, device=rows.device).repeat(len(incoming))   # local expert of
        local = local.repeat_interleave(incoming.reshape(-1))                            # each row received
        done = torch.zeros_like(rows)
        for j, expert in enumerate(self.experts):
            mine = (local == j).nonzero().squeeze(1)
            done = done.index_add(0, mine, expert(rows[mine]))
        back = AllToAll.apply(done, incoming.sum(dim=1).tolist(), send, self.group)
        y = torch.zeros_like(tokens).index_add(0, r.token, r.gate[:, None] * back)
        self.aux_loss, self.dropped, self.load, self.kept = r.aux_loss, r.dropped, r.load, per_expert
        return y.view(B, T, d)


def shard_experts(model: nn.Module, group=None) -> nn.Module:
    """Replace every MoE layer in ``model`` by its expert-parallel version, in place; returns it."""
    for block in getattr(model, "blocks", []):
        if isinstance(block.mlp, MoE):
            block.mlp = ExpertParallelMoE(block.mlp, group)
    return model


def is_expert_parameter(name: str) -> bool:
    """Whether the parameter called ``name`` belongs to an expert (sharded, never all-reduced)."""
    return ".experts." in name or name.startswith("experts.")


def global_state_dict(model: nn.Module, group=None) -> dict[str, torch.Tensor]:
    """``model.state_dict()`` with every local expert renamed by its global index (rank·E/t + j): the
    names the one-process model uses, so that the ranks' dictionaries merge into one."""
    rank = dist.get_rank(group)
    state = {}
    for name, value in model.state_dict().items():
        layer, experts, rest = name.partition(".experts.")
        if experts:
            j, rest = rest.split(".", 1)
            per_rank = len(model.get_submodule(layer).experts)
            name = f"{layer}{experts}{rank * per_rank + int(j)}.{rest}"
        state[name] = value
    return state
