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

The Llama-style block (``course_utils.llama``) splits the same way with its own names
(:func:`llama_block_plan`): SwiGLU's ``gate`` and ``up`` by columns, ``down`` by rows; ``k`` and
``v`` by columns too, which hands each rank whole **K/V heads** — so with grouped-query attention
``t`` must divide ``n_kv_head`` as well as ``n_head``, and rank r's query heads then read exactly
the K/V heads it holds. Its RMSNorms run on the sequence-parallel ranks' tokens like LayerNorms.
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


def check_split(config, t: int) -> None:
    """Raise a ValueError saying what to pick unless ``t`` ranks split the heads of ``config`` (a
    ``course_utils.shape.GPTConfig``) evenly: ``n_head`` query heads and ``n_kv_head`` K/V heads."""
    if config.n_head % t:
        raise ValueError(f"n_head={config.n_head} heads do not split over {t} ranks; pick t dividing n_head")
    if config.kv_heads % t:
        raise ValueError(f"n_kv_head={config.kv_heads} K/V heads do not split over {t} ranks: each rank needs "
                         f"whole K/V heads for its query heads; pick t dividing n_kv_head={config.kv_heads}")


def llama_block_plan(sequence_parallel: bool = False) -> dict:
    """How each layer of a Llama-style block (``course_utils.llama.Block``) is split: :func:`block_plan`
    with SwiGLU's names (``gate``, ``up`` by columns, ``down`` by rows). Attention takes the tokens'
    ``positions`` as a second input, left as it is (every rank rotates its heads by the same positions);
    the MLP's input is prepared once too, so ``gate`` and ``up`` share one all-reduce of its gradient."""
    tokens = Shard(1) if sequence_parallel else Replicate()   # the block's input: my tokens, or all of them
    plan = {name: ColwiseParallel() for name in ("attn.q", "attn.k", "attn.v", "mlp.gate", "mlp.up")}
    plan |= {"attn": PrepareModuleInput(input_layouts=(tokens, None), desired_input_layouts=(Replicate(), None)),
             "mlp": PrepareModuleInput(input_layouts=(tokens,), desired_input_layouts=(Replicate(),)),
             "attn.proj": RowwiseParallel(output_layouts=tokens), "mlp.down": RowwiseParallel(output_layouts=tokens)}
    if sequence_parallel:   # the RMSNorms on my tokens only
        plan |= {"ln_1": SequenceParallel(), "ln_2": SequenceParallel()}
    return plan


def parallelize_gpt(model: nn.Module, mesh, sequence_parallel: bool = False) -> nn.Module:
    """Split every block of ``model`` (a ``course_utils.gpt.GPT`` or ``course_utils.llama.Llama``, or a
    pipeline stage of one: ``course_utils.composed.GPTStage``) over ``mesh`` by :func:`block_plan`
    (:func:`llama_block_plan` for SwiGLU blocks), in place; with sequence parallelism the embeddings,
    final norm and head too. Returns it."""
    t, config = mesh.size(), model.config
    check_split(config, t)
    learned = config.positions == "learned"   # a position table to split too (RoPE has none)
    whole = all(hasattr(model, name) for name in ("tok_emb", "ln_f", "head") + (("pos_emb",) if learned else ()))
    if sequence_parallel and not whole:
        raise ValueError("sequence parallelism here needs the whole model on these ranks (embeddings to head); "
                         "a pipeline stage's activations would leave it cut along the sequence: use "
                         "sequence_parallel=False with pipeline stages")
    plan = llama_block_plan(sequence_parallel) if config.mlp == "swiglu" else block_plan(sequence_parallel)
    for block in blocks_of(model):
        parallelize_module(block, mesh, plan)
    if sequence_parallel:       # between blocks the residual stream is cut along the sequence too
        parallelize_module(model, mesh, {
            "tok_emb": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
            **({"pos_emb": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(0))} if learned else {}),
            "ln_f": SequenceParallel(),
            "head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())})
    return model
