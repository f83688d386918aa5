"""Published training runs, transcribed with their layouts, memory and throughput, each with where it
was read: the data the planner is checked against (``course_utils.validation`` holds the harness).

One :class:`Run` per published row: the model (a ``course_utils.shape.GPTConfig`` whose ``block_size``
is the run's sequence length, or None where the source gives no shape), the GPU and how many, the
layout (dp, tp, pp, cp, ep), how each rank trained (ZeRO/FSDP stage, recomputation, microbatch,
sequence parallelism, float8, torch.compile, virtual pipeline stages) and what the source reports:
TFLOP/s per GPU, MFU, HFU or tokens per second per GPU, each in the source's own FLOP convention
(:attr:`Run.flops`, defined in ``course_utils.validation.CONVENTIONS``), and memory per GPU in GiB
(2**30 bytes) with its kind (the allocator's reserved peak, or live bytes). A field the source does
not give is None, and the row's ``notes`` say so. No number here is estimated: each was read in the
source named by :data:`SOURCES` (arithmetic on read numbers is written out as arithmetic).

Sources (``SOURCES`` has the exact locations):

- ``megatron-2021``: Narayanan et al. 2021, Table 1 (GPTs on A100s, full recomputation), with the
  microbatch sizes and virtual stages of the paper's own reproduction scripts;
- ``korthikanti-2022``: Korthikanti et al. 2022, the abstract's 530B runs and Megatron-LM's README
  table of MFU/HFU; the paper's Table 3 (shapes and layouts) could not be read here, so these rows
  carry no model and no layout;
- ``llama3-2024``: Grattafiori et al. 2024 (the Llama 3 paper), Table 4 (405B pre-training);
- ``torchtitan-2024-12``, ``torchtitan-asynctp-2025-06``, ``trainy-2025-06``: torchtitan's
  benchmark files (Llama 3.1 8B/70B/405B on H100s and H200s: TPS/GPU and reserved memory);
- ``deepseek-v3-2024``: DeepSeek-V3's layout and GPU hours, kept as a run no GPTConfig can describe
  (its ``unsupported`` says what is missing).

No torch here: the planner imports this module.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .layout import Layout
from .shape import LLAMA_3_1, GPTConfig

GIB = 2 ** 30
"""Bytes in a GiB (what torch.cuda's memory statistics and torchtitan report); a GB is 10**9."""


@dataclass(frozen=True)
class Source:
    """A document runs were read from: its citation and where exactly (table, file and commit)."""

    id: str
    citation: str
    location: str


SOURCES: dict[str, Source] = {s.id: s for s in (
    Source("megatron-2021",
           "Narayanan et al. 2021, 'Efficient Large-Scale Language Model Training on GPU Clusters Using "
           "Megatron-LM', arXiv:2104.04473 (SC21)",
           "Table 1 (model shape, tp, pp, GPUs, batch, TFLOP/s per GPU, % of peak); "
           "microbatch sizes, virtual stages (layers per virtual "
           "stage), sequence length 2048 and --fp16 from the paper's reproduction scripts "
           "NVIDIA/Megatron-LM examples/sc21/run_table_1.sh and CONFIG.sh (added de7dc40f88, "
           "2021-08-10; same content at 4d1c207597, 2024-10-28); dropout 0.1 is Megatron-LM's "
           "default then (megatron/arguments.py at 6985e58938, 2021-08-19)"),
    Source("korthikanti-2022",
           "Korthikanti et al. 2022, 'Reducing Activation Recomputation in Large Transformer Models', "
           "arXiv:2205.05198 (MLSys 2023)",
           "the abstract (530B on 2240 A100s: MFU 54.2 % with sequence parallelism and selective "
           "recomputation, 42.1 % with full recomputation), and the MFU/HFU table of NVIDIA/Megatron-LM "
           "README.md at commit 841f789f48 (2022-05-19), 'measured using a data parallel size of one'. "
           "The paper's Table 3 (shapes, tp, pp, GPUs, batch) and its throughput table were not "
           "available to this transcription: no layout or shape is recorded for these rows"),
    Source("llama3-2024",
           "Grattafiori et al. 2024, 'The Llama 3 Herd of Models', arXiv:2407.21783 (version dated "
           "July 23, 2024)",
           "Table 4 (GPUs, TP, CP, PP, DP, Seq. Len., Batch size/DP, Tokens/Batch, TFLOPs/GPU, BF16 MFU) "
           "and §3.3.1-3.3.2 (H100 80GB HBM3 at 700 W; FSDP that does not reshard weights after "
           "forward; interleaved pipeline schedule with fewer layers on the first and last stages; "
           "8K-token sequences trained without activation checkpointing), read in a text extraction "
           "of the paper's PDF"),
    Source("torchtitan-2024-12",
           "torchtitan team, 'Llama 3 on H100s' benchmarks (end of 2024); Liang et al. 2024, "
           "'TorchTitan', arXiv:2410.06511 reports the same study",
           "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (added 820504e20d, "
           "2025-06-13), Tables 1-6; runs on torchtitan 9dec370 (2024-12-26), whose train.py logs "
           "memory as torch.cuda's reserved_bytes.all.peak in GiB and TPS as a step's tokens / "
           "(seconds × tp·pp·cp), and whose train_configs/llama3_{8b,70b}.toml give seq_len 8192 and "
           "the 8B's selective AC 'op' policy. H100s with 96GB HBM2e at 500 W"),
    Source("torchtitan-asynctp-2025-06",
           "PyTorch team, async TP benchmarks (June 2025)",
           "pytorch/torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md (added with "
           "820504e20d, 2025-06-13), both tables (tokens/sec per GPU, no memory); seq_len 8192 from "
           "torchtitan/models/llama3/train_configs/llama3_{8b,70b}.toml at 820504e20d. H100s with "
           "96GB HBM2e at 500 W"),
    Source("trainy-2025-06",
           "Trainy team on WhiteFiber, Llama 3.1 8B on H200s (June 2025)",
           "pytorch/torchtitan benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md, the results table "
           "and the command line (local batch 2, compile, float8 with FSDP float8 all-gather); runs on "
           "torchtitan e7c0cae, whose llama3_8b.toml gives seq_len 8192 and selective AC 'op'"),
    Source("deepseek-v3-2024",
           "DeepSeek-AI 2024, 'DeepSeek-V3 Technical Report', arXiv:2412.19437 (v2)",
           "§1 and Table 1 (180K H800 GPU hours per trillion tokens on 2048 H800s; 2664K GPU hours of "
           "pre-training), §3.1-3.2 (16-way PP, 64-way EP spanning 8 nodes, ZeRO-1 DP; DualPipe), "
           "§2.1.2 (1 shared and 256 routed experts, 8 per token, at most 4 nodes per token), §3.3 "
           "(FP8 training), read in copies of the paper's text"),
)}


@dataclass(frozen=True)
class Run:
    """One published training run. Sizes per GPU; ``memory_gib`` in GiB (2**30 bytes)."""

    source: str                     # a key of SOURCES
    name: str                       # short, unique
    where: str                      # the table and row (or line) in the source
    model: GPTConfig | None         # block_size = the run's sequence length; None: shape not given
    seq_len: int | None             # tokens per sequence; None: not given
    gpu: str                        # a key of course_utils.validation.GPU_PRESETS
    gpus: int | None                # None: not given
    dp: int | None = None           # data-parallel (FSDP / ZeRO) ranks, expert-parallel ranks included
    tp: int | None = 1              # None (like dp, pp): the source does not say
    pp: int | None = 1
    cp: int = 1
    ep: int = 1
    zero: int | None = None         # 0 none, 1 optimizer, 2 + gradients, 3 + weights (FSDP)
    recompute: str | None = None    # "none", "selective" (Korthikanti's), "op" (torchtitan's per-op), "full"
    recompute_detail: str = ""      # what the framework's mode does, where it differs from Korthikanti's
    microbatch: int | None = None   # sequences per microbatch
    global_batch: int | None = None  # sequences per step
    sequence_parallel: bool | None = None
    flash: bool | None = None       # a fused attention kernel (no s×s scores kept)
    dropout: bool | None = None
    float8: bool = False            # float8 matmuls (torchao) besides bf16
    compile: bool | None = None     # torch.compile
    async_tp: bool = False          # tensor parallelism's transfers overlapped with its matmuls
    virtual_stages: int | None = None   # interleaved 1F1B: model chunks per pipeline rank (1: plain)
    grad_reduce_bytes: int = 2      # bytes per gradient element the data-parallel reduction moves
    tflops: float | None = None     # published TFLOP/s per GPU, in the source's convention
    mfu: float | None = None        # published model FLOPs utilisation (fraction)
    hfu: float | None = None        # published hardware FLOPs utilisation (fraction; counts recomputation)
    tokens_per_s: float | None = None   # published tokens per second per GPU
    flops: str = "palm"             # FLOP convention of tflops/mfu/hfu: a key of validation.CONVENTIONS
    peak_tflops: float | None = None    # the peak the source divides by for its MFU
    memory_gib: float | None = None     # published memory per GPU, GiB
    memory_kind: str | None = None      # "reserved peak", "active peak", or what the source says
    unsupported: tuple[str, ...] = ()   # what no GPTConfig/Layout/Recipe can say about this run
    notes: str = ""

    @property
    def layout(self) -> Layout | None:
        """The run's ``Layout``, or None when the source does not give dp, tp and pp."""
        if None in (self.dp, self.tp, self.pp):
            return None
        return Layout(dp=self.dp, tp=self.tp, pp=self.pp, cp=self.cp, ep=self.ep)

    @property
    def tokens_per_step(self) -> int | None:
        """global_batch × seq_len, or None."""
        return None if None in (self.global_batch, self.seq_len) else self.global_batch * self.seq_len


# -- Megatron-LM 2021, Table 1 -----------------------------------------------------------------------
# (billions of parameters, heads, hidden, layers, tp, pp, GPUs, global batch, TFLOP/s per GPU counting
# the recomputation, % of the 312 TFLOP/s peak); then from
# examples/sc21/run_table_1.sh: MBS, and layers per virtual stage (None: no interleaving)
_MEGATRON_2021 = [
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137, 44, 16, None),
    (3.6, 32, 3072, 30, 2, 1, 64, 512, 138, 44, 16, None),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142, 46, 16, None),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135, 43, 8, None),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138, 44, 4, None),
    (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140, 45, 2, 5),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148, 47, 2, 5),
    (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155, 50, 1, 3),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163, 52, 1, 1),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163, 52, 1, None),
]
MEGATRON_2021_PARAMS_B = {f"megatron-2021 {row[0]}B": row[0] for row in _MEGATRON_2021}
"""Table 1's parameter counts (billions), beside the rows, for the tests."""
MEGATRON_2021_PERCENT = {f"megatron-2021 {row[0]}B": row[9] for row in _MEGATRON_2021}
"""Table 1's '% of theoretical peak FLOP/s', for the tests."""


