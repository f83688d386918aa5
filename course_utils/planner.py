"""Which layout? Per-GPU memory, step time and MFU of a GPT under (dp, tp, pp, cp, ep, ZeRO,
recomputation, microbatch size) on a cluster — pure arithmetic, so that every number can be checked
by hand.

Three inputs: the model, a ``course_utils.shape.GPTConfig`` (the one ``course_utils.gpt`` builds);
the grid, a ``course_utils.layout.Layout`` (the one ``course_utils.composed`` trains on); and how each
rank trains, a :class:`Recipe` (ZeRO stage, recomputation, microbatch size, flash attention).

The model of one training step (a GPT like ``course_utils.gpt``: L = ``n_layer`` layers, hidden
h = ``d_model``, a = ``n_head`` heads, sequences of s = ``block_size`` tokens, vocabulary
V = ``vocab_size``, untied head; with ``n_expert`` E > 0 each block's MLP is E experts of which
each token uses ``top_k`` k (chapter 15); global batch B sequences; n = dp · tp · pp · cp GPUs,
ranks ordered tp, cp, dp, pp from the inside out, as Megatron-LM orders them and ``Layout`` does):

- **model state** per GPU: the weights of the largest pipeline stage (L/pp blocks of 12h² + 13h,
  or 4h² + 8h + E·h plus E/ep experts of 8h² + 5h; the V·h embedding and s·h positions on the first
  stage, the V·h head on the last; :func:`params_per_gpu`), split by tp; 16 bytes per parameter with
  Adam in mixed precision (2 + 2 bf16 weights and gradients, 12 fp32 master weights and moments),
  the ZeRO stage's share of it split over the ranks holding the same weights: dp · cp for the dense
  part (context-parallel ranks hold the same weights), dp · cp / ep for the experts
  (``costmodel.ZERO_STAGES``);
- **activations** per GPU, Korthikanti et al. 2022 (Table 2) with sequence parallelism:
  s·b·h·(15 + 19·k)/tp + 5·a·s²·b/tp bytes per layer and microbatch of b sequences (attention and
  LayerNorms 15·sbh, the MLP 19·sbh once per expert a token visits: k = 1 for a dense MLP, giving
  Korthikanti's 34), all ÷ cp (each context-parallel rank holds s/cp tokens); a fused (flash)
  attention keeps no s×s scores, removing the last term; full recomputation keeps 2·s·b·h/(tp·cp)
  (the layer's input) and one layer's activations while it is recomputed. Under 1F1B the first
  stage holds pp microbatches of its L/pp layers: L layers' worth. Plus the fp32 logits of one
  microbatch, 4·s·b·V/(tp·cp);
- **time**: the FLOPs (6N + 12·L·s·h per token, N the parameters a token uses,
  ``accounting.train_flops_per_token``; one more forward with full recomputation) at
  ``efficiency`` × peak; the 1F1B bubble (pp − 1)/m of it, m = B/(dp·b); per layer and microbatch,
  tensor parallelism's all-reduce-equivalents of s·b·h·2/cp bytes (2 forward, 2 backward, 2 more
  when recomputing), context parallelism's ring passing of K and V (an all-gather of 2·s·b·h·2/tp
  bytes forward, the same again and a reduce-scatter of their gradients backward), expert
  parallelism's all-to-alls of each rank's k·s·b·h·2/(tp·cp) routed bytes (dispatch and combine,
  forward and backward); data parallelism's gradient all-reduce (ZeRO-3: a reduce-scatter of the
  gradients and two all-gathers of the weights per microbatch, 0.5 + m all-reduces' worth), not
  overlapped; one activation send per microbatch and stage boundary each way. Each group runs on
  NVLink when its ranks fit in a node, else on InfiniBand. The ring α-β model times each
  collective (``costmodel.collective_time``: an all-reduce of x bytes sends 2(n − 1)/n · x in
  2(n − 1) messages, an all-gather, reduce-scatter or all-to-all half that). Capacity factors, load
  imbalance between experts and overlap of communication with compute are left out.

MFU = model FLOPs (without recomputation) per second ÷ (n × peak). ``efficiency`` is the fraction of
peak a GPU reaches on this model's matrix multiplies: an input, not a prediction.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from . import costmodel
from .layout import Layout
from .shape import GPTConfig

BYTES_PER_PARAM = costmodel.BYTES_PER_PARAM[("amp", "adam")]   # (weights, gradients, optimizer state)


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


H100 = dict(hbm_gb=80.0, peak_tflops=989.0, nvlink_gbps=450.0, ib_gbps=50.0)    # 8 × 400 Gb/s per node
H200 = dict(hbm_gb=141.0, peak_tflops=989.0, nvlink_gbps=450.0, ib_gbps=50.0)
A100 = dict(hbm_gb=80.0, peak_tflops=312.0, nvlink_gbps=300.0, ib_gbps=25.0)    # 8 × 200 Gb/s per node

# Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
# Megatron-LM" (arXiv:2104.04473), Table 1: GPTs with s = 2048, V = 51,200 on A100s (Selene), full
# activation recomputation. (billions of parameters, heads, hidden, layers, tp, pp, GPUs, global batch,
# achieved TFLOP/s per GPU counting the recomputation, % of the 312 TFLOP/s peak)
MEGATRON_2021 = [
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137, 44), (3.6, 32, 3072, 30, 2, 1, 64, 512, 138, 44),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142, 46), (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135, 43),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138, 44), (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140, 45),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148, 47), (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155, 50),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163, 52), (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163, 52),
]


@dataclass(frozen=True)
class Recipe:
    """How each rank trains, on whatever layout: the ``zero`` stage (0–3) over the ranks holding
    the same weights; ``recompute`` "none", "selective" (Korthikanti et al. 2022: the attention
    core only) or "full"; ``microbatch`` sequences per microbatch; ``flash``: a fused attention
    kernel (no s×s scores kept); ``sequence_parallel``: tensor parallelism also splits the norms'
    regions by sequence (Megatron-LM's SP; without it those activations are copies on every TP
    rank); ``overlap``: data-, context- and pipeline-parallel transfers hide behind compute where
    the overlap model says they can (False: every transfer is exposed); ``dropout``: the 2021–2022
    Megatron runs' dropout, whose masks are kept for backward."""

    zero: int = 1
    recompute: str = "none"
    microbatch: int = 1
    flash: bool = True
    sequence_parallel: bool = True
    overlap: bool = False
    dropout: bool = False


