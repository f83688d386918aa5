"""Which layout? Per-GPU memory, step time and MFU of a GPT under (dp, tp, pp, cp, ep, ZeRO,
recomputation, microbatch size) on a cluster — pure arithmetic, so that every number can be checked
by hand.

The model of one training step (a GPT like ``course_utils.gpt``: L layers, hidden h, a heads,
sequence s, vocabulary V, untied head; with ``experts`` E > 0 each block's MLP is E experts of which
each token uses ``top_k`` k (chapter 15); global batch B sequences; n = dp · tp · pp · cp GPUs,
ranks ordered tp, cp, dp, pp from the inside out, as Megatron-LM orders them):

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

from . import accounting, costmodel

BYTES_PER_PARAM = costmodel.BYTES_PER_PARAM[("amp", "adam")]   # (weights, gradients, optimizer state)


@dataclass(frozen=True)
class Transformer:
    """A GPT's shape: ``layers`` blocks of width ``hidden`` with ``heads`` heads, sequences of
    ``seq`` tokens, a ``vocab``-token vocabulary; ``experts`` > 0 makes each MLP a mixture of that
    many experts (each 8h² + 5h parameters, like the dense MLP), ``top_k`` of them per token."""

    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int
    experts: int = 0
    top_k: int = 2

    @property
    def routed(self) -> int:
        """Experts each token visits: ``top_k`` with experts, the one dense MLP without."""
        return self.top_k if self.experts else 1

    def block_params(self) -> tuple[int, int]:
        """(dense, experts) parameters of one block: attention, LayerNorms and router (or the
        dense MLP), and all the experts."""
        h = self.hidden
        dense = accounting.block_params(h)
        if not self.experts:
            return dense, 0
        mlp = 8 * h * h + 5 * h
        return dense - mlp + h * self.experts, self.experts * mlp

    @property
    def params(self) -> int:
        extra = sum(self.block_params()) - accounting.block_params(self.hidden)   # experts past one MLP, router
        return accounting.gpt_params(self.vocab, self.seq, self.layers, self.hidden)["total"] + self.layers * extra

    @property
    def flops_per_token(self) -> int:
        """Training FLOPs per token, without recomputation: 6 per parameter the token uses."""
        h, extra = self.hidden, 0
        if self.experts:    # k experts' MLPs instead of one, and the router's h·E
            extra = 6 * self.layers * ((self.top_k - 1) * 8 * h * h + h * self.experts)
        return accounting.train_flops_per_token(self.vocab, self.layers, h, self.seq) + extra


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
class Layout:
    """``dp × tp × pp × cp`` GPUs (cp: context parallel, each sequence split over cp ranks); ``ep``
    expert-parallel ranks (carved out of dp × cp, each holding experts/ep experts); ``zero`` stage
    over the ranks holding the same weights; ``recompute`` "none" or "full"; ``microbatch``
    sequences per microbatch; ``flash``: a fused attention kernel (no s×s scores kept)."""

    dp: int
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    zero: int = 1
    recompute: str = "none"
    microbatch: int = 1
    flash: bool = True


@dataclass
class Prediction:
    """What :func:`predict` says of one layout: bytes per GPU by part, seconds per step by part,
    MFU, and why the layout is impossible (``reason``; None when it is possible)."""

    layout: Layout
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


def _check(model: Transformer, layout: Layout, global_batch: int, cluster: Cluster) -> str | None:
    """Why ``layout`` cannot run this model on this cluster, or None."""
    n = layout.dp * layout.tp * layout.pp * layout.cp
    if n != cluster.gpus:
        return f"dp·tp·pp·cp = {n}, not the cluster's {cluster.gpus} GPUs"
    if model.heads % layout.tp:
        return f"{model.heads} heads do not split over tp={layout.tp}"
    if layout.tp > cluster.gpus_per_node:
        return f"tp={layout.tp} spans nodes: its all-reduces would cross InfiniBand every layer"
    if model.seq % (2 * layout.cp) and layout.cp > 1:
        return f"a sequence of {model.seq} does not split into 2·cp={2 * layout.cp} chunks (load-balanced ring)"
    if layout.ep > 1 and not model.experts:
        return f"ep={layout.ep} needs experts; this model's MLPs are dense"
    if model.experts and (model.experts % layout.ep or (layout.dp * layout.cp) % layout.ep):
        return f"{model.experts} experts over ep={layout.ep}: ep must divide the experts and dp·cp"
    if model.layers % layout.pp:
        return f"{model.layers} layers do not split into pp={layout.pp} stages"
    if global_batch % (layout.dp * layout.microbatch):
        return f"a batch of {global_batch} does not split into dp={layout.dp} × microbatches of {layout.microbatch}"
    if layout.pp > 1 and global_batch // (layout.dp * layout.microbatch) < layout.pp:
        return f"{global_batch // (layout.dp * layout.microbatch)} microbatches cannot fill pp={layout.pp} stages"
    if layout.recompute not in ("none", "full") or layout.zero not in costmodel.ZERO_STAGES:
        return f"recompute must be 'none' or 'full' and zero one of 0-3, got {layout.recompute!r}, {layout.zero!r}"
    return None


def stage_params(model: Transformer, layout: Layout) -> tuple[float, float]:
    """(dense, experts) parameters one GPU of the busiest (first) pipeline stage holds, before ZeRO:
    its L/pp blocks (of the experts, E/ep), the V·h token and s·h position embeddings, and the V·h
    head too when pp = 1; all split by tp (the embedding and head by vocabulary, as Megatron-LM
    does)."""
    dense_block, experts_block = model.block_params()
    ends = 2 if layout.pp == 1 else 1                 # embedding and head on one GPU, or one on each end
    blocks = model.layers // layout.pp
    dense = blocks * dense_block + ends * model.vocab * model.hidden + model.seq * model.hidden
    return dense / layout.tp, blocks * experts_block / layout.ep / layout.tp


def params_per_gpu(model: Transformer, layout: Layout) -> float:
    """Parameters one GPU of the busiest pipeline stage holds before ZeRO (:func:`stage_params`)."""
    return sum(stage_params(model, layout))


def memory(model: Transformer, layout: Layout) -> dict[str, float]:
    """Bytes on the busiest GPU (the first pipeline stage): model state and activations."""
    L, h, a, s, V, b = model.layers, model.hidden, model.heads, model.seq, model.vocab, layout.microbatch
    split = layout.tp * layout.cp                     # activations: heads (or sequence, SP) × context
    dense, experts = stage_params(model, layout)
    replicas = layout.dp * layout.cp                  # ranks holding the same dense weights
    sharded = costmodel.ZERO_STAGES[layout.zero]
    state = {name: (dense / (replicas if cut else 1) + experts / (replicas // layout.ep if cut else 1)) * nbytes
             for name, nbytes, cut in zip(("weights", "gradients", "optimizer"), BYTES_PER_PARAM, sharded)}
    whole_layer = s * b * h * (15 + 19 * model.routed) / split + (0 if layout.flash else 5 * a * s * s * b / split)
    if layout.recompute == "full":      # the layers' inputs, and one layer recomputed at a time
        kept = L * 2 * s * b * h / split + whole_layer
    else:
        kept = L * whole_layer
    return {**state, "activations": kept, "logits": 4 * s * b * V / split}


def step_time(model: Transformer, layout: Layout, global_batch: int, cluster: Cluster,
              efficiency: float) -> dict[str, float]:
    """Seconds of one step by part: compute, bubble, and the traffic of each kind of parallelism."""
    L, h, s, b, k = model.layers, model.hidden, model.seq, layout.microbatch, model.routed
    t, p, d, c, e = layout.tp, layout.pp, layout.dp, layout.cp, layout.ep
    n, m = cluster.gpus, global_batch // (d * b)
    passes = 4 / 3 if layout.recompute == "full" else 1.0            # one more forward of the blocks
    compute = model.flops_per_token * global_batch * s * passes / n / (efficiency * cluster.peak_tflops * 1e12)
    link = lambda inside: (cluster.nvlink_gbps if inside else cluster.ib_gbps) * 1e9  # noqa: E731
    ring = lambda nbytes, ranks, inside: costmodel.collective_time(  # noqa: E731  # an all-reduce of nbytes
        "all_reduce", 2 * (ranks - 1) / ranks * nbytes, ranks, cluster.alpha_s, 1 / link(inside))
    node = cluster.gpus_per_node
    layer_passes = L // p * m                                          # (layer, microbatch) pairs per step
    redo = layout.recompute == "full"
    tp = layer_passes * (6 if redo else 4) * ring(s * b * h * 2 / c, t, True)
    kv = 2 * s * b * h * 2 / t                                         # K and V of a whole sequence, bf16
    cp = layer_passes * (3 if redo else 2) * costmodel.collective_time(
        "all_gather", kv * (c - 1) / c, c, cluster.alpha_s, 1 / link(t * c <= node))
    routed = k * s * b * h * 2 / (t * c)                               # bytes each rank sends to its experts
    ep = layer_passes * (6 if redo else 4) * costmodel.collective_time(
        "all_to_all", routed * (e - 1) / e, e, cluster.alpha_s, 1 / link(t * c * e <= node))
    dense, experts = stage_params(model, Layout(dp=1, tp=t, pp=p, ep=e))
    # ZeRO-3 all-gathers the weights for each microbatch's forward and backward (half an all-reduce
    # each) and reduce-scatters the gradients once; the other stages all-reduce the gradients once
    zero3 = 0.5 + m if layout.zero == 3 else 1.0
    inside = t * c * d <= node
    dp = zero3 * (ring(2 * dense, d * c, inside) + ring(2 * experts, d * c // e, inside))
    pp = 2 * m * (cluster.alpha_s + s * b * h * 2 / (t * c) / link(False)) if p > 1 else 0.0
    return {"compute": compute, "bubble": compute * (p - 1) / m, "tensor parallel": tp,
            "context parallel": cp, "expert parallel": ep, "data parallel": dp, "pipeline": pp}


def predict(model: Transformer, layout: Layout, global_batch: int, cluster: Cluster,
            efficiency: float = 0.5) -> Prediction:
    """Memory, time and MFU of ``layout``; ``reason`` says why it cannot run (or does not fit)."""
    result = Prediction(layout, reason=_check(model, layout, global_batch, cluster))
    if result.reason:
        return result
    result.memory = memory(model, layout)
    if result.memory_gb > cluster.hbm_gb:
        result.reason = f"needs {result.memory_gb:.0f} GB per GPU, has {cluster.hbm_gb:.0f} GB"
    result.time = step_time(model, layout, global_batch, cluster, efficiency)
    result.mfu = model.flops_per_token * global_batch * model.seq / result.step_s / (
        cluster.gpus * cluster.peak_tflops * 1e12)
    return result


def divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def plan(model: Transformer, global_batch: int, cluster: Cluster, efficiency: float = 0.5,
         microbatches: tuple[int, ...] = (1, 2, 4, 8)) -> list[Prediction]:
    """Every layout of ``cluster.gpus`` GPUs (tp, pp and cp dividing the GPU count, ep dividing
    dp·cp when the model has experts, ZeRO 0–3, recomputation or not, each ``microbatches`` size),
    fastest first; impossible ones last, each with its reason. ``plan(...)[0]`` answers "which
    layout?" (if its ``reason`` is None)."""
    results = []
    for tp, pp, cp in itertools.product(divisors(cluster.gpus), repeat=3):
        if cluster.gpus % (tp * pp * cp):
            continue
        dp = cluster.gpus // (tp * pp * cp)
        for ep in divisors(dp * cp) if model.experts else (1,):
            for zero, recompute, b in itertools.product(range(4), ("none", "full"), microbatches):
                layout = Layout(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, zero=zero, recompute=recompute, microbatch=b)
                results.append(predict(model, layout, global_batch, cluster, efficiency))
    return sorted(results, key=lambda r: (r.reason is not None, -r.mfu))


def megatron_2021_predictions(efficiency: float) -> list[tuple[float, float]]:
    """(published, predicted) TFLOP/s per GPU for each row of :data:`MEGATRON_2021`, counting the
    recomputation as the paper does, on its layout: ZeRO 0, full recomputation, microbatches of 1
    sequence, attention scores materialised (2021: no flash attention), plain 1F1B."""
    out = []
    for _, heads, hidden, layers, tp, pp, gpus, batch, tflops, _ in MEGATRON_2021:
        model = Transformer(layers=layers, hidden=hidden, heads=heads, seq=2048, vocab=51200)
        layout = Layout(dp=gpus // (tp * pp), tp=tp, pp=pp, zero=0, recompute="full", microbatch=1, flash=False)
        result = predict(model, layout, batch, Cluster(gpus=gpus, **A100), efficiency)
        out.append((float(tflops), result.mfu * 4 / 3 * A100["peak_tflops"]))
    return out
