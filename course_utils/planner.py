"""Which layout? Per-GPU memory, step time and MFU of a GPT- or Llama-shaped transformer under (dp, tp,
pp, cp, ep, ZeRO, recomputation, sequence parallelism, overlap, microbatch size) on a cluster — pure
arithmetic, so that every number can be checked by hand.

Three inputs: the model, a ``course_utils.shape.GPTConfig`` (GPT-2's block or a Llama-3-style one:
grouped-query attention, SwiGLU, RMSNorm, RoPE); the grid, a ``course_utils.layout.Layout`` (the one
``course_utils.composed`` trains on); and how each rank trains, a :class:`Recipe`.

Notation: L = ``n_layer`` layers, h = ``d_model``, a = ``n_head`` query heads of d = ``head_dim``
dimensions, g = ``kv_heads`` K/V heads, f = ``mlp_width``, s = ``block_size`` tokens per sequence,
V = ``vocab_size`` (untied head); with ``n_expert`` E > 0 each block's MLP is E experts of which each
token uses ``top_k`` k (chapter 15); global batch B sequences in microbatches of b; n = dp · tp · pp ·
cp GPUs, ranks ordered tp, cp, dp, pp from the inside out (Megatron-LM's order, and ``Layout``'s);
t = tp, c = cp, p = pp, m = B/(dp·b) microbatches per step.

**Memory** — every pipeline stage is counted (:func:`stage_memory`) and the largest is reported
(:func:`memory`); the planner predicts *live* bytes:

- *model state*: the stage's parameters (:func:`stage_params`: L/p blocks, ``GPTConfig.block_params``;
  of the experts E/ep; the embeddings on the first stage, the head and final norm on the last), ÷ t;
  16 bytes per parameter with Adam in mixed precision (2 + 2 bf16 weights and gradients, 12 fp32
  master weights and moments), the ZeRO stage's share split over the ranks holding the same weights:
  dp·cp for the dense part (context-parallel ranks hold the same weights), dp·cp/ep for the experts
  (``costmodel.ZERO_STAGES``). *Pipeline × ZeRO-3/FSDP* (p > 1): the stage is one FSDP unit, gathered
  for the whole schedule, and its gradients accumulate unsharded until the last microbatch
  (``torch.distributed.pipelining``'s stage sets ``reshard_after_backward(False)`` and
  ``requires_gradient_sync(False)``; chapter 16 shows why one unit per stage): the stage's bf16
  weights are charged whole, and its gradients whole in fp32 (FSDP2 accumulates them in its reduce
  dtype while sync is off: :data:`FSDP_ACCUMULATED_GRAD_BYTES`); only the optimizer state is sharded.
  *ZeRO-3 without a pipeline* adds the units being gathered: two (one in use, the next prefetched) of
  the largest, a block or the V·h head, in bf16 ("gathered").
- *activations* per layer and microbatch (:func:`layer_activations`), 16-bit: with a fused (flash)
  attention kernel and no dropout, 2·s·b·(outside/(t if SP else 1) + inside/t)/c bytes, the values
  per token of ``accounting.block_saved_values`` (outside: the norms' inputs and outputs, copies on
  every TP rank unless sequence parallelism splits them; inside: q, k, v, the attention output and
  the MLP's intermediates, split by t; a MoE block's MLP values once per expert a token visits).
  ``dropout`` adds Megatron's two 1-byte masks (2·s·b·h, outside the TP regions); without ``flash``
  the s×s scores add 2·a·s²·b/t (the softmax output), 5·a·s²·b/t with dropout (its mask and output).
  For GPT-2's block with dropout and no flash this is Korthikanti et al. 2022 (arXiv:2205.05198),
  Table 2: s·b·h·34/t + 5·a·s²·b/t with sequence parallelism, s·b·h·(10 + 24/t) + 5·a·s²·b/t with
  tensor parallelism alone; all ÷ c (each context-parallel rank holds s/c tokens).
  ``recompute="selective"`` (Korthikanti §4.2: the attention core — QKᵀ, softmax, dropout, ·V — is
  recomputed in backward) removes the a·s² term; with ``flash`` it changes nothing: the fused kernel
  keeps no scores and already recomputes them in its backward. ``recompute="full"`` keeps each
  layer's input, 2·s·b·h/((t if SP else 1)·c), and one layer's activations while it is recomputed.
  ``recompute="op"`` is torchtitan's per-op policy (:func:`op_checkpointing`: the block's input, the
  attention kernel's output, the reduce-scatters' outputs and every odd-numbered matmul's output kept).
  An uneven split gives the middle stages the extra layers (:func:`stage_layers`, torchtitan's and
  Llama 3's rule); the fullest stage sets the pace.
  Under 1F1B stage i holds p − i microbatches of its L/p layers at its peak: the first stage L
  layers' worth, the last L/p.
- *the peak* under full recomputation is the loss's backward or one layer's recomputation, whichever
  is larger (the two never coincide).
- *the loss* (last stage, :func:`logits_bytes`): the fp32 logits the cross-entropy keeps,
  4·s·b·V/(t·c) ("logits"), and beside them at the loss's backward two fp32 gradients of that size
  ("logits gradient"; chapter 13 measures 3·4·N·V in all), three with a vocabulary-parallel loss
  (t > 1, PyTorch's ``loss_parallel``: :data:`LOSS_PARALLEL_GRADIENTS`).
- *reserved vs live*: published runs report the allocator's reserved peak
  (``torch.cuda.max_memory_reserved``), which exceeds the live bytes by the caching allocator's
  fragmentation and rounding; ``allocator_overhead`` (reserved ÷ live, default 1.0 = live bytes)
  adds that as its own part ("allocator"). NCCL's buffers and the CUDA context are not counted.

**Time** of one step (:func:`step_time`), per part:

- *compute*: a constant ``efficiency``: the FLOPs (``GPTConfig.flops_per_token``: 6N + 12·L·s·a·d
  per token, PaLM's convention; one more forward of everything with full recomputation, ×4/3; with
  selective recomputation and no flash the attention core's forward again, 4·L·s·a·d per token) at
  ``efficiency`` × peak, ÷ n. A :class:`~course_utils.gemm_efficiency.GemmEfficiency`: each of the
  layer's GEMMs under the layout (:func:`layer_gemms`: b·s/c tokens × h × a·d/t for q, etc.; the
  backward's two GEMMs per weight in their own shapes) at its own η(m, n, k) × peak (L/p layers, m
  microbatches; the head's time shared over the stages, as the FLOP count shares it). A
  GemmEfficiency of constant η gives the constant's time exactly (when
  t ≤ g; with t > g each rank computes a copy of one K/V head's projections).
- *bubble*: (p − 1)/(v·m) of the compute (1F1B; v = ``virtual_stages`` > 1: Megatron's interleaved
  schedule, v times the pipeline sends, Narayanan et al. 2021 §2.2.2). With an uneven split the
  blocks' FLOPs are priced at the fullest stage's ⌈L/p⌉·p/L.
- *tensor parallel* (with ``recompute="op"`` the backward runs the unsaved all-gathers, or without
  SP all-reduces, again: 5 or 6 in all): per layer and microbatch, 2 all-reduces forward and 2 backward of s·b·h·2/c
  bytes (2 more when recomputing fully) — Megatron's TP without sequence parallelism; with it the
  same bytes move as all-gather/reduce-scatter pairs (an all-reduce *is* a reduce-scatter and an
  all-gather), so the time is the same either way. Never overlapped (each collective sits between
  two matmuls that need its result).
- *context parallel*: the ring passes the K and V of this rank's g/t K/V heads (one head when t > g):
  kv = 2·s·b·(g/t)·d·2 bytes per sequence, sent in chunks of kv/c, one hop each (α + kv/c ÷
  bandwidth); 3(c − 1) + 1 of them per layer and microbatch (:func:`cp_ring_messages`: forward K, V;
  backward K, V again and dK, dV with them, one hop more home), 4(c − 1) + 1 with full
  recomputation. This is the course's ring (chapter 14) and Llama 3's all-gather design in bytes;
  torchtitan at 9dec370 repeats K/V to all a heads before attention, so its ring carries a/t heads.
- *expert parallel*: the all-to-alls of each rank's k·s·b·h·2/(t·c) routed bytes (dispatch and
  combine, forward and backward; 6 with full recomputation). Never overlapped.
- *data parallel* (gradients at ``grad_reduce_bytes`` each, weights in bf16): the stage's gradient
  all-reduce (ZeRO 0–2); ZeRO-3: a reduce-scatter of the
  gradients and, per microbatch, a forward and a backward all-gather of the weights (0.5 + m
  all-reduces' worth); ZeRO-3 under a pipeline: one all-gather per step (the stage stays gathered).
- *pipeline*: one send of s·b·h·2/(t·c) bytes per microbatch and stage boundary each way.

Each group runs on NVLink when its ranks fit in a node, else on InfiniBand; the ring α-β model times
each collective (``costmodel.collective_time``: an all-reduce of x bytes sends 2(n − 1)/n · x in
2(n − 1) messages, an all-gather, reduce-scatter or all-to-all half that).

**Overlap** (``Recipe.overlap``; without it every transfer is exposed, as above). Per dimension,
what hides behind what, and the condition (:func:`layer_seconds` gives a layer's forward and
backward seconds, F and 2F with a constant efficiency; ℓ = L/p layers on the stage):

- *DP gradient all-reduce / reduce-scatter*: sent in ℓ per-layer buckets during the last
  microbatch's backward, each after its layer's backward: exposed = max(X/ℓ, X − (ℓ − 1)·B) for X
  seconds of traffic and B seconds of a layer's backward — the last bucket always, each other one by
  what exceeds its layer's backward.
- *ZeRO-3 all-gathers*: each layer's gather (G = the gather's time / ℓ) is prefetched behind the
  previous layer's compute: per forward or backward pass, G (the first layer's) + (ℓ − 1)·max(0,
  G − the layer's compute of that pass); per microbatch (pp = 1) or once per step (pp > 1).
- *CP ring*: each message (α + a chunk's bytes ÷ bandwidth) runs beside a ring step's attention core
  (the forward core ÷ c), except dK and dV's last hop home, which nothing follows: exposed =
  (messages − 1)·max(0, message − step compute) + one message.
- *PP sends*: each hides behind the next microbatch's compute of the stage, except the first forward
  and the last backward send (the fill and drain): 2·τ + (m − 1)·(max(0, τ − ℓ·F) + max(0, τ − ℓ·B)),
  τ one send's time.
- *TP and EP*: not overlapped (stated above). Concurrent transfers of different dimensions are not
  made to share a link: the overlap rules are each optimistic in that way.

MFU = model FLOPs (without recomputation) per second ÷ (n × peak). ``efficiency`` is the fraction of
peak a GPU reaches on this model's matrix multiplies: an input (a constant, or a fitted
``gemm_efficiency`` curve measured by ``benchmarks/gemm_efficiency.py``), not a prediction. Left out:
capacity factors and load imbalance between experts, zero-bubble schedules, HSDP,
activation offloading, NCCL's buffers.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

from . import accounting, costmodel
from .gemm_efficiency import GemmEfficiency
from .layout import Layout
from .shape import GPTConfig

BYTES_PER_PARAM = costmodel.BYTES_PER_PARAM[("amp", "adam")]   # (weights, gradients, optimizer state)
RECOMPUTE = ("none", "selective", "op", "full")
def cp_ring_messages(cp: int, recompute: str = "none") -> int:
    """Messages each rank sends per layer and microbatch in the ring of ``cp`` ranks, each one chunk of
    K and V (1/cp of the sequence's): forward cp − 1; backward 2(cp − 1) + 1 — K and V around the ring
    again, and dK, dV travelling with them and one more hop home (chapter 14 counts exactly this); with
    full recomputation the forward's cp − 1 again. Other recomputation modes keep the attention output:
    the backward's ring brings K and V back anyway."""
    return 3 * (cp - 1) + 1 + (cp - 1 if recompute == "full" else 0) if cp > 1 else 0
FSDP_ACCUMULATED_GRAD_BYTES = 4
"""Bytes per parameter of the unsharded gradients a pipeline stage under FSDP2 accumulates between
microbatches: with gradient sync off, FSDP2 keeps them in its reduce dtype, float32 in mixed precision
(``torch.distributed.fsdp``'s ``FSDPParam.to_accumulated_grad_if_needed``)."""
LOSS_PARALLEL_GRADIENTS = 3
"""Float32 N·V/t tensors beside the kept log-probabilities at the peak of a vocabulary-parallel loss's
backward (``torch.distributed.tensor.parallel.loss_parallel``: ``_nll_loss_and_log_softmax_backward``
holds a zeroed gradient, their sum with exp(x) and the product with the incoming gradient); the
single-device loss holds two (chapter 13 measures it)."""
LOSS_BYTES_PER_LOGIT = 4
"""fp32: the cross-entropy keeps its logits (log-probabilities) in fp32 for backward."""


@dataclass(frozen=True)
class Cluster:
    """``gpus`` GPUs, ``gpus_per_node`` to a node; per GPU: ``hbm_gb`` of memory (10⁹ bytes),
    ``peak_tflops`` dense bf16, ``nvlink_gbps`` and ``ib_gbps`` one-way bandwidth in GB/s, and
    the latency ``alpha_s`` of one message, in seconds."""

    gpus: int
    gpus_per_node: int = 8
    hbm_gb: float = 80.0
    peak_tflops: float = 989.0
    nvlink_gbps: float = 450.0
    ib_gbps: float = 50.0
    alpha_s: float = 5e-6


HBM_80GB = 80 * 2**30 / 1e9      # the "80 GB" cards hold 80 GiB: 85.9 × 10⁹ bytes (the planner's GB)
H100 = dict(hbm_gb=HBM_80GB, peak_tflops=989.0, nvlink_gbps=450.0, ib_gbps=50.0)    # 8 × 400 Gb/s per node
H200 = dict(hbm_gb=141.0, peak_tflops=989.0, nvlink_gbps=450.0, ib_gbps=50.0)
A100 = dict(hbm_gb=HBM_80GB, peak_tflops=312.0, nvlink_gbps=300.0, ib_gbps=25.0)    # 8 × 200 Gb/s per node

@dataclass(frozen=True)
class Recipe:
    """How each rank trains, on whatever layout: the ``zero`` stage (0–3) over the ranks holding
    the same weights; ``recompute`` "none", "selective" (Korthikanti et al. 2022: the attention
    core only) or "full"; ``microbatch`` sequences per microbatch; ``flash``: a fused attention
    kernel (no s×s scores kept); ``sequence_parallel``: tensor parallelism also splits the norms'
    regions by sequence (Megatron-LM's SP; without it those activations are copies on every TP
    rank); ``overlap``: data-, context- and pipeline-parallel transfers hide behind compute where
    the overlap model says they can (False: every transfer is exposed); ``dropout``: the 2021–2022
    Megatron runs' dropout, whose masks are kept for backward; ``virtual_stages``: model chunks per
    pipeline rank (Megatron's interleaved 1F1B, Narayanan et al. 2021 §2.2.2; 1: plain 1F1B).
    ``recompute="op"`` is torchtitan's per-op selective checkpointing (its ``selective_ac_option="op"``):
    every matmul's, attention kernel's and reduce-scatter's output is saved except every second
    matmul's, everything else recomputed in backward. ``grad_reduce_bytes``: bytes per gradient element
    the data-parallel reduction moves (2: bf16; 4: an fp32 reduce dtype, torchtitan's default
    ``mixed_precision_reduce="float32"``)."""

    zero: int = 1
    recompute: str = "none"
    microbatch: int = 1
    flash: bool = True
    sequence_parallel: bool = True
    overlap: bool = False
    dropout: bool = False
    virtual_stages: int = 1
    grad_reduce_bytes: int = 2


@dataclass
class Prediction:
    """What :func:`predict` says of one layout and recipe: bytes per GPU by part (the busiest pipeline
    stage; live bytes unless ``allocator_overhead`` > 1), seconds per step by part (what is exposed),
    MFU, and why it is impossible (``reason``; None when it is possible)."""

    layout: Layout
    recipe: Recipe
    memory: dict[str, float] = field(default_factory=dict)
    time: dict[str, float] = field(default_factory=dict)
    mfu: float = 0.0
    reason: str | None = None

    @property
    def memory_gb(self) -> float:
        return sum(self.memory.values()) / 1e9

    @property
    def step_s(self) -> float:
        return sum(self.time.values())


def _check(model: GPTConfig, layout: Layout, recipe: Recipe, global_batch: int, cluster: Cluster) -> str | None:
    """Why ``layout`` and ``recipe`` cannot run this model on this cluster, or None."""
    n = layout.world_size
    if n != cluster.gpus:
        return f"dp·tp·pp·cp = {n}, not the cluster's {cluster.gpus} GPUs"
    if layout.replicate > 1:
        return f"replicate={layout.replicate}: the planner does not model HSDP; give the dp ranks and a ZeRO stage"
    if model.n_head % layout.tp:
        return f"{model.n_head} heads do not split over tp={layout.tp}"
    if model.kv_heads % layout.tp and layout.tp % model.kv_heads:
        return (f"{model.kv_heads} K/V heads over tp={layout.tp}: tp must divide them, or they must divide tp "
                f"(each rank then keeps a copy of one K/V head)")
    if layout.tp > cluster.gpus_per_node:
        return f"tp={layout.tp} spans nodes: its all-reduces would cross InfiniBand every layer"
    if model.block_size % (2 * layout.cp) and layout.cp > 1:
        return (f"a sequence of {model.block_size} does not split into 2·cp={2 * layout.cp} chunks "
                f"(load-balanced ring)")
    if layout.ep > 1 and not model.n_expert:
        return f"ep={layout.ep} needs experts; this model's MLPs are dense"
    if model.n_expert % layout.ep:
        return f"{model.n_expert} experts over ep={layout.ep}: ep must divide the experts and dp·cp"
    if model.n_layer < layout.pp * recipe.virtual_stages:
        return (f"{model.n_layer} layers cannot fill pp={layout.pp} stages × {recipe.virtual_stages} "
                f"virtual stages")
    if recipe.recompute == "op" and (model.n_expert or not recipe.flash or model.bias):
        return ("recompute='op' (torchtitan's per-op policy) is modelled for dense, bias-free models with a "
                "fused attention")
    b = recipe.microbatch
    if global_batch % (layout.dp * b):
        return f"a batch of {global_batch} does not split into dp={layout.dp} × microbatches of {b}"
    if layout.pp > 1 and global_batch // (layout.dp * b) < layout.pp:
        return f"{global_batch // (layout.dp * b)} microbatches cannot fill pp={layout.pp} stages"
    if not isinstance(recipe.virtual_stages, int) or recipe.virtual_stages < 1 or (
            recipe.virtual_stages > 1 and (global_batch // (layout.dp * b)) % layout.pp):
        return (f"virtual_stages={recipe.virtual_stages!r}: a positive integer; above 1 (interleaved 1F1B) "
                f"the microbatches must be a multiple of pp={layout.pp}")
    if recipe.grad_reduce_bytes not in (2, 4):
        return f"grad_reduce_bytes must be 2 (bf16) or 4 (fp32), got {recipe.grad_reduce_bytes!r}"
    if recipe.recompute not in RECOMPUTE or recipe.zero not in costmodel.ZERO_STAGES:
        return (f"recompute must be one of {RECOMPUTE} and zero one of 0-3, got {recipe.recompute!r}, "
                f"{recipe.zero!r}")
    return None


# -- memory ---------------------------------------------------------------------------------------

def stage_layers(model: GPTConfig, layout: Layout) -> list[int]:
    """Blocks on each pipeline stage: ⌊L/p⌋ each, the remainder one more on the middle stages — the
    first (embeddings) and the last (the head and the loss) keep the fewest. torchtitan's default split
    (``generate_split_points``, commit 9dec370), and Llama 3 405B's 126 layers on 16 stages, one fewer
    on the first and the last (Grattafiori et al. 2024, §3.3.2). With p − 1 extra layers or more the
    last stage takes what is left."""
    base, extra = divmod(model.n_layer, layout.pp)
    if layout.pp == 1:
        return [model.n_layer]
    layers = [base] + [base + 1 if i <= extra else base for i in range(1, layout.pp - 1)]
    return layers + [model.n_layer - sum(layers)]


def stage_blocks(model: GPTConfig, layout: Layout) -> int:
    """Blocks on the fullest pipeline stage (:func:`stage_layers`): it sets the pace of the pipeline."""
    return max(stage_layers(model, layout))


def _stage_params(model: GPTConfig, layout: Layout, stage: int) -> tuple[float, float]:
    """(dense, experts) parameters one GPU of pipeline stage ``stage`` holds, before ZeRO."""
    dense_block, experts_block = model.block_params()
    blocks = stage_layers(model, layout)[stage]
    dense = blocks * dense_block
    if stage == 0:
        dense += model.embedding_params()                        # V·h tokens (+ s·h learned positions)
    if stage == layout.pp - 1:
        dense += model.vocab_size * model.d_model + model.norm_params()    # head, final norm
    return dense / layout.tp, blocks * experts_block / layout.ep / layout.tp


def stage_params(model: GPTConfig, layout: Layout, stage: int | None = None) -> tuple[float, float]:
    """(dense, experts) parameters one GPU of pipeline stage ``stage`` holds, before ZeRO: its L/pp
    blocks (of the experts, E/ep), the embeddings (``GPTConfig.embedding_params``: V·h tokens, and
    s·h positions when learned) on the first stage, the V·h head and the final norm on the last (both
    on one GPU when pp = 1); all split by tp (the embedding and head by vocabulary, as Megatron-LM
    does). ``stage=None``: the stage holding the most parameters (the first one with learned
    positions, the last one with RoPE)."""
    if stage is None:
        return max((_stage_params(model, layout, i) for i in range(layout.pp)), key=sum)
    if not 0 <= stage < layout.pp:
        raise ValueError(f"stage must be in 0..{layout.pp - 1} (pp={layout.pp}), got {stage}")
    return _stage_params(model, layout, stage)


def params_per_gpu(model: GPTConfig, layout: Layout) -> float:
    """Parameters one GPU of the pipeline stage holding the most holds, before ZeRO (:func:`stage_params`)."""
    return sum(stage_params(model, layout))


def layer_activations(model: GPTConfig, layout: Layout, recipe: Recipe) -> float:
    """Bytes one layer keeps for backward, per microbatch of ``recipe.microbatch`` sequences, on one GPU,
    without full recomputation (the module docstring's activation rule): 16-bit values of
    ``accounting.block_saved_values`` (outside ÷ tp only with sequence parallelism, inside ÷ tp; a
    MoE block's MLP values once per expert a token visits), Megatron's two 1-byte dropout masks
    (with ``dropout``; outside the TP regions), the s×s scores (without ``flash``, unless the attention
    core is recomputed: ``recompute="selective"``), all ÷ cp."""
    s, b, h, a = model.block_size, recipe.microbatch, model.d_model, model.n_head
    t, c = layout.tp, layout.cp
    sp = t if recipe.sequence_parallel else 1
    outside, inside = accounting.block_saved_values(replace(model, n_expert=0))
    if model.n_expert:       # q, k, v and the attention output stay; the MLP's values once per expert visited
        attention = 2 * a * model.head_dim + 2 * model.kv_heads * model.head_dim
        inside = attention + model.routed * (inside - attention)
    if recipe.recompute == "op":
        return 2 * s * b * op_checkpointing(model, layout, recipe)[0] / c
    kept = 2 * s * b * (outside / sp + inside / t)
    if recipe.dropout:       # 1-byte masks of the attention block's and the MLP's output dropouts
        kept += 2 * s * b * h / sp
    if not recipe.flash and recipe.recompute != "selective":
        # softmax output (2 bytes), and with dropout its mask (1) and the dropped-out scores (2)
        kept += (5 if recipe.dropout else 2) * a * s * s * b / t
    return kept / c


def block_matmuls(model: GPTConfig, layout: Layout) -> list[tuple[str, float, float]]:
    """A dense block's matmuls on one GPU in the order they run: (name, output values per token,
    forward FLOPs per token). Column-parallel ones (q, k, v, fc or gate and up) write their 1/t share;
    row-parallel ones (proj, the MLP's proj or down) write partial sums of all h values, reduced after."""
    h, t, d = model.d_model, layout.tp, model.head_dim
    q, kv, f = model.n_head * d / t, max(model.kv_heads // t, 1) * d, model.mlp_width / t
    mms = [("q", q, 2 * h * q), ("k", kv, 2 * h * kv), ("v", kv, 2 * h * kv), ("proj", h, 2 * q * h)]
    if model.mlp == "gelu":
        return mms + [("fc", f, 2 * h * f), ("mlp proj", h, 2 * f * h)]
    return mms + [("gate", f, 2 * h * f), ("up", f, 2 * h * f), ("down", h, 2 * f * h)]


def op_checkpointing(model: GPTConfig, layout: Layout, recipe: Recipe) -> tuple[float, float]:
    """torchtitan's per-op selective checkpointing (``recompute="op"``) of one dense block: (values per
    token kept for backward, forward FLOPs per token recomputed). Kept: the block's input (÷ t with
    SP), the attention kernel's output and log-sum-exp (a/t fp32 values: 2 per head in 16-bit units),
    the reduce-scatters' outputs (h/t each, two, with SP and t > 1), and the output of every second
    matmul, counted afresh in each block's forward: the 1st, 3rd, 5th… (q, v, gate, down in a SwiGLU
    block) are kept, the others (k, proj, up) recomputed in backward (torchtitan
    ``_apply_ac_to_transformer_block``, ``_save_list``, commit 9dec370: the policy's counter lives in
    one checkpointed call). Matmuls with a bias run as ``addmm``, which the policy neither counts nor
    saves: only bias-free blocks are modelled."""
    t = layout.tp
    sp = t if recipe.sequence_parallel else 1
    mms = block_matmuls(model, layout)
    kept_mm = sum(out for _, out, _ in mms[0::2])
    recomputed = sum(flops for *_, flops in mms[1::2])
    attention = model.n_head * model.head_dim / t + 2 * model.n_head / t
    scattered = 2 * model.d_model / t if recipe.sequence_parallel and t > 1 else 0
    return model.d_model / sp + kept_mm + attention + scattered, recomputed


def logits_bytes(model: GPTConfig, layout: Layout, recipe: Recipe) -> dict[str, float]:
    """The loss's bytes on the last stage for one microbatch at its peak, split by vocabulary over tp and
    by sequence over cp: the fp32 log-probabilities the cross-entropy keeps for backward,
    4·s·b·V/(tp·cp) ("logits"), and, during log-softmax's backward, the two fp32 gradients alive beside
    them — of the log-probabilities and of the logits — twice that ("logits gradient"): 3·4·N·V bytes
    for N tokens, PyTorch's ``cross_entropy`` on logits cast to fp32, as chapter 13 measures
    (``accounting.peak_tensor_bytes``). Split over tp > 1 ranks by vocabulary, PyTorch's
    ``loss_parallel`` holds three gradients' worth beside the log-probabilities at its backward's
    peak (:data:`LOSS_PARALLEL_GRADIENTS`). Megatron-LM's fused vocabulary-parallel cross-entropy
    writes the gradient in place of what it kept, which would cut this to a third."""
    kept = LOSS_BYTES_PER_LOGIT * model.block_size * recipe.microbatch * model.vocab_size / (layout.tp * layout.cp)
    return {"logits": kept, "logits gradient": (LOSS_PARALLEL_GRADIENTS if layout.tp > 1 else 2) * kept}


def stage_memory(model: GPTConfig, layout: Layout, recipe: Recipe, stage: int, *,
                 allocator_overhead: float = 1.0, global_batch: int | None = None) -> dict[str, float]:
    """Bytes on one GPU of pipeline stage ``stage`` by part: weights, gradients, optimizer state,
    activations, the loss's logits and their gradient (last stage only), and the allocator's extra
    (``allocator_overhead`` − 1 times the rest: 1.0 predicts live bytes; see the module docstring)."""
    if allocator_overhead < 1:
        raise ValueError(f"allocator_overhead is reserved ÷ live bytes, at least 1.0 (1.0: live bytes), "
                         f"got {allocator_overhead!r}")
    s, b, h = model.block_size, recipe.microbatch, model.d_model
    p, t, c = layout.pp, layout.tp, layout.cp
    dense, experts = stage_params(model, layout, stage)
    replicas = layout.dp * c                          # ranks holding the same dense weights
    sharded = costmodel.ZERO_STAGES[recipe.zero]
    unsharded_stage = recipe.zero == 3 and p > 1      # FSDP under a pipeline: gathered for the whole schedule
    state = {}
    for name, nbytes, cut in zip(("weights", "gradients", "optimizer"), BYTES_PER_PARAM, sharded):
        cut = cut and not (unsharded_stage and name != "optimizer")
        if unsharded_stage and name == "gradients":
            nbytes = FSDP_ACCUMULATED_GRAD_BYTES
        state[name] = (dense / (replicas if cut else 1) + experts / (replicas // layout.ep if cut else 1)) * nbytes
    if recipe.zero == 3 and p == 1:   # FSDP gathers one unit at a time, the next one prefetched
        dense_block, experts_block = model.block_params()      # a GPU gathers its E/ep experts only
        biggest = max(dense_block + experts_block / layout.ep, model.vocab_size * model.d_model) / t
        state["gathered"] = 2 * 2 * biggest
    m = global_batch // (layout.dp * b) if global_batch else None      # microbatches (None: as many as needed)
    in_flight = p - stage if m is None else min(p - stage, m)   # 1F1B: microbatches held at this stage's peak
    v = recipe.virtual_stages
    if v > 1:     # Megatron's interleaved warm-up: 2(p − i − 1) + (v − 1)·p chunks (+ 1) of 1/v of the stage,
        chunks = 2 * (p - stage - 1) + (v - 1) * p + 1          # at most all m·v of them
        in_flight = (chunks if m is None else min(chunks, m * v)) / v
    layers = in_flight * stage_layers(model, layout)[stage]
    one_layer = layer_activations(model, layout, recipe)
    loss = logits_bytes(model, layout, recipe) if stage == p - 1 else {"logits": 0.0, "logits gradient": 0.0}
    if recipe.recompute == "full":      # the layers' inputs; one layer recomputed at a time, or the loss
        kept = layers * 2 * s * b * h / ((t if recipe.sequence_parallel else 1) * c)
        if one_layer > sum(loss.values()):     # the peak is a layer's recomputation, not the loss's backward
            kept, loss = kept + one_layer, {"logits": 0.0, "logits gradient": 0.0}
    else:
        kept = layers * one_layer
    live = {**state, "activations": kept, **loss}
    return {**live, "allocator": (allocator_overhead - 1) * sum(live.values())}


def memory(model: GPTConfig, layout: Layout, recipe: Recipe, *, allocator_overhead: float = 1.0,
           global_batch: int | None = None) -> dict[str, float]:
    """Bytes on the busiest GPU by part: :func:`stage_memory` of every pipeline stage, the largest."""
    stages = [stage_memory(model, layout, recipe, i, allocator_overhead=allocator_overhead, global_batch=global_batch)
              for i in range(layout.pp)]
    return max(stages, key=lambda parts: sum(parts.values()))


# -- time -----------------------------------------------------------------------------------------

def layer_gemms(model: GPTConfig, layout: Layout, recipe: Recipe) -> list[tuple[str, int, int, int, float]]:
    """The forward GEMMs of one layer for one microbatch on one GPU: (name, m, n, k, count), an (m × k)
    input times a (k × n) weight, ``count`` times. T = b·s/cp tokens; the weights split by tp:
    q (T, a·d/tp, h), k and v (T, g·d/tp, h; one K/V head per rank when tp > g), the output
    projection (T, h, a·d/tp); the MLP's fc and proj (GELU) or gate, up and down (SwiGLU), f/tp wide;
    with experts, the router (T, E, h; 1/tp of it per rank, as the FLOP count splits it) and each of
    this rank's E/ep experts' matrices on the T·k·ep/E tokens routed to it; the attention core per head
    and ring step: scores (s/cp, s/cp, d) and their weighted sum of v (s/cp, d, s/cp),
    b·(a/tp)·cp times."""
    t, c, e = layout.tp, layout.cp, layout.ep
    s, b, h, d, a = model.block_size, recipe.microbatch, model.d_model, model.head_dim, model.n_head
    tokens = b * s // c
    kv = max(model.kv_heads // t, 1) * d
    gemms = [("q", tokens, a * d // t, h, 1.0), ("k", tokens, kv, h, 1.0), ("v", tokens, kv, h, 1.0),
             ("proj", tokens, h, a * d // t, 1.0),
             ("scores", s // c, s // c, d, b * a / t * c), ("weighted v", s // c, d, s // c, b * a / t * c)]
    f = model.mlp_width // t
    mlp = [("fc", h, f), ("proj", f, h)] if model.mlp == "gelu" else [("gate", h, f), ("up", h, f), ("down", f, h)]
    if model.n_expert:
        routed = max(tokens * model.top_k * e // model.n_expert, 1)
        gemms.append(("router", tokens, model.n_expert, h, 1 / t))
        gemms += [(f"expert {name}", routed, n, k, model.n_expert / e) for name, k, n in mlp]
    else:
        gemms += [(f"mlp {name}", tokens, n, k, 1.0) for name, k, n in mlp]
    return gemms


def _gemm_seconds(m: float, n: float, k: float, cluster: Cluster, efficiency: float | GemmEfficiency) -> float:
    """One (m × k)·(k × n) GEMM at ``efficiency`` (a constant, or η(m, n, k)) × the cluster's peak."""
    eta = efficiency(m, n, k) if isinstance(efficiency, GemmEfficiency) else efficiency
    return 2 * m * n * k / (eta * cluster.peak_tflops * 1e12)


def _pass_seconds(gemms, cluster: Cluster, efficiency) -> tuple[float, float]:
    """(forward, backward) seconds of these GEMMs; backward: the input's gradient (m, k, n) and the
    weight's (k, n, m), the same FLOPs twice, in their own shapes."""
    forward = sum(cnt * _gemm_seconds(m, n, k, cluster, efficiency) for _, m, n, k, cnt in gemms)
    backward = sum(cnt * (_gemm_seconds(m, k, n, cluster, efficiency) + _gemm_seconds(k, n, m, cluster, efficiency))
                   for _, m, n, k, cnt in gemms)
    return forward, backward


def layer_seconds(model: GPTConfig, layout: Layout, recipe: Recipe, cluster: Cluster,
                  efficiency: float | GemmEfficiency) -> dict[str, float]:
    """Seconds of one layer for one microbatch on one GPU: "forward", "backward" (twice the forward's
    FLOPs) and "attention step" (the attention core's forward for one ring step). A constant
    ``efficiency``: the layer's FLOPs (``GPTConfig.flops_per_token``'s share of one block) at that
    fraction of peak; a :class:`GemmEfficiency`: each of :func:`layer_gemms` at its own η(m, n, k)."""
    gemms = layer_gemms(model, layout, recipe)
    core = [g for g in gemms if g[0] in ("scores", "weighted v")]
    if isinstance(efficiency, GemmEfficiency):
        forward, backward = _pass_seconds(gemms, cluster, efficiency)
        attention = _pass_seconds(core, cluster, efficiency)[0]
    else:
        flops = sum(2 * m * n * k * cnt for _, m, n, k, cnt in gemms)
        forward = flops / (efficiency * cluster.peak_tflops * 1e12)
        backward = 2 * forward
        attention = sum(2 * m * n * k * cnt for _, m, n, k, cnt in core) / (efficiency * cluster.peak_tflops * 1e12)
    return {"forward": forward, "backward": backward, "attention step": attention / layout.cp}


def _compute(model: GPTConfig, layout: Layout, recipe: Recipe, global_batch: int, cluster: Cluster,
             efficiency: float | GemmEfficiency) -> float:
    """Seconds of compute per GPU per step (the time rule of the module docstring)."""
    s, b = model.block_size, recipe.microbatch
    n = cluster.gpus
    m = global_batch // (layout.dp * b)
    attention_forward = 4 * model.n_layer * s * model.n_head * model.head_dim      # per token: 1/3 of 12·L·s·a·d
    extra = attention_forward if (recipe.recompute == "selective" and not recipe.flash) else 0
    if recipe.recompute == "op":          # every second matmul's forward again (per token, all ranks)
        extra = model.n_layer * layout.tp * op_checkpointing(model, layout, recipe)[1]
    uneven = stage_blocks(model, layout) * layout.pp / model.n_layer   # the slowest stage's blocks
    if not isinstance(efficiency, GemmEfficiency):
        passes = 4 / 3 if recipe.recompute == "full" else 1.0            # one more forward
        head = 6 * model.d_model * model.vocab_size                      # shared over the stages; checkpointing
        per_token = (model.flops_per_token * passes + extra - head * passes) * uneven + head   # wraps blocks only
        return per_token * global_batch * s / n / (efficiency * cluster.peak_tflops * 1e12)
    layer = layer_seconds(model, layout, recipe, cluster, efficiency)
    tokens = b * s // layout.cp
    head = [("head", tokens, model.vocab_size // layout.tp, model.d_model, 1.0)]
    head_fwd, head_bwd = _pass_seconds(head, cluster, efficiency)
    blocks = stage_blocks(model, layout)
    per_microbatch = blocks * (layer["forward"] + layer["backward"]) + (head_fwd + head_bwd) / layout.pp
    if recipe.recompute == "full":
        per_microbatch += blocks * layer["forward"]                  # the blocks' forward again, not the head
    elif recipe.recompute == "op":        # the recomputed matmuls' share of the block's matmuls
        mms = block_matmuls(model, layout)
        matmuls = [g for g in layer_gemms(model, layout, recipe) if g[0] not in ("scores", "weighted v")]
        per_microbatch += blocks * _pass_seconds(matmuls, cluster, efficiency)[0] * op_checkpointing(
            model, layout, recipe)[1] / sum(flops for *_, flops in mms)
    elif extra:
        per_microbatch += blocks * layer["attention step"] * layout.cp
    return m * per_microbatch


def _hidden(total: float, pieces: int, compute_each: float) -> float:
    """Exposed seconds of ``total`` transfer time sent in ``pieces`` equal pieces, each after one of
    ``pieces`` equal blocks of compute: the last piece is exposed, every other one by what it exceeds
    its block: max(total/pieces, total − (pieces − 1)·compute_each)."""
    return max(total / pieces, total - (pieces - 1) * compute_each)


def step_time(model: GPTConfig, layout: Layout, recipe: Recipe, global_batch: int, cluster: Cluster,
              efficiency: float | GemmEfficiency) -> dict[str, float]:
    """Seconds of one step by part: compute, bubble, and the exposed traffic of each kind of
    parallelism (all of it without ``recipe.overlap``; what the overlap rules leave with it)."""
    h, s, b, k = model.d_model, model.block_size, recipe.microbatch, model.routed
    t, p, d, c, e = layout.tp, layout.pp, layout.dp, layout.cp, layout.ep
    m = global_batch // (d * b)
    compute = _compute(model, layout, recipe, global_batch, cluster, efficiency)
    link = lambda inside: (cluster.nvlink_gbps if inside else cluster.ib_gbps) * 1e9  # noqa: E731
    ring = lambda nbytes, ranks, inside: costmodel.collective_time(  # noqa: E731  # an all-reduce of nbytes
        "all_reduce", 2 * (ranks - 1) / ranks * nbytes, ranks, cluster.alpha_s, 1 / link(inside))
    node = cluster.gpus_per_node
    blocks = stage_blocks(model, layout)
    layer_passes = blocks * m                                          # (layer, microbatch) pairs per step
    redo = recipe.recompute == "full"
    # TP: 2 all-reduces forward and 2 backward per layer (with SP: all-gather + reduce-scatter pairs, same bytes)
    # recompute="op" saves the reduce-scatters but not the all-gathers (SP) or all-reduces (no SP): the
    # backward's recomputation runs those again — one more all-reduce's worth with SP, two without
    again = 2 if redo else {True: 1, False: 2}[recipe.sequence_parallel] if recipe.recompute == "op" else 0
    tp = layer_passes * (4 + again) * ring(s * b * h * 2 / c, t, True)
    # CP: the ring passes chunks of K and V of this rank's K/V heads (cp_ring_messages per layer)
    kv = 2 * s * b * max(model.kv_heads // t, 1) * model.head_dim * 2  # K and V of a whole sequence, bf16
    message = cluster.alpha_s + kv / c / link(t * c <= node)          # one chunk, one hop
    messages = cp_ring_messages(c, recipe.recompute)
    cp = layer_passes * messages * message
    routed = k * s * b * h * 2 / (t * c)                               # bytes each rank sends to its experts
    ep = layer_passes * (6 if redo else 4) * costmodel.collective_time(
        "all_to_all", routed * (e - 1) / e, e, cluster.alpha_s, 1 / link(t * c * e <= node))
    dense, experts = stage_params(model, layout)                       # the stage holding the most
    inside = t * c * d <= node
    def one_reduce(nbytes: int) -> float:      # an all-reduce of the stage's parameters at nbytes each
        return ring(nbytes * dense, d * c, inside) + (ring(nbytes * experts, d * c // e, inside) if experts else 0.0)

    if recipe.zero == 3:
        # per microbatch a forward and a backward all-gather of the weights (half an all-reduce each),
        # one reduce-scatter of the gradients; under a pipeline the stage stays gathered: one all-gather
        gathers = 1 if p > 1 else 2 * m
        dp_parts = {"reduce-scatter": 0.5 * one_reduce(recipe.grad_reduce_bytes),
                    "all-gathers": gathers * 0.5 * one_reduce(2)}
    else:
        dp_parts = {"all-reduce": one_reduce(recipe.grad_reduce_bytes)}
    hop = cluster.alpha_s + s * b * h * 2 / (t * c) / link(False)      # one microbatch's activations, one way
    v = recipe.virtual_stages                                          # interleaved: v times the sends
    pp = 2 * m * v * hop if p > 1 else 0.0
    if recipe.overlap:
        layer = layer_seconds(model, layout, recipe, cluster, efficiency)
        per_step = layer["attention step"]
        # each message hides behind a ring step's attention, except dK, dV's last hop home
        cp = layer_passes * ((messages - 1) * max(0.0, message - per_step) + message) if c > 1 else 0.0
        synced = dp_parts.pop("all-reduce", 0.0) + dp_parts.pop("reduce-scatter", 0.0)
        exposed = _hidden(synced, blocks, layer["backward"]) if synced else 0.0
        if "all-gathers" in dp_parts:
            gather = 0.5 * one_reduce(2) / blocks                      # one layer's weights, bf16
            fwd = gather + (blocks - 1) * max(0.0, gather - layer["forward"])
            bwd = gather + (blocks - 1) * max(0.0, gather - layer["backward"])
            exposed += fwd if p > 1 else m * (fwd + bwd)
        dp_parts = {"exposed": exposed}
        if p > 1:                  # each send behind the next chunk's compute (v chunks of blocks/v)
            chunk = blocks / v
            pp = 2 * hop + (m * v - 1) * (max(0.0, hop - chunk * layer["forward"])
                                          + max(0.0, hop - chunk * layer["backward"]))
    return {"compute": compute, "bubble": compute * (p - 1) / (v * m), "tensor parallel": tp,
            "context parallel": cp, "expert parallel": ep, "data parallel": sum(dp_parts.values()), "pipeline": pp}


def predict(model: GPTConfig, layout: Layout, recipe: Recipe, global_batch: int, cluster: Cluster,
            efficiency: float | GemmEfficiency = 0.5, *, allocator_overhead: float = 1.0) -> Prediction:
    """Memory, time and MFU of ``recipe`` on ``layout``; ``reason`` says why it cannot run (or does
    not fit). ``efficiency``: a constant fraction of peak, or a :class:`GemmEfficiency` pricing each GEMM
    by its sizes; ``allocator_overhead``: reserved ÷ live bytes (1.0: live bytes)."""
    result = Prediction(layout, recipe, reason=_check(model, layout, recipe, global_batch, cluster))
    if result.reason:
        return result
    result.memory = memory(model, layout, recipe, allocator_overhead=allocator_overhead, global_batch=global_batch)
    if result.memory_gb > cluster.hbm_gb:
        result.reason = f"needs {result.memory_gb:.0f} GB per GPU, has {cluster.hbm_gb:.0f} GB"
    result.time = step_time(model, layout, recipe, global_batch, cluster, efficiency)
    result.mfu = model.flops_per_token * global_batch * model.block_size / result.step_s / (
        cluster.gpus * cluster.peak_tflops * 1e12)
    return result


def divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def plan(model: GPTConfig, global_batch: int, cluster: Cluster, efficiency: float | GemmEfficiency = 0.5,
         microbatches: tuple[int, ...] = (1, 2, 4, 8), recomputes: tuple[str, ...] = ("none", "full"), *,
         overlap: bool = False, sequence_parallel: bool = True, allocator_overhead: float = 1.0) -> list[Prediction]:
    """Every layout of ``cluster.gpus`` GPUs (tp, pp and cp dividing the GPU count, ep dividing
    dp·cp when the model has experts) with every recipe (ZeRO 0–3, each of ``recomputes``, each
    ``microbatches`` size; ``overlap`` and ``sequence_parallel`` as given), fastest first; impossible
    ones last, each with its reason. ``plan(...)[0]`` answers "which layout?" (if its ``reason`` is None)."""
    results = []
    for tp, pp, cp in itertools.product(divisors(cluster.gpus), repeat=3):
        if cluster.gpus % (tp * pp * cp):
            continue
        dp = cluster.gpus // (tp * pp * cp)
        for ep in divisors(dp * cp) if model.n_expert else (1,):
            layout = Layout(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep)
            for zero, recompute, b in itertools.product(range(4), recomputes, microbatches):
                recipe = Recipe(zero=zero, recompute=recompute, microbatch=b, overlap=overlap,
                                sequence_parallel=sequence_parallel)
                results.append(predict(model, layout, recipe, global_batch, cluster, efficiency,
                                       allocator_overhead=allocator_overhead))
    return sorted(results, key=lambda r: (r.reason is not None, -r.mfu))
