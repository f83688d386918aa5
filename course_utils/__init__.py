"""Helpers shared by every notebook of *Distributed Training, Tested*.

One idea per module; importing this package is cheap and imports no deep-learning framework
(not TensorFlow, Keras or JAX, and not even PyTorch). Each module imports its framework itself:

- ``placement``  the plan every chapter prints: device, backend and sizes for 0, 1 or N GPUs
- ``hardware``   cores, memory, GPUs, bf16 support, seeding, an environment report
- ``gpu_facts``  what a GPU can do (native bf16, float8 matmuls, what fits) from its capability and memory
- ``launch``     run a worker on N local processes (gloo/NCCL) and get each rank's result back
- ``scripts``    run a command or a torchrun job as a subprocess that is always reaped
- ``ports``      the ports launchers hand out: outside the OS's ephemeral range, leased so no two launches share one
- ``tfdevices``  split the CPU into N logical TensorFlow devices (or use the GPUs)
- ``tfcluster``  a multi-worker TensorFlow cluster of subprocesses on 127.0.0.1 (TF_CONFIG, reaped)
- ``mxcluster``  an MXNet parameter-server job (scheduler, servers, workers) as reaped subprocesses
- ``data``       synthetic and bundled datasets as NumPy arrays (digits, a character corpus)
- ``models``     the few small PyTorch models used across chapters
- ``gpt``        a tiny GPT (nanoGPT-style, separate q/k/v, untied head): the transformer to split
- ``accounting`` a transformer's parameters, FLOPs, activation and model-state bytes, and the counters that check them
- ``dataparallel`` data parallel training from scratch (gradient averaging), a launchable worker
- ``bench``      timers that synchronise devices; all-reduce bandwidth (algbw/busbw); DDP comm-hook instruments
- ``stage_meter`` an instrument for pipeline stages: compute seconds and microbatches held
- ``costmodel``  alpha-beta communication model, Amdahl, memory per parameter and per ZeRO stage, pipeline bubble
- ``plots``      one consistent figure style
- ``progress``   a progress bar for long cells and loops
- ``reference``  GPU numbers committed under results/gpu-*/, read and labelled (never invented)
- ``compare``    how far apart two runs' weights are (NumPy; any framework's arrays)
- ``exercises``  helpful assertions for the autograded exercises
- ``autograde``  run a student's distributed code on gloo ranks, compare with one process, explain
- ``seedcode``   ``expect_error``: run a seed article's failing code, show and check the failure
- ``stable``     print a measured number as the bound it was checked against (same on every CPU)
- ``quiet``      the environment that keeps framework log lines out of outputs (set on import)
- ``kernels``    the test tiers' Jupyter kernels: on Unix sockets (no ports to race for); one that dies says why
"""
from __future__ import annotations

from . import quiet
from .hardware import seed_everything

quiet.apply()  # before any framework is imported: they read their log settings when they start

__all__ = ["seed_everything"]
__version__ = "0.1.0"