def _megatron_2021() -> list[Run]:
    runs = []
    for billions, heads, hidden, layers, tp, pp, gpus, batch, tflops, _, mbs, per_virtual in _MEGATRON_2021:
        runs.append(Run(
            source="megatron-2021", name=f"megatron-2021 {billions}B", where=f"Table 1, the {billions}B row",
            model=GPTConfig(vocab_size=51200, block_size=2048, n_layer=layers, n_head=heads, d_model=hidden),
            seq_len=2048, gpu="A100-SXM4-80GB", gpus=gpus, dp=gpus // (tp * pp), tp=tp, pp=pp,
            zero=0, recompute="full", microbatch=mbs, global_batch=batch, sequence_parallel=False,
            flash=False, dropout=True, compile=False,
            virtual_stages=layers // pp // per_virtual if per_virtual else 1,
            tflops=float(tflops), flops="narayanan-2021", peak_tflops=312.0,
            notes="fp16 with loss scaling (--fp16), not bf16: the same 312 TFLOP/s peak and the same bytes "
                  "per parameter; no memory published; 2021: attention scores materialised (no flash)"))
    return runs


# -- Korthikanti et al. 2022 -------------------------------------------------------------------------
_KORTHIKANTI_NOTE = ("the paper's Table 3 gives each model's shape, tp, pp and batch; it could not be read "
                     "here, so the run has no model and no layout")


