"""Which layout? Per-GPU memory, step time and MFU of a GPT under (dp, tp, pp, ZeRO, recomputation,
microbatch size) on a cluster — pure arithmetic, so that every number can be checked by hand.

The model of one training step (a GPT like ``course_utils.gpt``: L layers, hidden h, a heads,
sequence s, vocabulary V, untied head; global batch B sequences; n = dp · tp · pp GPUs):

- **model state** per GPU: the weights of the largest pipeline stage (L/pp blocks of 12h² + 13h,
  plus the V·h embedding and the V·h head, each on one end of the pipeline; :func:`params_per_gpu`),
  split by tp; 16 bytes
  per parameter with Adam in mixed precision (2 + 2 bf16 weights and gradients, 12 fp32 master
  weights and moments), the ZeRO stage's share of it split over dp (``costmodel.ZERO_STAGES``);
- **activations** per GPU, Korthikanti et al. 2022 (Table 2) with sequence parallelism:
  s·b·h·(34/tp + 5·a·s/(h·tp)) bytes per layer and microbatch of b sequences; a fused (flash)
  attention keeps no s×s scores, removing the second term; full recomputation keeps 2·s·b·h/tp
  (the layer's input) and one layer's activations while it is recomputed. Under 1F1B the first
  stage holds pp microbatches of its L/pp layers: L layers' worth. Plus the fp32 logits of one
  microbatch, 4·s·b·V/tp;
- **time**: the FLOPs (6N + 12·L·s·h per token, ``accounting.train_flops_per_token``; one more
  forward with full recomputation) at ``efficiency`` × peak; the 1F1B bubble (pp − 1)/m of it,
  m = B/(dp·b); tensor parallelism's all-reduce-equivalents of s·b·h·2 bytes per layer and
  microbatch (2 forward, 2 backward, 2 more when recomputing) on NVLink when tp fits in a node;
  data parallelism's gradient all-reduce (ZeRO-3: 1.5× the bytes) on InfiniBand when its ranks span
  nodes, not overlapped; one activation send per microbatch and stage boundary each way.
  The ring algorithm times each collective (``costmodel.ring_allreduce_time``).

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
    ``seq`` tokens, a ``vocab``-token vocabulary."""

    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int

    @property
    def params(self) -> int:
        return accounting.gpt_params(self.vocab, self.seq, self.layers, self.hidden)["total"]

    @property
    def flops_per_token(self) -> int:
        """Training FLOPs per token, without recomputation."""
        return accounting.train_flops_per_token(self.vocab, self.layers, self.hidden, self.seq)


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
    """``dp × tp × pp`` GPUs; ``zero`` stage over dp; ``recompute`` "none" or "full"; ``microbatch``
    sequences per microbatch; ``flash``: a fused attention kernel (no s×s scores kept)."""

    dp: int
    tp: int = 1
    pp: int = 1
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
    n = layout.dp * layout.tp * layout.pp
    if n != cluster.gpus:
        return f"dp·tp·pp = {n}, not the cluster's {cluster.gpus} GPUs"
    if model.heads % layout.tp:
        return f"{model.heads} heads do not split over tp={layout.tp}"
    if layout.tp > cluster.gpus_per_node:
        return f"tp={layout.tp} spans nodes: its all-reduces would cross InfiniBand every layer"
    if model.layers % layout.pp:
        return f"{model.layers} layers do not split into pp={layout.pp} stages"
    if global_batch % (layout.dp * layout.microbatch):
        return f"a batch of {global_batch} does not split into dp={layout.dp} × microbatches of {layout.microbatch}"
    if layout.pp > 1 and global_batch // (layout.dp * layout.microbatch) < layout.pp:
        return f"{global_batch // (layout.dp * layout.microbatch)} microbatches cannot fill pp={layout.pp} stages"
    if layout.recompute not in ("none", "full") or layout.zero not in costmodel.ZERO_STAGES:
        return f"recompute must be 'none' or 'full' and zero one of 0-3, got {layout.recompute!r}, {layout.zero!r}"
    return None


