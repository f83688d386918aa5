"""Helpers shared by every notebook of *Distributed Training, Tested*: a map for the reader.

One idea per module; importing this package is cheap and imports no deep-learning framework
(not TensorFlow, Keras or JAX, and not even PyTorch). Each module imports its framework itself.
The modules fall in three groups; the chapters that use a module most are in brackets.

Lessons: what a chapter teaches, written to be read top to bottom.

- ``dataparallel``   data parallel training from scratch: every rank's gradients averaged (ch. 02)
- ``costmodel``      alpha-beta communication model, Amdahl, memory per parameter and per ZeRO stage,
  pipeline bubble: pure arithmetic (ch. 01, 10)
- ``shape``          a GPT's shape (``GPTConfig``): sizes, parameters and FLOPs per token, dense or MoE;
  one vocabulary for the model, the accounting and the planner
- ``layout``         the process grid (``Layout``: dp, tp, pp, cp, ep): rank coordinates, the groups of
  each dimension, the device mesh (ch. 14-16)
- ``gpt``            a tiny GPT (nanoGPT-style, separate q/k/v, untied head): the transformer to split
- ``llama``          a Llama-3-style transformer (RMSNorm, SwiGLU, RoPE, grouped-query attention) (ch. 13)
- ``losses``         cross-entropy of a large vocabulary chunk by chunk, logits recomputed in backward (ch. 13)
- ``accounting``     a transformer's parameters, FLOPs, activation and model-state bytes (ch. 13)
- ``tensor_parallel`` Megatron's split of the GPT's blocks over ranks, as DTensor plans (ch. 09)
- ``context_parallel`` causal attention over a sequence split across ranks: ring attention (ch. 14)
- ``moe``            mixture of experts in one process: router, top-k, capacity, load balancing (ch. 15)
- ``expert_parallel`` a MoE layer's experts split over ranks, tokens sent to them by all-to-all (ch. 15)
- ``composed``       DP x TP x PP composed on one device mesh: the GPT on a grid of ranks (ch. 16)
- ``planner``        which layout? per-GPU memory, step time and MFU of a GPT or Llama under dp, tp, pp, cp,
  ep, ZeRO, recomputation and overlap (ch. 16)
- ``gemm_efficiency`` how close to peak a matrix multiply runs, by its sizes: a three-term model fitted to
  measured GEMMs (the planner's compute time)
- ``published_runs`` published training runs (Megatron-LM, Korthikanti, Llama 3, torchtitan, DeepSeek-V3):
  layouts, memory and throughput, each with where it was read (ch. 16)
- ``validation``     the planner against published runs: prediction, published value, ratio, and a
  leave-one-out constant predictor beside it (ch. 16)

Instruments: what measures, counts, checks and shows; they change nothing they measure.

- ``measure``        timers that synchronise the device; all-reduce bandwidth; DDP's buckets and calls
- ``commcount``      the collectives a piece of PyTorch code issues, and the bytes each rank sends
- ``stage_meter``    a pipeline stage's compute seconds and the most microbatches it holds (ch. 09)
- ``compare``        how far apart two runs' weights are (NumPy; any framework's arrays)
- ``bounds``         print a measured number as the bound it was checked against (same on every CPU)
- ``failures``       run a seed article's failing code: show the error or warning, and check it happens
- ``gpu_reference``  GPU numbers committed under results/gpu-*/, read and labelled (never invented)
- ``plots``          one figure style: labelled axes with units, a light grid, the same colours
- ``explorer``       the planner's best layouts at a glance: per-GPU memory and step time by part, as a
  figure and behind ipywidgets controls (model, GPUs, sequence length; ch. 16)
- ``progress``       progress bars for long cells; what a notebook stores is the finished bar

Machinery: where and how the chapters run; read it to change the course, not to learn from it.

- ``placement``      the plan every chapter prints: device, backend and sizes for 0, 1 or N GPUs
- ``hardware``       cores, memory (cgroup limits included), GPUs, bf16 support, seeding, a report
- ``gpu_facts``      what a GPU can do (native bf16, float8 matmuls, what fits) from its capability and memory
- ``launch``         run a worker on N local processes (gloo/NCCL) and get each rank's result back
- ``subprocesses``   run a command or a torchrun job as a subprocess that is always reaped
- ``ports``          the ports launchers hand out: outside the OS's ephemeral range, leased
- ``tfdevices``      split the CPU into N logical TensorFlow devices (or use the GPUs)
- ``tfcluster``      a multi-worker TensorFlow cluster of subprocesses on 127.0.0.1 (TF_CONFIG, reaped)
- ``mxcluster``      an MXNet parameter-server job (scheduler, servers, workers) as reaped subprocesses
- ``data``           synthetic and bundled datasets as NumPy arrays (digits, a character corpus)
- ``models``         the few small PyTorch models used across chapters
- ``quiet``          the environment that keeps framework log lines out of outputs (set on import)
- ``kernels``        the test tiers' Jupyter kernels: on Unix sockets (no ports to race for); one that
  dies says why

The exercises' checks live outside this package, in ``grading/``.
"""
from __future__ import annotations

from . import quiet
from .hardware import seed_everything

quiet.apply()  # before any framework is imported: they read their log settings when they start

__all__ = ["seed_everything"]
__version__ = "0.1.0"