def _korthikanti_2022() -> list[Run]:
    runs = [Run(source="korthikanti-2022", name=f"korthikanti-2022 {size} (README)",
                where=f"Megatron-LM README (841f789f48) MFU/HFU table, the {size} row", model=None,
                seq_len=2048, gpu="A100-SXM4-80GB", gpus=None, dp=1, tp=None, pp=None,
                mfu=mfu / 100, hfu=hfu / 100, flops="palm", peak_tflops=312.0,
                unsupported=(_KORTHIKANTI_NOTE,),
                notes="'measured using a data parallel size of one'; the README does not name the recomputation "
                      "mode: HFU − MFU of 0.7-2.2 points fits selective recomputation (full would add about a "
                      "third); vocabulary 51,200 and sequence 2048 per the README")
            for size, mfu, hfu in (("22B", 41.5, 43.7), ("175B", 51.4, 52.8), ("530B", 56.0, 57.0),
                                   ("1T", 56.3, 57.0))]
    runs += [Run(source="korthikanti-2022", name=f"korthikanti-2022 530B {mode}",
                 where="abstract", model=None, seq_len=None, gpu="A100-SXM4-80GB", gpus=2240, dp=None, tp=None, pp=None,
                 recompute=mode, sequence_parallel=mode == "selective", mfu=mfu / 100, flops="palm",
                 peak_tflops=312.0, unsupported=(_KORTHIKANTI_NOTE,),
                 notes="'a 530B parameter GPT-3 style model on 2240 NVIDIA A100 GPUs'; layout and batch not in "
                       "the abstract")
             for mode, mfu in (("selective", 54.2), ("full", 42.1))]
    return runs


