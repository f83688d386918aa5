"""A GPT's shape, in one vocabulary: the model (``course_utils.gpt``) is built from it, the accounting
(``course_utils.accounting``) counts it and the planner (``course_utils.planner``) prices it.

nanoGPT's names: ``n_layer`` blocks of width ``d_model`` (Megatron's h) with ``n_head`` heads,
sequences of up to ``block_size`` tokens (the planner trains on sequences of exactly that length),
a ``vocab_size``-token vocabulary; ``n_expert`` > 0 makes each block's MLP a mixture of that many
experts (each the dense MLP's 8h² + 5h parameters), ``top_k`` of them per token (chapter 15;
``moe.moe_gpt`` builds it). No torch here: the planner's arithmetic runs anywhere.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import accounting


@dataclass(frozen=True)
class GPTConfig:
    """Sizes of the model. ``d_model`` must divide into ``n_head`` heads."""

    vocab_size: int = 64      # distinct tokens
    block_size: int = 32      # longest sequence (tokens)
    n_layer: int = 2          # transformer blocks
    n_head: int = 4           # attention heads per block
    d_model: int = 32         # width of the residual stream
    bias: bool = True         # biases in Linear and LayerNorm
    n_expert: int = 0         # experts per MoE layer; 0: dense MLPs
    top_k: int = 2            # experts each token visits (with n_expert > 0)

    def __post_init__(self):
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "d_model", "top_k"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.d_model % self.n_head:
            raise ValueError(f"d_model={self.d_model} must be a multiple of n_head={self.n_head} "
                             f"(each head gets d_model / n_head dimensions)")
        if not isinstance(self.n_expert, int) or self.n_expert < 0 or (self.n_expert and self.top_k > self.n_expert):
            raise ValueError(f"n_expert must be 0 (dense) or at least top_k={self.top_k}, got {self.n_expert!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def routed(self) -> int:
        """MLPs each token visits: ``top_k`` with experts, the one dense MLP without."""
        return self.top_k if self.n_expert else 1

    def block_params(self) -> tuple[int, int]:
        """(dense, experts) parameters of one block: attention, LayerNorms and router (or the dense
        MLP), and all the experts."""
        h = self.d_model
        dense = accounting.block_params(h, self.bias)
        if not self.n_expert:
            return dense, 0
        mlp = 8 * h * h + (5 * h if self.bias else 0)
        return dense - mlp + h * self.n_expert, self.n_expert * mlp

    @property
    def params(self) -> int:
        """All parameters, every expert included."""
        extra = sum(self.block_params()) - accounting.block_params(self.d_model, self.bias)   # experts past one MLP
        return (accounting.gpt_params(self.vocab_size, self.block_size, self.n_layer, self.d_model, self.bias)["total"]
                + self.n_layer * extra)

    @property
    def flops_per_token(self) -> int:
        """Training FLOPs per token of a ``block_size``-token sequence, without recomputation: 6 per
        parameter the token uses, plus attention's 12·L·s·h."""
        h, extra = self.d_model, 0
        if self.n_expert:    # k experts' MLPs instead of one, and the router's h·E
            extra = 6 * self.n_layer * ((self.top_k - 1) * 8 * h * h + h * self.n_expert)
        return accounting.train_flops_per_token(self.vocab_size, self.n_layer, h, self.block_size) + extra
