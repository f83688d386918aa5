"""A tiny GPT, read top to bottom: the transformer the course splits over many devices.

nanoGPT's structure with the choices that make it easy to parallelise and to check:

- pre-LayerNorm blocks: ``x + attn(ln_1(x))``, then ``x + mlp(ln_2(x))``;
- causal self-attention with **separate** ``q``, ``k``, ``v`` projections (a fused ``c_attn``
  split column-wise by tensor parallelism would mix q, k and v across ranks) and
  ``scaled_dot_product_attention(is_causal=True)``; heads are reshaped with ``view(B, T, -1, hd)``
  so that a rank holding some of the heads works unchanged;
- an MLP of 4x width with GELU; no dropout (equality checks need determinism);
- an output ``head`` separate from the token embedding (untied: simpler under tensor parallel).

Shapes: ``idx`` is (B, T) int64 token ids, T <= ``block_size``; the model returns logits
(B, T, vocab_size) and, given ``targets`` (B, T), the mean cross-entropy. Initial weights depend
only on ``seed`` (a private generator: the global random state is left alone).
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from .shape import GPTConfig  # the model's sizes, shared with accounting and the planner


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """q, k, v (B, heads, T, hd) -> (B, heads, T, hd): each position attends to itself and earlier."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class CausalSelfAttention(nn.Module):
    """Every position attends to itself and the positions before it, in ``n_head`` heads.
    ``attend`` is the attention itself; context parallelism swaps in ring attention (chapter 14)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        d = config.d_model
        self.q = nn.Linear(d, d, bias=config.bias)
        self.k = nn.Linear(d, d, bias=config.bias)
        self.v = nn.Linear(d, d, bias=config.bias)
        self.proj = nn.Linear(d, d, bias=config.bias)   # mixes the heads back into the residual stream
        self.head_dim = config.head_dim
        self.attend = causal_attention

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        # (B, T, heads * hd) -> (B, heads, T, hd); -1: a tensor-parallel rank holds only its heads
        q, k, v = (proj(x).view(B, T, -1, self.head_dim).transpose(1, 2) for proj in (self.q, self.k, self.v))
        y = self.attend(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    """Position-wise feed-forward: d_model -> 4 d_model -> GELU -> d_model."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(config.d_model, 4 * config.d_model, bias=config.bias)
        self.proj = nn.Linear(4 * config.d_model, config.d_model, bias=config.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    """One transformer block: attention, then MLP, each on a LayerNorm'ed copy added back."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.d_model, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.d_model, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


def blocks_of(model: nn.Module) -> list[Block]:
    """The transformer blocks of a GPT (a ``ModuleList``) or of a pipeline stage of one (a
    ``ModuleDict`` keyed by the blocks' indices in the whole model), in order."""
    blocks = model.blocks
    return list(blocks.values()) if isinstance(blocks, nn.ModuleDict) else list(blocks)


class GPT(nn.Module):
    """Token + position embeddings, ``n_layer`` blocks, a final LayerNorm and the output head."""

    def __init__(self, config: GPTConfig, seed: int = 0):
        super().__init__()
        if config.n_expert:
            raise ValueError(f"GPT builds dense MLPs; n_expert={config.n_expert} is a mixture of experts: "
                             f"build it with course_utils.moe.moe_gpt(config)")
        self.config = config
        with torch.random.fork_rng(devices=[]):   # the layers' default init draws from the global RNG
            self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
            self.pos_emb = nn.Embedding(config.block_size, config.d_model)
            self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
            self.ln_f = nn.LayerNorm(config.d_model, bias=config.bias)
            self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.reset_parameters(seed)

    @torch.no_grad()
    def reset_parameters(self, seed: int = 0) -> None:
        """GPT-2's initialisation from a private generator: N(0, 0.02) weights, zero biases, and the
        projections into the residual stream scaled by 1/sqrt(2 n_layer) (they add up layer by layer)."""
        generator = torch.Generator().manual_seed(seed)
        residual_std = 0.02 / math.sqrt(2 * self.config.n_layer)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif p.dim() == 1:   # LayerNorm weight
                p.fill_(1.0)
            else:
                std = residual_std if name.endswith("proj.weight") else 0.02
                p.copy_(torch.randn(p.shape, generator=generator) * std)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None,
                positions: torch.Tensor | None = None):
        """``idx`` (B, T) -> logits (B, T, vocab_size), or ``(logits, loss)`` given ``targets``.
        ``positions`` (T,) says where in the sequence the tokens are (default 0..T-1; a rank holding
        part of the sequence passes its own)."""
        B, T = idx.shape
        if positions is None:
            if T > self.config.block_size:
                raise ValueError(f"sequence of {T} tokens is longer than block_size={self.config.block_size}")
            positions = torch.arange(T, device=idx.device)
        elif positions.shape != (T,) or int(positions.max()) >= self.config.block_size:
            raise ValueError(f"positions must have shape ({T},) and values below block_size="
                             f"{self.config.block_size}; got shape {tuple(positions.shape)}")
        x = self.tok_emb(idx) + self.pos_emb(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())