# -- Llama 3, Table 4 --------------------------------------------------------------------------------
LLAMA3_TABLE4_PRINTED_DP = {"llama3-2024 405B 16384 GPUs 128k": 4}
"""DP as Table 4 prints it where it contradicts its own row: 8·16·16·4 = 8,192 GPUs, not the row's
16,384, and 4 × 16 sequences × 131,072 tokens = 8M tokens, not the row's 16M; DP = 8 satisfies
both, so the run's ``dp`` is 8 (tests/test_published_runs.py checks the arithmetic)."""


def _llama3_2024() -> list[Run]:
    model = LLAMA_3_1["405B"]
    rows = [  # GPUs, TP, CP, PP, DP, sequence, batch size per DP, TFLOPs/GPU, BF16 MFU %
        ("405B 8192 GPUs", 8192, 8, 1, 16, 64, 8192, 32, 430, 43),
        ("405B 16384 GPUs", 16384, 8, 1, 16, 128, 8192, 16, 400, 41),
        ("405B 16384 GPUs 128k", 16384, 8, 16, 16, 8, 131072, 16, 380, 38),
    ]
    runs = []
    for label, gpus, tp, cp, pp, dp, seq, per_dp, tflops, mfu in rows:
        name = f"llama3-2024 {label}"
        long = seq > 8192
        runs.append(Run(
            source="llama3-2024", name=name, where=f"Table 4, the {gpus:,}-GPU, {seq:,}-token row",
            model=dataclasses.replace(model, block_size=seq), seq_len=seq, gpu="H100-SXM5-80GB", gpus=gpus,
            dp=dp, tp=tp, pp=pp, cp=cp, zero=2, recompute=None if long else "none",
            global_batch=dp * per_dp, tflops=float(tflops), mfu=mfu / 100, flops="palm", peak_tflops=989.0,
            notes=("126 layers over 16 stages, one fewer on the first and the last (§3.3.2); interleaved "
                   "schedule, V virtual stages per rank not given; FSDP sharding optimizer states "
                   "and gradients, weights not resharded after forward: "
                   "recorded as ZeRO-2; microbatch not given; document-masked attention; all-gather-based "
                   "context parallelism with the all-gather exposed (§3.3.2)"
                   + ("; recomputation at 128k not stated (8K ran without)" if long else
                      "; 'without activation checkpointing' (§3.3.2)")
                   + ("; the paper prints DP = 4 here: see LLAMA3_TABLE4_PRINTED_DP" if name in
                      LLAMA3_TABLE4_PRINTED_DP else ""))))
    return runs


# -- torchtitan --------------------------------------------------------------------------------------
_TITAN = dict(gpu="H100-96GB-HBM2e-500W", flops="torchtitan", peak_tflops=989.0, flash=True,
              memory_kind="reserved peak", zero=3, grad_reduce_bytes=4)
"""torchtitan's runs: FSDP2 reduces gradients in float32, its default ``mixed_precision_reduce="float32"``
(config_manager.py at 9dec370)."""
_OP_SAC = "torchtitan's selective AC 'op' policy (saves chosen ops' outputs, e.g. matmuls; not Korthikanti's)"