@dataclass
class Prediction:
    """What :func:`predict` says of one layout and recipe: bytes per GPU by part, seconds per step
    by part, MFU, and why it is impossible (``reason``; None when it is possible)."""

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
    if layout.tp > cluster.gpus_per_node:
        return f"tp={layout.tp} spans nodes: its all-reduces would cross InfiniBand every layer"
    if model.block_size % (2 * layout.cp) and layout.cp > 1:
        return (f"a sequence of {model.block_size} does not split into 2·cp={2 * layout.cp} chunks "
                f"(load-balanced ring)")
    if layout.ep > 1 and not model.n_expert:
        return f"ep={layout.ep} needs experts; this model's MLPs are dense"
    if model.n_expert % layout.ep:
        return f"{model.n_expert} experts over ep={layout.ep}: ep must divide the experts and dp·cp"
    if model.n_layer % layout.pp:
        return f"{model.n_layer} layers do not split into pp={layout.pp} stages"
    b = recipe.microbatch
    if global_batch % (layout.dp * b):
        return f"a batch of {global_batch} does not split into dp={layout.dp} × microbatches of {b}"
    if layout.pp > 1 and global_batch // (layout.dp * b) < layout.pp:
        return f"{global_batch // (layout.dp * b)} microbatches cannot fill pp={layout.pp} stages"
    if recipe.recompute not in ("none", "full") or recipe.zero not in costmodel.ZERO_STAGES:
        return f"recompute must be 'none' or 'full' and zero one of 0-3, got {recipe.recompute!r}, {recipe.zero!r}"
    return None


