"""What a transformer costs: parameters, FLOPs, activation bytes, model-state bytes — as formulas,
and the two instruments that check them on a real model.

Notation (Megatron's, Korthikanti et al. 2022): ``s`` sequence length, ``b`` micro-batch size,
``h`` hidden size (``d_model``), ``a`` attention heads, ``L`` layers, ``V`` vocabulary size.
The formulas describe :class:`course_utils.gpt.GPT`: pre-LayerNorm blocks with biases, separate
q/k/v projections, a 4h MLP, no dropout, an untied output head.

- :func:`count_flops` counts with ``torch.utils.flop_counter.FlopCounterMode``, running attention
  through PyTorch's *math* SDPA kernel: the fused CPU kernel is not registered with the counter
  and would count as zero FLOPs.
- :func:`saved_activation_bytes` adds up the tensors autograd saves for backward during one
  forward (each storage once, parameters excluded): what activation memory really is.
"""
from __future__ import annotations

from collections.abc import Callable

BYTES_PER_PARAM_ADAM_MIXED = 2 + 2 + 4 + 4 + 4
"""bf16 weights and gradients (2 + 2), fp32 master weights and Adam's two moments (4 + 4 + 4)."""


def block_params(h: int, bias: bool = True) -> int:
    """Parameters of one block: q, k, v, proj (4 h², + 4 h biases), the MLP (8 h², + 5 h biases),
    two LayerNorms (2 h weights, + 2 h biases): 12 h² + 13 h with biases, 12 h² + 2 h without."""
    return 12 * h * h + (13 * h if bias else 2 * h)


def gpt_params(vocab: int, block_size: int, layers: int, h: int, bias: bool = True) -> dict[str, int]:
    """Parameters by part: embeddings (tokens and positions), blocks, final LayerNorm, head, total."""
    parts = {"token embedding": vocab * h, "position embedding": block_size * h,
             "blocks": layers * block_params(h, bias), "final LayerNorm": 2 * h if bias else h,
             "head": h * vocab}
    return {**parts, "total": sum(parts.values())}


def matmul_params(vocab: int, layers: int, h: int) -> int:
    """Weights that multiply every token (``N`` in "6 N"): the blocks' 12 h² per layer and the head's
    h·V. Embedding lookups, biases and LayerNorms do (almost) no multiplications."""
    return layers * 12 * h * h + h * vocab


def train_flops_per_token(vocab: int, layers: int, h: int, s: int) -> int:
    """FLOPs of one training step per token: 6 N (forward 2 N, backward 4 N) plus attention's
    own matmuls, scores q·kᵀ and the weighted sum of v: 4 s h per layer forward, 12 s h in all.
    (A causal kernel may skip the masked half; the math kernel and this count do not.)"""
    return 6 * matmul_params(vocab, layers, h) + 12 * layers * s * h


def activation_bytes_megatron(s: int, b: int, h: int, a: int) -> int:
    """Korthikanti et al.'s activation memory of one layer in 16-bit, with dropout and the attention
    scores materialised: s·b·h·(34 + 5·a·s/h) bytes."""
    return s * b * h * 34 + 5 * a * s * s * b


def activation_bytes_block(s: int, b: int, h: int, a: int, element_bytes: int = 2) -> int:
    """The same count adapted, term by term, to a :class:`~course_utils.gpt.Block` (no dropout, a
    fused attention kernel that keeps no s×s scores), in activations of ``element_bytes`` each:

    - each LayerNorm's input (2 × sbh) and output, which feeds q/k/v and fc (2 × sbh);
    - q, k, v (3 sbh) and the attention output (sbh), which the fused kernel keeps and which is
      also proj's input (the kernel writes it in the (b, s, a, h/a) layout, so the reshape is a
      view): together they replace Megatron's softmax output, dropout mask and dropout output
      (5·a·s²·b bytes) and its separate proj input;
    - the MLP's fc output (4 sbh, GELU's input) and GELU's output (4 sbh, proj's input);
    - no dropout masks (Megatron's 2 sbh bytes).

    That is 16 sbh activations, plus small statistics: each LayerNorm's mean and 1/std (2 sb each,
    in the activation dtype on CPU) and the attention's log-sum-exp per head (a·s·b, float32).
    """
    return 16 * s * b * h * element_bytes + 2 * 2 * s * b * element_bytes + a * s * b * 4


def count_flops(fn: Callable[[], object]) -> int:
    """FLOPs of ``fn()`` as ``FlopCounterMode`` counts them, attention on the math SDPA kernel."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def saved_activation_bytes(fn: Callable[[], object], parameters=(), hooks: tuple | None = None) -> int:
    """Bytes of the tensors autograd saves for backward while ``fn()`` runs: every storage counted
    once (views of one tensor share it), ``parameters`` (weights saved by matmuls) left out.
    A DTensor counts as its local shard: the bytes this rank holds. ``hooks``, a (pack, unpack)
    pair for ``saved_tensors_hooks`` that changes what is kept (e.g. a slice, gathered again in
    backward), is applied, and what its ``pack`` returns is counted."""
    import torch

    def storage_of(tensor):
        if hasattr(tensor, "to_local"):   # a DTensor wraps this rank's shard
            with torch.no_grad():
                tensor = tensor.to_local()
        return tensor.untyped_storage()

    skip = {storage_of(p).data_ptr() for p in parameters}
    storages: dict[int, int] = {}
    inner_pack, inner_unpack = hooks or (lambda tensor: tensor, lambda tensor: tensor)

    def pack(tensor):
        kept = inner_pack(tensor)
        if storage_of(tensor).data_ptr() in skip:   # a weight, however the hook keeps it
            return kept
        for t in kept if isinstance(kept, (tuple, list)) else (kept,):
            if isinstance(t, torch.Tensor) and storage_of(t).data_ptr() not in skip:
                storages[storage_of(t).data_ptr()] = storage_of(t).nbytes()
        return kept

    with torch.autograd.graph.saved_tensors_hooks(pack, inner_unpack):
        fn()
    return sum(storages.values())