_TITAN_MICROBATCHES = ("of as many microbatches as pipeline stages (8), torchtitan's default at the runs' commit "
                       "9dec370 (config_manager.py, pipeline_parallel_microbatches=None; "
                       "parallelisms/pipelining_utils.py: n_microbatches = pipeline_parallel_degree)")


def _llama(size: str, seq: int) -> GPTConfig:
    return dataclasses.replace(LLAMA_3_1[size], block_size=seq)


def _torchtitan_2024_12() -> list[Run]:
    src, runs = "torchtitan-2024-12", []
    for table, gpus in ((1, 8), (3, 128)):       # 8B, FSDP only, local batch 2, selective AC
        rows = ({1: ((5762, 82.4), (6667, 77.0), (8532, 76.8)),
                 3: ((5605, 67.0), (6514, 62.0), (8380, 61.8))}[table])
        for (tps, gib), (label, compiled, f8) in zip(rows, (("FSDP", False, False), ("compile", True, False),
                                                          ("compile+float8", True, True))):
            runs.append(Run(source=src, name=f"torchtitan 8B {gpus} GPUs {label}", where=f"Table {table}, {label}",
                            model=_llama("8B", 8192), seq_len=8192, gpus=gpus, dp=gpus, recompute="op",
                            recompute_detail=_OP_SAC, microbatch=2, global_batch=2 * gpus, compile=compiled,
                            float8=f8, tokens_per_s=float(tps), memory_gib=gib, **_TITAN))
    for (fsdp, cp, seq, tps, gib) in ((8, 1, 32768, 3890, 83.9), (4, 2, 65536, 2540, 84.2),
                                      (2, 4, 131072, 1071, 84.0), (1, 8, 262144, 548, 84.5)):
        runs.append(Run(source=src, name=f"torchtitan 8B 8 GPUs cp{cp} {seq // 1024}k",
                        where=f"Table 2, FSDP {fsdp} CP {cp}",
                        model=_llama("8B", seq), seq_len=seq, gpus=8, dp=fsdp, cp=cp, recompute="full",
                        microbatch=1, global_batch=fsdp, compile=True, float8=True, tokens_per_s=float(tps),
                        memory_gib=gib, **_TITAN))
    for label, async_tp, tps, gib in (("2D", False, 829, 71.9), ("2D+AsyncTP", True, 876, 67.6)):
        runs.append(Run(source=src, name=f"torchtitan 70B 256 GPUs {label}", where=f"Table 4, {label}",
                        model=_llama("70B", 8192), seq_len=8192, gpus=256, dp=32, tp=8, recompute="full",
                        microbatch=16, global_batch=512, sequence_parallel=True, compile=True, float8=True,
                        async_tp=async_tp, tokens_per_s=float(tps), memory_gib=gib, **_TITAN))
    # Interleaved 1F1B: 2 stages per rank, torchtitan's default for multi-stage schedules without split
    # points (pipelining_utils.generate_split_points, 9dec370: num_stages_per_rank = 2)
    for label, virtual, tps, gib in (("1F1B", 1, 100, 82.5), ("Interleaved 1F1B", 2, 128, 72.7)):
        runs.append(Run(source=src, name=f"torchtitan 405B 512 GPUs {label}", where=f"Table 5, {label}",
                        model=_llama("405B", 8192), seq_len=8192, gpus=512, dp=8, tp=8, pp=8, recompute="full",
                        microbatch=32 // 8, global_batch=256, sequence_parallel=True, compile=True, float8=True,
                        async_tp=True,
                        virtual_stages=virtual, tokens_per_s=float(tps), memory_gib=gib,
                        notes="microbatch size not given: local batch 32 per FSDP rank in torchtitan's default "
                              + _TITAN_MICROBATCHES + "; memory: 'the maximum across all GPUs' (different stages "
                              "differ)", **_TITAN))
    for (fsdp, cp, seq, tps, gib) in ((8, 1, 32768, 76, 75.3), (4, 2, 65536, 47, 75.9),
                                      (2, 4, 131072, 31, 77.1), (1, 8, 262144, 16, 84.9)):
        runs.append(Run(source=src, name=f"torchtitan 405B 512 GPUs cp{cp} {seq // 1024}k",
                        where=f"Table 6, FSDP {fsdp} CP {cp}", model=_llama("405B", seq), seq_len=seq, gpus=512,
                        dp=fsdp, tp=8, pp=8, cp=cp, recompute="full", microbatch=1, global_batch=8 * fsdp,
                        sequence_parallel=True,
                        compile=True, float8=True, async_tp=True, virtual_stages=1, tokens_per_s=float(tps),
                        memory_gib=gib,
                        notes="microbatch size not given: local batch 8 per FSDP rank in torchtitan's default "
                              + _TITAN_MICROBATCHES, **_TITAN))
    return runs


