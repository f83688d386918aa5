"""A transformer's shape, in one vocabulary: the models (``course_utils.gpt``, ``course_utils.llama``)
are built from it, the accounting (``course_utils.accounting``) counts it and the planner
(``course_utils.planner``) prices it.

nanoGPT's names: ``n_layer`` blocks of width ``d_model`` (Megatron's h) with ``n_head`` heads,
sequences of up to ``block_size`` tokens (the planner trains on sequences of exactly that length),
a ``vocab_size``-token vocabulary; ``n_expert`` > 0 makes each block's MLP a mixture of that many
experts (each one MLP), ``top_k`` of them per token (chapter 15; ``moe.moe_gpt`` builds it).

The defaults are GPT-2's block (LayerNorm with biases, a 4h GELU MLP, as many K/V heads as query
heads, learned positions). A Llama-3-style block says ``norm="rmsnorm"``, ``mlp="swiglu"``,
``positions="rope"``, ``bias=False`` and grouped-query attention with ``n_kv_head`` < ``n_head``
(:data:`LLAMA_3_1` has Meta's published shapes). Both have an untied output head.
No torch here: the planner's arithmetic runs anywhere.
"""
from __future__ import annotations

from dataclasses import dataclass


def llama_ffn_hidden(d_model: int, multiplier: float = 1.0, multiple_of: int = 256) -> int:
    """The SwiGLU width Meta's reference code computes (llama/model.py, ``FeedForward``): two thirds
    of 4·d_model (three matrices instead of two, about the same parameters), times
    ``ffn_dim_multiplier``, rounded up to a multiple of ``multiple_of``."""
    width = int(multiplier * int(2 * 4 * d_model / 3))
    return multiple_of * -(-width // multiple_of)


@dataclass(frozen=True)
class GPTConfig:
    """Sizes and block design of the model. ``n_head`` must divide ``d_model`` unless ``head_size``
    is given, and ``n_kv_head`` must divide ``n_head``."""

    vocab_size: int = 64      # distinct tokens
    block_size: int = 32      # longest sequence (tokens)
    n_layer: int = 2          # transformer blocks
    n_head: int = 4           # query heads per block
    d_model: int = 32         # width of the residual stream
    bias: bool = True         # biases in Linear and LayerNorm
    n_expert: int = 0         # experts per MoE layer; 0: dense MLPs
    top_k: int = 2            # experts each token visits (with n_expert > 0)
    n_kv_head: int | None = None    # K/V heads (grouped-query attention); None: n_head
    head_size: int | None = None    # dimensions per head; None: d_model // n_head
    ffn_hidden: int | None = None   # the MLP's inner width; None: 4·d_model (GELU), llama_ffn_hidden (SwiGLU)
    mlp: str = "gelu"               # "gelu": proj(gelu(fc(x))); "swiglu": down(silu(gate(x)) · up(x))
    norm: str = "layernorm"         # "layernorm" (weight, and a bias if bias) or "rmsnorm" (weight only)
    positions: str = "learned"      # "learned": a block_size × d_model table; "rope": rotary, no parameters
    rope_theta: float = 10000.0     # RoPE's base (Llama 3: 500,000)

    def __post_init__(self):
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "d_model", "top_k"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        for name in ("n_kv_head", "head_size", "ffn_hidden"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be None (the default) or a positive integer, got {value!r}")
        if self.head_size is None and self.d_model % self.n_head:
            raise ValueError(f"d_model={self.d_model} must be a multiple of n_head={self.n_head} "
                             f"(each head gets d_model / n_head dimensions), or give head_size")
        if self.n_head % self.kv_heads:
            raise ValueError(f"n_kv_head={self.n_kv_head} must divide n_head={self.n_head} "
                             f"(each K/V head serves n_head / n_kv_head query heads)")
        for name, allowed in (("mlp", ("gelu", "swiglu")), ("norm", ("layernorm", "rmsnorm")),
                              ("positions", ("learned", "rope"))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.positions == "rope" and self.head_dim % 2:
            raise ValueError(f"RoPE rotates pairs of dimensions: head_dim={self.head_dim} must be even")
        if not isinstance(self.n_expert, int) or self.n_expert < 0 or (self.n_expert and self.top_k > self.n_expert):
            raise ValueError(f"n_expert must be 0 (dense) or at least top_k={self.top_k}, got {self.n_expert!r}")

    @property
    def head_dim(self) -> int:
        """Dimensions per head: ``head_size``, or d_model / n_head."""
        return self.head_size or self.d_model // self.n_head

    @property
    def kv_heads(self) -> int:
        """K/V heads: ``n_kv_head``, or ``n_head`` (multi-head attention)."""
        return self.n_kv_head or self.n_head

    @property
    def mlp_width(self) -> int:
        """The MLP's inner width f: ``ffn_hidden``, or 4h (GELU) / :func:`llama_ffn_hidden` (SwiGLU)."""
        if self.ffn_hidden:
            return self.ffn_hidden
        return 4 * self.d_model if self.mlp == "gelu" else llama_ffn_hidden(self.d_model)

    @property
    def routed(self) -> int:
        """MLPs each token visits: ``top_k`` with experts, the one dense MLP without."""
        return self.top_k if self.n_expert else 1

    # -- parameters, as the models build them ------------------------------------------------
    def attention_params(self) -> int:
        """q (h → a·d), k and v (h → g·d each, g K/V heads), proj (a·d → h), d = head_dim; biases."""
        h, q, kv = self.d_model, self.n_head * self.head_dim, self.kv_heads * self.head_dim
        return h * q + 2 * h * kv + q * h + ((q + 2 * kv + h) if self.bias else 0)

    def mlp_matmul_params(self) -> int:
        """Weights of one MLP (one expert): 2·h·f for GELU (fc, proj), 3·h·f for SwiGLU (gate, up, down)."""
        return (2 if self.mlp == "gelu" else 3) * self.d_model * self.mlp_width

    def mlp_params(self) -> int:
        """One MLP (one expert), biases included."""
        f, h = self.mlp_width, self.d_model
        biases = ((f if self.mlp == "gelu" else 2 * f) + h) if self.bias else 0
        return self.mlp_matmul_params() + biases

    def norm_params(self) -> int:
        """One norm: a weight of h (and a bias of h for a LayerNorm with biases)."""
        return self.d_model * (2 if self.norm == "layernorm" and self.bias else 1)

    def block_params(self) -> tuple[int, int]:
        """(dense, experts) parameters of one block: attention, two norms and the MLP (or the
        router's h·E), and all the experts."""
        dense = self.attention_params() + 2 * self.norm_params()
        if not self.n_expert:
            return dense + self.mlp_params(), 0
        return dense + self.d_model * self.n_expert, self.n_expert * self.mlp_params()

    def embedding_params(self) -> int:
        """The token embedding (V·h) and, with learned positions, the position table (block_size·h)."""
        return self.d_model * (self.vocab_size + (self.block_size if self.positions == "learned" else 0))

    @property
    def params(self) -> int:
        """All parameters, every expert included: embeddings, blocks, final norm, head."""
        return (self.embedding_params() + self.n_layer * sum(self.block_params()) + self.norm_params()
                + self.d_model * self.vocab_size)

    @property
    def matmul_params(self) -> int:
        """Weights that multiply each token (N in "6N"): each block's attention and the ``routed``
        MLPs it visits (and the router), and the head. Embedding lookups, biases and norms do
        (almost) no multiplications."""
        h, q, kv = self.d_model, self.n_head * self.head_dim, self.kv_heads * self.head_dim
        router = h * self.n_expert
        per_block = 2 * h * q + 2 * h * kv + self.routed * self.mlp_matmul_params() + router
        return self.n_layer * per_block + h * self.vocab_size

    def train_flops_per_token(self, causal: bool = False) -> int:
        """Training FLOPs per token of a ``block_size``-token sequence, without recomputation, as
        PaLM's appendix B counts them (Chowdhery et al. 2022, arXiv:2204.02311): 6N, plus
        attention's own matmuls (scores q·kᵀ and the weighted sum of v) 12·L·s·a·d with every
        score computed (``causal=False``, PaLM's and Megatron's convention), or half of it when a
        causal kernel skips the masked half (``causal=True``). K/V heads do not change it: every
        query head scores against the whole sequence."""
        attention = 12 * self.n_layer * self.block_size * self.n_head * self.head_dim
        return 6 * self.matmul_params + (attention // 2 if causal else attention)

    @property
    def flops_per_token(self) -> int:
        """:meth:`train_flops_per_token` with every attention score counted (PaLM's convention)."""
        return self.train_flops_per_token(causal=False)


def _llama_3_1(d_model: int, n_layer: int, n_head: int, multiplier: float, multiple_of: int) -> GPTConfig:
    return GPTConfig(vocab_size=128_256, block_size=8192, n_layer=n_layer, n_head=n_head, d_model=d_model,
                     bias=False, n_kv_head=8, ffn_hidden=llama_ffn_hidden(d_model, multiplier, multiple_of),
                     mlp="swiglu", norm="rmsnorm", positions="rope", rope_theta=500_000.0)


LLAMA_3_1: dict[str, GPTConfig] = {
    "8B": _llama_3_1(4096, 32, 32, 1.3, 1024),
    "70B": _llama_3_1(8192, 80, 64, 1.3, 4096),
    "405B": _llama_3_1(16384, 126, 128, 1.2, 4096),
}
"""Llama 3.1's published shapes: Meta's ``params.json`` of each model (dim, n_layers, n_heads,
n_kv_heads = 8, vocab_size 128,256, ffn_dim_multiplier, multiple_of, rope_theta 500,000; Llama 3.1's
long-context RoPE scaling, ``use_scaled_rope``, is not modelled: it changes no parameter count), as
torchtitan's ``llama3`` model arguments repeat them; pre-training sequences of 8,192 tokens (Llama
3 paper, Grattafiori et al. 2024, arXiv:2407.21783, §3.4.1)."""

LLAMA_3_1_PUBLISHED_PARAMS = {"8B": 8_030_261_248, "70B": 70_553_706_496, "405B": 405_853_388_800}
"""Parameter totals of the released checkpoints: what Hugging Face's model API reports as
``safetensors.total`` for meta-llama/Llama-3.1-{8B,70B,405B}. For 8B and 70B it is also half the
``total_size`` of the bf16 safetensors index (16,060,522,496 and 141,107,412,992 bytes); the 405B
index's ``total_size`` is not twice its count, so it is not the source. (Checked 2026-12-07
against public copies of these figures, not against the Hub itself.)"""