def params_per_gpu(model: Transformer, layout: Layout) -> float:
    """Parameters one GPU of the busiest (first) pipeline stage holds, before ZeRO: its L/pp blocks, the
    V·h token and s·h position embeddings, and the V·h head too when pp = 1; all split by tp (the
    embedding and head by vocabulary, as Megatron-LM does)."""
    ends = 2 if layout.pp == 1 else 1                 # embedding and head on one GPU, or one on each end
    blocks = model.layers // layout.pp * accounting.block_params(model.hidden)
    return (blocks + ends * model.vocab * model.hidden + model.seq * model.hidden) / layout.tp


def memory(model: Transformer, layout: Layout) -> dict[str, float]:
    """Bytes on the busiest GPU (the first pipeline stage): model state and activations."""
    L, h, a, s, V, b, t = model.layers, model.hidden, model.heads, model.seq, model.vocab, layout.microbatch, layout.tp
    params = params_per_gpu(model, layout)
    sharded = costmodel.ZERO_STAGES[layout.zero]
    state = {name: params * nbytes / (layout.dp if split else 1)
             for name, nbytes, split in zip(("weights", "gradients", "optimizer"), BYTES_PER_PARAM, sharded)}
    whole_layer = s * b * h * 34 / t + (0 if layout.flash else 5 * a * s * s * b / t)
    if layout.recompute == "full":      # the layers' inputs, and one layer recomputed at a time
        kept = L * 2 * s * b * h / t + whole_layer
    else:
        kept = L * whole_layer
    return {**state, "activations": kept, "logits": 4 * s * b * V / t}


def step_time(model: Transformer, layout: Layout, global_batch: int, cluster: Cluster,
              efficiency: float) -> dict[str, float]:
    """Seconds of one step by part: compute, bubble, tensor-, data- and pipeline-parallel traffic."""
    L, h, s, b, t, p, d = model.layers, model.hidden, model.seq, layout.microbatch, layout.tp, layout.pp, layout.dp
    n, m = cluster.gpus, global_batch // (d * b)
    passes = 4 / 3 if layout.recompute == "full" else 1.0            # one more forward of the blocks
    compute = model.flops_per_token * global_batch * s * passes / n / (efficiency * cluster.peak_tflops * 1e12)
    link = lambda inside: (cluster.nvlink_gbps if inside else cluster.ib_gbps) * 1e9  # noqa: E731
    ring = lambda nbytes, ranks, inside: float(costmodel.ring_allreduce_time(  # noqa: E731
        nbytes, ranks, cluster.alpha_s, 1 / link(inside))) if ranks > 1 else 0.0
    per_layer = 6 if layout.recompute == "full" else 4
    tp = L // p * m * per_layer * ring(s * b * h * 2, t, True)
    grads = memory(model, Layout(dp=1, tp=t, pp=p))["weights"]          # bf16: the stage's gradient bytes
    dp = ring(grads * (1.5 if layout.zero == 3 else 1.0), d, t * d <= cluster.gpus_per_node)
    pp = 2 * m * (cluster.alpha_s + s * b * h * 2 / t / link(False)) if p > 1 else 0.0
    return {"compute": compute, "bubble": compute * (p - 1) / m, "tensor parallel": tp,
            "data parallel": dp, "pipeline": pp}


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
    """Every layout of ``cluster.gpus`` GPUs (tp and pp dividing the GPU count, ZeRO 0–3,
    recomputation or not, each ``microbatches`` size), fastest first; impossible ones last, each
    with its reason. ``plan(...)[0]`` answers "which layout?" (if its ``reason`` is None)."""
    results = []
    for tp, pp in itertools.product(divisors(cluster.gpus), repeat=2):
        if cluster.gpus % (tp * pp):
            continue
        for zero, recompute, b in itertools.product(range(4), ("none", "full"), microbatches):
            layout = Layout(dp=cluster.gpus // (tp * pp), tp=tp, pp=pp, zero=zero, recompute=recompute, microbatch=b)
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