def _torchtitan_asynctp_2025_06() -> list[Run]:
    runs = []
    common = dict(_TITAN, memory_kind=None)
    for size, gpus, fsdp, local, recompute, detail, (vanilla, overlapped) in (
            ("70B", 256, 32, 16, "full", "", (597.3, 652.4)),
            ("8B", 64, 8, 12, "op", "torchtitan's per-op SAC", (4378, 4809.4))):
        for label, async_tp, tps in (("TP", False, vanilla), ("AsyncTP", True, overlapped)):
            runs.append(Run(source="torchtitan-asynctp-2025-06", name=f"torchtitan {size} {gpus} GPUs bf16 {label}",
                            where=f"the {size} table, 'None (bfloat16)' row, {label} column",
                            model=_llama(size, 8192), seq_len=8192, gpus=gpus, dp=fsdp, tp=8, recompute=recompute,
                            recompute_detail=detail, microbatch=local, global_batch=local * fsdp,
                            sequence_parallel=True, compile=True, async_tp=async_tp, tokens_per_s=float(tps),
                            notes="no memory published", **common))
    return runs


def _trainy_2025_06() -> list[Run]:
    return [Run(source="trainy-2025-06", name=f"trainy 8B {8 * nodes} H200s", where=f"results table, NUM_NODES {nodes}",
                model=_llama("8B", 8192), seq_len=8192, gpu="H200-SXM-141GB", gpus=8 * nodes, dp=8 * nodes,
                zero=3, recompute="op", recompute_detail=_OP_SAC, microbatch=2, global_batch=16 * nodes,
                flash=True, compile=True, float8=True, tokens_per_s=float(tps), flops="torchtitan",
                peak_tflops=989.0, memory_gib=gib,
                memory_kind="not stated (torchtitan's log line at e7c0cae prints the reserved peak)",
                notes="FSDP float8 all-gather on; 'arbitrarily sampled at the 100th iteration'")
            for nodes, tps, gib in ((4, 10938, 47.96), (8, 10753, 46.97))]


def _deepseek_v3_2024() -> list[Run]:
    gpu_hours_per_trillion = 180e3
    return [Run(source="deepseek-v3-2024", name="deepseek-v3 pre-training", where="§1, Table 1, §3.2",
                model=None, seq_len=None, gpu="H800", gpus=2048, dp=2048 // 16, pp=16, ep=64, zero=1,
                tokens_per_s=1e12 / (gpu_hours_per_trillion * 3600), flops="none",
                unsupported=("MLA attention and DeepSeekMoE (1 shared + 256 routed experts, 8 per token, at most "
                             "4 nodes per token): not a GPTConfig",
                             "FP8 mixed-precision training: the planner prices bf16 matmuls",
                             "DualPipe: a bidirectional schedule overlapping all-to-all and PP transfers with "
                             "compute, parameters twice",
                             "expert load imbalance: the planner assumes even routing",
                             "20 of 132 SMs reserved for communication",
                             "H800 (NVLink 160 GB/s, IB 50 GB/s per the paper)"),
                notes="tokens_per_s = 10^12 tokens / (180K GPU hours × 3600 s): averaged over the whole "
                      "pre-training (restarts included); 2664K GPU hours / 180K = 14.8T tokens; the sequence "
                      "length was not read in the paper's text here; dp = 2048 / 16 (no TP or CP named)")]


RUNS: list[Run] = (_megatron_2021() + _korthikanti_2022() + _llama3_2024() + _torchtitan_2024_12()
                   + _torchtitan_asynctp_2025_06() + _trainy_2025_06() + _deepseek_v3_2024())
"""Every transcribed run, grouped by source in the order of :data:`SOURCES`."""


def runs(source: str | None = None) -> list[Run]:
    """The runs of one source (a key of :data:`SOURCES`), or all of them."""
    if source is not None and source not in SOURCES:
        raise ValueError(f"unknown source {source!r}; pick one of {', '.join(SOURCES)}")
    return [r for r in RUNS if source is None or r.source == source]
