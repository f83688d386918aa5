"""A Llama-3-style transformer, read top to bottom: the GPT of :mod:`course_utils.gpt` with the
block modern models use.

What changes from the GPT, and why:

- **RMSNorm** instead of LayerNorm: no mean subtracted, no bias, a weight only. :class:`RMSNorm`
  keeps for backward what a fused RMSNorm kernel keeps (its input and one float32 1/rms per row).
  ``torch.nn.RMSNorm`` and ``F.rms_norm`` run as a composite of small ops on the CPU (torch 2.13)
  and keep more, measured per norm and token: the normalised x̂ besides the input (4h more bytes
  in float32), and for a bf16 input float32 copies of x and x̂ instead of x (6h more bytes). On
  CUDA they may run a fused kernel (not measured here). ``tests/test_llama.py`` checks this
  module's gradients against ``F.rms_norm``'s and the bytes it saves.
- **SwiGLU** MLP: ``down(silu(gate(x)) * up(x))``, three matrices of width f (Llama 3: about
  8h/3 times ``ffn_dim_multiplier``, rounded up; ``shape.llama_ffn_hidden``) instead of two of 4h.
- **Rotary positions** (RoPE, Su et al. 2021, arXiv:2104.09864): no position table; q and k are
  rotated by an angle proportional to their position, pair by pair of dimensions, so that q·k
  depends on the positions' difference only. Rotate-half layout (Hugging Face's and torchtitan's
  ``rotate_half``: dimension i pairs with i + d/2), cos and sin computed in float32 from the
  ``positions`` given, so a context-parallel rank uses its true positions. Llama 3.1's long-context
  rescaling of the frequencies (``rope_scaling``, for sequences past 8,192) is not modelled.
- **Grouped-query attention**: ``n_kv_head`` K/V heads, each shared by n_head / n_kv_head query
  heads. ``scaled_dot_product_attention(enable_gqa=True)`` takes K and V at their own head count:
  the CPU's fused kernel keeps them so for backward (measured: g·d values per token each), where
  repeating them first (:func:`repeat_kv`) would keep a·d each.
- **No biases** anywhere, and an untied output head.

As in the GPT: separate q, k, v projections (tensor parallelism splits them by heads; with GQA
it needs n_kv_head divisible by its ranks), heads reshaped with ``view(B, T, -1, hd)`` so a rank
holding some heads works unchanged, an ``attend`` hook on attention (context parallelism swaps in
ring attention; it receives K and V at the K/V head count), blocks in a ``ModuleList``, the
embedding ``tok_emb``, the norms ``ln_1``, ``ln_2``, ``ln_f`` and the ``head`` under nanoGPT's
names (the course's tensor-parallel plans and pipeline stages find them; the RMSNorm runs on
DTensors under ``SequenceParallel``), initial weights from ``seed`` alone (a private generator).
A block takes ``positions`` too (``block(x, positions)``; ``block(x)`` means 0..T-1).

Shapes: ``idx`` (B, T) int64 token ids, T <= ``block_size``; logits (B, T, vocab_size) and, given
``targets`` (B, T), the mean cross-entropy.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from .shape import GPTConfig  # the model's sizes, shared with accounting and the planner


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float,
                 dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of RoPE's angles, each (T, head_dim) in ``dtype``, for token ``positions`` (T,).

    Pair j of dimensions (j and j + head_dim/2) turns at frequency theta^(-2j / head_dim) radians
    per position; the angles are computed in float32 whatever ``dtype`` (bf16 would round large
    positions' angles), then cast."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim)
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]          # (T, head_dim/2)
    angles = torch.cat((angles, angles), dim=-1)                               # (T, head_dim)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) on the last dimension's two halves: a quarter turn of each pair."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` (..., T, head_dim) pair by pair by the angles whose cos and sin (T, head_dim)
    are given. Autograd keeps cos and sin (not x) for backward."""
    return x * cos + rotate_half(x) * sin


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """K or V (B, g, T, d) -> (B, g·n_rep, T, d): each K/V head repeated for the n_rep query heads
    it serves (head i of the result is K/V head i // n_rep), for an attention that needs as many
    K/V heads as query heads."""
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=1)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """q (B, a, T, d), k and v (B, g, T, d), g dividing a -> (B, a, T, d): each position attends to
    itself and earlier; query head i reads K/V head i // (a / g)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=k.shape[1] != q.shape[1])


class _RMSNormFunction(torch.autograd.Function):
    """y = x / rms(x) · w, rms over the last dimension computed in float32 (or float64 for float64
    inputs); keeps x and 1/rms."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        xf = x.to(torch.promote_types(x.dtype, torch.float32))        # 16-bit inputs: in float32
        rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)   # (..., 1)
        ctx.save_for_backward(x, weight, rstd)
        return (xf * rstd).to(x.dtype) * weight

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight, rstd = ctx.saved_tensors
        x_hat = x.to(rstd.dtype) * rstd
        g = grad.to(rstd.dtype) * weight.to(rstd.dtype)
        # d/dx of x·r(x): r·(g − x̂·mean(g·x̂)), r = 1/rms
        grad_x = rstd * (g - x_hat * (g * x_hat).mean(-1, keepdim=True))
        grad_w = (grad.to(rstd.dtype) * x_hat.to(x.dtype).to(rstd.dtype)).sum(dim=tuple(range(x.dim() - 1)))
        return grad_x.to(x.dtype), grad_w.to(weight.dtype), None


