"""Mixture of experts, in one process: a router sends each token to ``k`` of ``E`` expert MLPs.

A MoE layer replaces a transformer block's MLP with ``E`` MLPs (the *experts*) and a *router*, a
linear layer that scores every expert for every token. Each token goes to its top ``k`` experts and
comes back as their outputs weighted by the router's probabilities (the *gates*). The layer holds
``E`` MLPs' parameters but computes only ``k`` per token: more parameters for the same FLOPs.

Two rules keep the experts' work bounded and even (Switch Transformer, Fedus et al. 2021; GShard,
Lepikhin et al. 2020):

- **capacity**: an expert takes at most ``capacity_factor · k · N / E`` of a group's ``N`` tokens;
  assignments past that are *dropped* (the token's residual stream passes on without them). Every
  token's first choice is served before any second choice, earlier tokens first;
- **load-balancing loss** ``E · Σ_i f_i · P_i``: ``f_i`` the fraction of assignments offered to
  expert ``i``, ``P_i`` its mean router probability. It is 1 when the router spreads tokens evenly
  and grows as it favours a few experts; added to the training loss, it keeps the load even.

Capacity and the loss are computed per *group* of tokens: the batch's sequences cut into ``groups``
equal parts. Under expert parallelism each rank's tokens are one group (``expert_parallel``), so a
one-process layer with ``groups = ranks`` drops exactly the tokens the ranks drop.
Shapes: x (B, T, d); a group's tokens (N, d); router logits (N, E).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


class Expert(nn.Module):
    """One expert: a transformer MLP, d_model -> hidden -> d_model."""

    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.fc = nn.Linear(d_model, hidden)
        self.proj = nn.Linear(hidden, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))


def capacity(tokens: int, n_expert: int, top_k: int, capacity_factor: float) -> int:
    """Assignments one expert accepts from a group of ``tokens``: the factor times a fair share."""
    return math.ceil(capacity_factor * top_k * tokens / n_expert)


@dataclass
class Routing:
    """Where a group's tokens go. The kept assignments, sorted by expert: ``token`` (A,) the token's
    index in the group, ``expert`` (A,), ``gate`` (A,) its weight. ``load`` (E,): assignments each
    expert was offered; ``dropped``: how many of those it turned away; ``aux_loss``: the group's
    load-balancing loss (a scalar with a gradient to the router)."""
    token: torch.Tensor
    expert: torch.Tensor
    gate: torch.Tensor
    load: torch.Tensor
    dropped: int
    aux_loss: torch.Tensor


def route(logits: torch.Tensor, top_k: int, capacity_factor: float) -> Routing:
    """Top-``k`` routing of a group's tokens with capacity, from router ``logits`` (N, E)."""
    N, E = logits.shape
    probs = logits.softmax(dim=-1)
    gate, expert = probs.topk(top_k, dim=-1)                   # (N, k) each
    if top_k > 1:
        gate = gate / gate.sum(dim=-1, keepdim=True)           # a token's k gates sum to 1
    expert, gate = expert.T.reshape(-1), gate.T.reshape(-1)    # (k·N,): all first choices first
    token = torch.arange(N, device=logits.device).repeat(top_k)
    offered = F.one_hot(expert, E)                             # (k·N, E)
    place = (offered.cumsum(dim=0) * offered).sum(dim=-1) - 1  # 0, 1, 2… in its expert's queue
    keep = place < capacity(N, E, top_k, capacity_factor)
    load = offered.sum(dim=0)
    aux_loss = E * (load / (top_k * N) * probs.mean(dim=0)).sum()
    order = torch.sort(expert[keep], stable=True).indices      # by expert, queue order within
    return Routing(token[keep][order], expert[keep][order], gate[keep][order], load,
                   int((~keep).sum()), aux_loss)


class MoE(nn.Module):
    """A MoE layer: ``n_expert`` experts of ``hidden`` units, top-``top_k`` routing with capacity.
    x (B, T, d) -> (B, T, d); after each call ``aux_loss`` (mean over groups), ``dropped`` and
    ``load`` (E,) (summed over groups) describe the routing it did."""

    def __init__(self, d_model: int, n_expert: int, top_k: int = 2, capacity_factor: float = 1.25,
                 hidden: int | None = None, groups: int = 1, seed: int = 0):
        super().__init__()
        if not 1 <= top_k <= n_expert:
            raise ValueError(f"top_k must be between 1 and n_expert={n_expert}, got {top_k}")
        if capacity_factor <= 0:
            raise ValueError(f"capacity_factor must be positive, got {capacity_factor}")
        self.top_k, self.capacity_factor, self.groups = top_k, capacity_factor, groups
        self.router = nn.Linear(d_model, n_expert, bias=False)
        self.experts = nn.ModuleList(Expert(d_model, hidden or 4 * d_model) for _ in range(n_expert))
        self.reset_parameters(seed)

    def reset_parameters(self, seed: int) -> None:
        """N(0, 0.02) weights from a private generator (the global random state is left alone)."""
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                p.copy_(torch.zeros_like(p) if name.endswith("bias")
                        else torch.randn(p.shape, generator=generator) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        if B % self.groups:
            raise ValueError(f"a batch of {B} sequences does not split into {self.groups} equal groups")
        out, aux, self.dropped, self.load = [], [], 0, 0
        for group in x.reshape(self.groups, -1, d):            # (N, d) each: B/groups sequences
            r = route(self.router(group), self.top_k, self.capacity_factor)
            y = torch.zeros_like(group)
            for e, expert in enumerate(self.experts):
                mine = r.expert == e
                y = y.index_add(0, r.token[mine], r.gate[mine, None] * expert(group[r.token[mine]]))
            out.append(y)
            aux.append(r.aux_loss)
            self.dropped, self.load = self.dropped + r.dropped, self.load + r.load
        self.aux_loss = torch.stack(aux).mean()
        return torch.cat(out).view(B, T, d)


def moe_gpt(config, n_expert: int | None = None, top_k: int | None = None, capacity_factor: float = 1.25,
            groups: int = 1, seed: int = 0):
    """The course's GPT (``course_utils.gpt``) with every block's MLP replaced by a MoE layer
    (experts of the MLP's size, 4·d_model; block ``i``'s seeded with ``seed + 1 + i``).
    ``n_expert`` and ``top_k`` default to the config's (``GPTConfig.n_expert``, ``.top_k``)."""
    from dataclasses import replace

    from .gpt import GPT

    n_expert, top_k = n_expert or config.n_expert, top_k or config.top_k
    if not n_expert:
        raise ValueError("moe_gpt needs experts: n_expert=... or a GPTConfig with n_expert > 0")
    model = GPT(replace(config, n_expert=0), seed=seed)
    for i, block in enumerate(model.blocks):
        block.mlp = MoE(config.d_model, n_expert, top_k, capacity_factor, groups=groups, seed=seed + 1 + i)
    model.config = replace(config, n_expert=n_expert, top_k=top_k)   # the shape it has
    return model


def aux_loss(model: nn.Module) -> torch.Tensor:
    """The load-balancing losses of every MoE layer in ``model`` (one-process or expert-parallel)
    from its last forward, summed."""
    return sum(m.aux_loss for m in model.modules() if isinstance(getattr(m, "aux_loss", None), torch.Tensor))