def stage_params(model: GPTConfig, layout: Layout) -> tuple[float, float]:
    """(dense, experts) parameters one GPU of the busiest (first) pipeline stage holds, before ZeRO:
    its L/pp blocks (of the experts, E/ep), the V·h token and s·h position embeddings, and the V·h
    head too when pp = 1; all split by tp (the embedding and head by vocabulary, as Megatron-LM
    does)."""
    dense_block, experts_block = model.block_params()
    ends = 2 if layout.pp == 1 else 1                 # embedding and head on one GPU, or one on each end
    blocks = model.n_layer // layout.pp
    dense = blocks * dense_block + ends * model.vocab_size * model.d_model + model.block_size * model.d_model
    return dense / layout.tp, blocks * experts_block / layout.ep / layout.tp


def params_per_gpu(model: GPTConfig, layout: Layout) -> float:
    """Parameters one GPU of the busiest pipeline stage holds before ZeRO (:func:`stage_params`)."""
    return sum(stage_params(model, layout))


def memory(model: GPTConfig, layout: Layout, recipe: Recipe) -> dict[str, float]:
    """Bytes on the busiest GPU (the first pipeline stage): model state and activations."""
    L, h, a, s, V = model.n_layer, model.d_model, model.n_head, model.block_size, model.vocab_size
    b = recipe.microbatch
    split = layout.tp * layout.cp                     # activations: heads (or sequence, SP) × context
    dense, experts = stage_params(model, layout)
    replicas = layout.dp * layout.cp                  # ranks holding the same dense weights
    sharded = costmodel.ZERO_STAGES[recipe.zero]
    state = {name: (dense / (replicas if cut else 1) + experts / (replicas // layout.ep if cut else 1)) * nbytes
             for name, nbytes, cut in zip(("weights", "gradients", "optimizer"), BYTES_PER_PARAM, sharded)}
    whole_layer = s * b * h * (15 + 19 * model.routed) / split + (0 if recipe.flash else 5 * a * s * s * b / split)
    if recipe.recompute == "full":      # the layers' inputs, and one layer recomputed at a time
        kept = L * 2 * s * b * h / split + whole_layer
    else:
        kept = L * whole_layer
    return {**state, "activations": kept, "logits": 4 * s * b * V / split}


def step_time(model: GPTConfig, layout: Layout, recipe: Recipe, global_batch: int, cluster: Cluster,
              efficiency: float) -> dict[str, float]:
    """Seconds of one step by part: compute, bubble, and the traffic of each kind of parallelism."""
    L, h, s, b, k = model.n_layer, model.d_model, model.block_size, recipe.microbatch, model.routed
    t, p, d, c, e = layout.tp, layout.pp, layout.dp, layout.cp, layout.ep
    n, m = cluster.gpus, global_batch // (d * b)
    passes = 4 / 3 if recipe.recompute == "full" else 1.0            # one more forward of the blocks
    compute = model.flops_per_token * global_batch * s * passes / n / (efficiency * cluster.peak_tflops * 1e12)
    link = lambda inside: (cluster.nvlink_gbps if inside else cluster.ib_gbps) * 1e9  # noqa: E731
    ring = lambda nbytes, ranks, inside: costmodel.collective_time(  # noqa: E731  # an all-reduce of nbytes
        "all_reduce", 2 * (ranks - 1) / ranks * nbytes, ranks, cluster.alpha_s, 1 / link(inside))
    node = cluster.gpus_per_node
    layer_passes = L // p * m                                          # (layer, microbatch) pairs per step
    redo = recipe.recompute == "full"
    tp = layer_passes * (6 if redo else 4) * ring(s * b * h * 2 / c, t, True)
    kv = 2 * s * b * h * 2 / t                                         # K and V of a whole sequence, bf16
    cp = layer_passes * (3 if redo else 2) * costmodel.collective_time(
        "all_gather", kv * (c - 1) / c, c, cluster.alpha_s, 1 / link(t * c <= node))
    routed = k * s * b * h * 2 / (t * c)                               # bytes each rank sends to its experts
    ep = layer_passes * (6 if redo else 4) * costmodel.collective_time(
        "all_to_all", routed * (e - 1) / e, e, cluster.alpha_s, 1 / link(t * c * e <= node))
    dense, experts = stage_params(model, layout)                       # (stage_params reads pp, tp, ep)
    # ZeRO-3 all-gathers the weights for each microbatch's forward and backward (half an all-reduce
    # each) and reduce-scatters the gradients once; the other stages all-reduce the gradients once
    zero3 = 0.5 + m if recipe.zero == 3 else 1.0
    inside = t * c * d <= node
    dp = zero3 * (ring(2 * dense, d * c, inside) + ring(2 * experts, d * c // e, inside))
    pp = 2 * m * (cluster.alpha_s + s * b * h * 2 / (t * c) / link(False)) if p > 1 else 0.0
    return {"compute": compute, "bubble": compute * (p - 1) / m, "tensor parallel": tp,
            "context parallel": cp, "expert parallel": ep, "data parallel": dp, "pipeline": pp}


def predict(model: GPTConfig, layout: Layout, recipe: Recipe, global_batch: int, cluster: Cluster,
            efficiency: float = 0.5) -> Prediction:
    """Memory, time and MFU of ``recipe`` on ``layout``; ``reason`` says why it cannot run (or does
    not fit)."""
    result = Prediction(layout, recipe, reason=_check(model, layout, recipe, global_batch, cluster))
    if result.reason:
        return result
    result.memory = memory(model, layout, recipe)
    if result.memory_gb > cluster.hbm_gb:
        result.reason = f"needs {result.memory_gb:.0f} GB per GPU, has {cluster.hbm_gb:.0f} GB"
    result.time = step_time(model, layout, recipe, global_batch, cluster, efficiency)
    result.mfu = model.flops_per_token * global_batch * model.block_size / result.step_s / (
        cluster.gpus * cluster.peak_tflops * 1e12)
    return result


def divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def plan(model: GPTConfig, global_batch: int, cluster: Cluster, efficiency: float = 0.5,
         microbatches: tuple[int, ...] = (1, 2, 4, 8)) -> list[Prediction]:
    """Every layout of ``cluster.gpus`` GPUs (tp, pp and cp dividing the GPU count, ep dividing
    dp·cp when the model has experts) with every recipe (ZeRO 0–3, recomputation or not, each
    ``microbatches`` size), fastest first; impossible ones last, each with its reason.
    ``plan(...)[0]`` answers "which layout?" (if its ``reason`` is None)."""
    results = []
    for tp, pp, cp in itertools.product(divisors(cluster.gpus), repeat=3):
        if cluster.gpus % (tp * pp * cp):
            continue
        dp = cluster.gpus // (tp * pp * cp)
        for ep in divisors(dp * cp) if model.n_expert else (1,):
            layout = Layout(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep)
            for zero, recompute, b in itertools.product(range(4), ("none", "full"), microbatches):
                recipe = Recipe(zero=zero, recompute=recompute, microbatch=b)
                results.append(predict(model, layout, recipe, global_batch, cluster, efficiency))
    return sorted(results, key=lambda r: (r.reason is not None, -r.mfu))


def megatron_2021_predictions(efficiency: float) -> list[tuple[float, float]]:
    """(published, predicted) TFLOP/s per GPU for each row of :data:`MEGATRON_2021`, counting the
    recomputation as the paper does, on its layout: ZeRO 0, full recomputation, microbatches of 1
    sequence, attention scores materialised (2021: no flash attention), plain 1F1B."""
    out = []
    recipe = Recipe(zero=0, recompute="full", microbatch=1, flash=False)
    for _, heads, hidden, layers, tp, pp, gpus, batch, tflops, _ in MEGATRON_2021:
        model = GPTConfig(vocab_size=51200, block_size=2048, n_layer=layers, n_head=heads, d_model=hidden)
        layout = Layout(dp=gpus // (tp * pp), tp=tp, pp=pp)
        result = predict(model, layout, recipe, batch, Cluster(gpus=gpus, **A100), efficiency)
        out.append((float(tflops), result.mfu * 4 / 3 * A100["peak_tflops"]))
    return out