class RMSNorm(nn.Module):
    """x / sqrt(mean(x²) + eps) · weight over the last dimension (``dim`` features); no bias, no
    mean subtracted. Keeps for backward the input and one float32 value per row (1/rms; float64
    for a float64 input)."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _RMSNormFunction.apply(x, self.weight, self.eps)


class Attention(nn.Module):
    """Causal grouped-query attention with rotary positions: ``n_head`` query heads, ``kv_heads``
    K/V heads, ``head_dim`` dimensions each. ``attend`` is the attention itself (context
    parallelism swaps in ring attention); it gets q (B, a, T, d) and k, v (B, g, T, d)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        h, d = config.d_model, config.head_dim
        self.q = nn.Linear(h, config.n_head * d, bias=False)
        self.k = nn.Linear(h, config.kv_heads * d, bias=False)
        self.v = nn.Linear(h, config.kv_heads * d, bias=False)
        self.proj = nn.Linear(config.n_head * d, h, bias=False)   # mixes the heads back into the residual stream
        self.head_dim, self.rope_theta = d, config.rope_theta
        self.attend = causal_attention

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        # (B, T, heads * hd) -> (B, heads, T, hd); -1: a tensor-parallel rank holds only its heads
        q, k, v = (proj(x).view(B, T, -1, self.head_dim).transpose(1, 2) for proj in (self.q, self.k, self.v))
        cos, sin = rope_cos_sin(positions, self.head_dim, self.rope_theta, x.dtype)
        y = self.attend(apply_rope(q, cos, sin), apply_rope(k, cos, sin), v)
        return self.proj(y.transpose(1, 2).reshape(B, T, -1))


class SwiGLU(nn.Module):
    """Position-wise feed-forward: d_model -> (silu(gate) · up, width f) -> d_model."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        h, f = config.d_model, config.mlp_width
        self.gate = nn.Linear(h, f, bias=False)
        self.up = nn.Linear(h, f, bias=False)
        self.down = nn.Linear(f, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    """One block: attention, then the SwiGLU MLP, each on an RMSNorm'ed copy added back."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = RMSNorm(config.d_model)
        self.attn = Attention(config)
        self.ln_2 = RMSNorm(config.d_model)
        self.mlp = SwiGLU(config)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, T, d_model) -> (B, T, d_model); ``positions`` (T,) of the tokens, default 0..T-1."""
        if positions is None:
            positions = torch.arange(x.shape[1], device=x.device)
        x = x + self.attn(self.ln_1(x), positions)
        return x + self.mlp(self.ln_2(x))


class Llama(nn.Module):
    """Token embedding, ``n_layer`` blocks, a final RMSNorm and the untied output head."""

    def __init__(self, config: GPTConfig, seed: int = 0):
        super().__init__()
        wrong = {name: getattr(config, name) for name, want in
                 (("mlp", "swiglu"), ("norm", "rmsnorm"), ("positions", "rope"), ("bias", False))
                 if getattr(config, name) != want}
        if wrong or config.n_expert:
            raise ValueError(f"Llama builds mlp='swiglu', norm='rmsnorm', positions='rope', bias=False, dense; "
                             f"this config has {wrong or {'n_expert': config.n_expert}}: build GPT-2 shapes "
                             f"with course_utils.gpt.GPT, or pass those four fields (shape.LLAMA_3_1 has examples)")
        self.config = config
        with torch.random.fork_rng(devices=[]):   # the layers' default init draws from the global RNG
            self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
            self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
            self.ln_f = RMSNorm(config.d_model)
            self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if not self.head.weight.is_meta:   # on the meta device (counting only) there is nothing to fill
            self.reset_parameters(seed)

    @torch.no_grad()
    def reset_parameters(self, seed: int = 0) -> None:
        """The GPT's initialisation from a private generator: N(0, 0.02) weights, norms' weights 1,
        and the projections into the residual stream (``attn.proj``, ``mlp.down``) scaled by
        1/sqrt(2 n_layer)."""
        generator = torch.Generator().manual_seed(seed)
        residual_std = 0.02 / math.sqrt(2 * self.config.n_layer)
        for name, p in self.named_parameters():
            if p.dim() == 1:   # RMSNorm weight
                p.fill_(1.0)
            else:
                std = residual_std if name.endswith(("proj.weight", "down.weight")) else 0.02
                p.copy_(torch.randn(p.shape, generator=generator) * std)

    def features(self, idx: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """``idx`` (B, T) -> the final norm's output (B, T, d_model), what the head multiplies.
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
        x = self.tok_emb(idx)
        for block in self.blocks:
            x = block(x, positions)
        return self.ln_f(x)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None,
                positions: torch.Tensor | None = None):
        """``idx`` (B, T) -> logits (B, T, vocab_size), or ``(logits, loss)`` given ``targets``.
        ``positions`` as in :meth:`features`."""
        logits = self.head(self.features(idx, positions))
        if targets is None:
            return logits
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())
