"""benchmarks/ddp_scaling.py decides its backend, sizes and conclusion from the device facts.

With 2+ GPUs the ranks run over NCCL, one GPU each, and must run GPU-sized work (a CPU-sized MLP
on a GPU measures only launch overhead), and the conclusion it prints must blame what that run
shares, not the CPU cores; with 0 or 1 GPU the ranks are CPU processes over gloo, and there the
cores are what they share. No GPU is needed: tests/fake_cuda.py fakes them, ``launch.run`` is
replaced by a recorder that answers with plausible timings.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fake_cuda import CARDS, COUNTS, fake_cuda

from course_utils import gpu_facts, placement

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import ddp_scaling  # noqa: E402

GPU_STEP_FLOPS = 1e11    # a global step that keeps a T4 (8 TFLOP/s fp32) busy for ~10 ms: more than launch overhead
CPU_STEP_FLOPS = 2e10    # a step that 2 CPU cores finish in well under a second


def step_flops(sizes: list[int], batch: int) -> float:
    """Forward + backward FLOPs of one step of ``mlp(sizes)`` on ``batch`` samples: 6 per weight per sample."""
    return 6.0 * batch * sum(a * b for a, b in zip(sizes, sizes[1:]))


def run_quick(monkeypatch, tmp_path, card: str, count: int) -> tuple[dict, list[dict]]:
    """``ddp_scaling.main(["--quick"])`` with ``count`` faked ``card`` GPUs: (its summary, the launches it made)."""
    monkeypatch.delenv("COURSE_PROFILE", raising=False)
    if count:
        fake_cuda(monkeypatch, card, count=count)
    else:
        import torch
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    launches = []

    def fake_run(fn, n, args=(), kwargs=None, backend=None, **_):
        launches.append({"fn": fn.__name__, "n": n, "args": args, "kwargs": kwargs or {}, "backend": backend})
        if fn.__name__ == "allreduce_worker":
            return [[{"bytes": b, "seconds": 1e-4 + b / 1e10} for b in args[0]]] * n
        sizes = args[0]
        grad_bytes = 4 * sum(a * b + b for a, b in zip(sizes, sizes[1:]))
        return [{"step_s": 0.02 + (0.005 if n > 1 else 0.0), "compute_s": 0.02, "grad_bytes": grad_bytes}] * n

    monkeypatch.setattr(ddp_scaling.launch, "run", fake_run)
    summary = ddp_scaling.main(["--quick", "--out", str(tmp_path)])
    return summary, launches


@pytest.mark.parametrize("count", [0, 1, 2, 8])
def test_backend_and_sizes_follow_the_gpu_count(monkeypatch, tmp_path, count):
    summary, launches = run_quick(monkeypatch, tmp_path, "T4", count)
    steps = [c for c in launches if c["fn"] == "ddp_step_worker"]
    on_gpus = count >= 2
    assert summary["backend"] == ("nccl" if on_gpus else "gloo")
    for c in steps:
        assert c["kwargs"]["device"] == ("cuda" if on_gpus else "cpu")
        assert c["backend"] in ((None, "nccl") if on_gpus else (None, "gloo"))
        flops = step_flops(c["args"][0], c["args"][1] * c["n"])   # the global batch (strong scaling splits it)
        if on_gpus:   # before the fix: --quick ran the CPU's 2e9-FLOP step on the GPUs
            assert flops >= GPU_STEP_FLOPS, (c["args"], f"{flops:.1e}")
        else:
            assert flops <= CPU_STEP_FLOPS, (c["args"], f"{flops:.1e}")


@pytest.mark.parametrize("count", [0, 1, 2, 8])
def test_the_printed_conclusion_blames_what_the_run_shared(monkeypatch, tmp_path, capsys, count):
    summary, _ = run_quick(monkeypatch, tmp_path, "H100", count)
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("why not 1.00:")]
    assert len(lines) == 1, out    # before the fix: no conclusion, the notebook blamed the cores whatever ran
    why = lines[0]
    assert summary["why"] == why
    if count >= 2:
        assert "nccl" in why and "GPU" in why and "CPU cores" not in why
    else:
        assert "gloo" in why and "CPU cores" in why
    if count == 1:
        assert "NCCL needs one GPU per rank" in why


@pytest.mark.parametrize("card", CARDS)
@pytest.mark.parametrize("count", COUNTS)
def test_gpu_sizes_fit_every_card(card, count):
    """The GPU setups (quick and full) fit in half of each card's memory: weights, gradients and DDP's
    gradient buckets (3 copies, fp32), SGD keeps no state, plus the largest layer's activations x 4."""
    plan = placement.plan(max(2, count), gpus=count, env={})
    for quick in (True, False):
        s = ddp_scaling.setup(plan, quick=quick, cpu_cores=2)
        if count < 2:
            assert s.backend == "gloo" and s.device == "cpu"
            continue
        assert s.backend == "nccl" and s.device == "cuda"
        params = sum(a * b + b for a, b in zip(s.sizes, s.sizes[1:]))
        need = 3 * 4 * params + 4 * 4 * s.batch * sum(s.sizes)
        assert need <= gpu_facts.KNOWN[card].total_bytes / 2, (card, s)
        assert max(s.worlds) <= count


def test_cpu_profile_keeps_gloo_on_a_gpu_machine(monkeypatch, tmp_path):
    monkeypatch.setenv("COURSE_PROFILE", "cpu")
    fake_cuda(monkeypatch, "A100", count=8)
    s = ddp_scaling.setup(placement.plan(8), quick=True, cpu_cores=2)
    assert s.backend == "gloo" and s.device == "cpu" and s.worlds == (1, 2)
