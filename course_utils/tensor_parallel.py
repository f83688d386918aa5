"""Tensor parallelism for the course's GPT (``course_utils.gpt``), as DTensor plans.

Megatron-LM's split of a transformer block over the ``t`` ranks of a 1-D device mesh:

- ``attn.q``, ``attn.k``, ``attn.v`` and ``mlp.fc`` split by **output** features
  (``ColwiseParallel``): each rank holds ``n_head / t`` heads and ``4·d_model / t`` MLP units and
  computes them without communicating;
- ``attn.proj`` and ``mlp.proj`` split by **input** features (``RowwiseParallel``): each rank's
  product is a partial sum of the block's output, and one all-reduce adds them — two per block in
  forward, two in backward (the gradients of the inputs of q/k/v and of fc).

With ``sequence_parallel=True`` (Megatron's sequence parallelism, Korthikanti et al. 2022) the
LayerNorms and the residual stream are cut along the sequence instead of replicated: an all-gather
brings the tokens in before q/k/v and fc, and ``proj`` ends with a reduce-scatter (sum the partial
results, keep my tokens) instead of an all-reduce. ``n_head`` and ``4·d_model`` must divide by
``t``; with sequence parallelism so must the sequence length.
"""
from __future__ import annotations

from torch import nn
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from .gpt import blocks_of


def block_plan(sequence_parallel: bool = False) -> dict:
    """How each layer of a GPT block is split (keys: module paths inside the block)."""
    split_heads = {"attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
                   "mlp.fc": ColwiseParallel()}
    if not sequence_parallel:   # the block's input and output are whole on every rank
        share = PrepareModuleInput(input_layouts=(Replicate(),), desired_input_layouts=(Replicate(),))
        return {**split_heads, "attn": share,   # q, k, v share one input: one all-reduce of its gradient
                "attn.proj": RowwiseParallel(), "mlp.proj": RowwiseParallel()}
    gather = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    return {**split_heads, "ln_1": SequenceParallel(), "ln_2": SequenceParallel(),  # norms: my tokens only
            "attn": gather, "mlp": gather,                                           # all-gather the tokens
            "attn.proj": RowwiseParallel(output_layouts=Shard(1)),                   # reduce-scatter them
            "mlp.proj": RowwiseParallel(output_layouts=Shard(1))}


def parallelize_gpt(model: nn.Module, mesh, sequence_parallel: bool = False) -> nn.Module:
    """Split every block of ``model`` (a ``course_utils.gpt.GPT``, or a pipeline stage of one:
    ``course_utils.composed.GPTStage``) over ``mesh`` by :func:`block_plan`,
    in place; with sequence parallelism the embeddings, final LayerNorm and head too. Returns it."""
    t, config = mesh.size(), model.config
    if config.n_head % t:
        raise ValueError(f"n_head={config.n_head} heads do not split over {t} ranks; pick t dividing n_head")
    whole = all(hasattr(model, name) for name in ("tok_emb", "pos_emb", "ln_f", "head"))
    if sequence_parallel and not whole:
        raise ValueError("sequence parallelism here needs the whole model on these ranks (embeddings to head); "
                         "a pipeline stage's activations would leave it cut along the sequence: use "
                         "sequence_parallel=False with pipeline stages")
    for block in blocks_of(model):
        parallelize_module(block, mesh, block_plan(sequence_parallel))
    if sequence_parallel:       # between blocks the residual stream is cut along the sequence too
        parallelize_module(model, mesh, {
            "tok_emb": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
            "pos_emb": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(0)),
            "ln_f": SequenceParallel(),
            "head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())})
    return model
