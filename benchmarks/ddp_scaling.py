"""DDP weak and strong scaling, and why it falls short of linear (the alpha-beta model).

    python benchmarks/ddp_scaling.py --quick      # 1 and 2 ranks: gloo on the CPU (~40 s), NCCL with 2+ GPUs
    python benchmarks/ddp_scaling.py              # 1, 2, 4 processes (or every GPU, NCCL)

Where the ranks run and at which sizes is :func:`setup`'s decision from the placement plan (one GPU
per rank over NCCL at GPU sizes, else processes on the CPU over gloo at CPU sizes), and the line
"why not 1.00: ..." it prints (:func:`conclusion`) blames what those ranks shared.

Weak scaling keeps the batch per rank fixed (more ranks, more samples per step): efficiency =
throughput(n) / (n * throughput(1)). Strong scaling keeps the global batch fixed: efficiency =
speed-up / n. Each step is also timed inside ``no_sync()`` (no all-reduce), so the measured cost of
communication is step - compute; the alpha-beta model, fitted to an all-reduce sweep in the same
run, predicts that cost from the gradient size (DDP sends it in 25 MiB buckets).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import _common
from course_utils import costmodel, hardware, launch, measure, placement

BUCKET_BYTES = 25 * 2**20  # DDP's default bucket_cap_mb


@dataclass(frozen=True)
class Setup:
    """What one run measures: ``worlds`` ranks (1 first) over ``backend`` on ``device`` ("cuda": one
    GPU per rank; "cpu": processes sharing the CPU), each training ``mlp(sizes)`` on ``batch``
    samples per step (weak scaling; strong scaling splits ``batch`` over the ranks), ``steps``
    timed steps per configuration."""

    backend: str
    device: str
    sizes: tuple[int, ...]
    batch: int
    steps: int
    worlds: tuple[int, ...]
    note: str = ""      # why the ranks run where they do, when the machine has GPUs they do not use

    def __str__(self) -> str:
        where = "one GPU per rank" if self.device == "cuda" else "processes on the CPU"
        return (f"DDP scaling: {', '.join(map(str, self.worlds))} rank(s) over {self.backend}, {where}, at "
                f"{'GPU' if self.device == 'cuda' else 'CPU'} sizes (MLP {'-'.join(map(str, self.sizes))}, "
                f"{self.batch} samples per rank, {self.steps} steps){self.note}")


def setup(plan: placement.Plan, *, quick: bool, tiny: bool = False, cpu_cores: int = 2) -> Setup:
    """The run for ``plan`` (``placement.plan(max(2, gpus))``): NCCL with GPU-sized work when every
    rank has its own GPU, else gloo on the CPU with CPU-sized work. ``quick``: 1 and 2 ranks at
    sizes that finish in seconds there; otherwise 1, 2 and every GPU (or up to 4 CPU processes)."""
    if plan.gpus_unused:
        note = f" (COURSE_PROFILE=cpu: {plan.gpus} GPU(s) left unused)"
    elif plan.backend == "gloo" and plan.gpus:
        note = f" ({plan.gpus} GPU, unused here: NCCL needs one GPU per rank)"
    else:
        note = ""
    if tiny:                       # the schema test's seconds-long run, wherever it runs
        return Setup(plan.backend, plan.rank_device, (64, 128, 10), 32, 3, (1, 2), note)
    if plan.backend == "nccl":     # ~1.8e11 FLOPs a step quick, ~1.1e12 full: milliseconds on a GPU, not overhead
        if quick:
            return Setup("nccl", "cuda", (2048, 4096, 4096, 1000), 1024, 10, (1, 2), note)
        return Setup("nccl", "cuda", (4096, 8192, 8192, 8192, 1000), 512, 20,
                     tuple(sorted({1, 2, plan.world_size})), note)
    if quick:                      # ~2e9 FLOPs a step: tens of ms on 2 CPU cores
        return Setup("gloo", "cpu", (256, 1024, 1024, 10), 256, 10, (1, 2), note)
    return Setup("gloo", "cpu", (512, 2048, 2048, 10), 512, 20, tuple(sorted({1, 2, min(4, cpu_cores)})), note)


def conclusion(run: Setup, rows: list[dict], summary: dict, cpu_cores: int) -> str:
    """One line, "why not 1.00: ...", that blames what the ranks of ``run`` shared, with the measured numbers."""
    n, ms = summary["ranks"], 1e3
    comm = (f"the all-reduce measured {summary['weak_comm_measured_s'] * ms:.1f} ms/step "
            f"(alpha-beta model {summary['weak_comm_model_s'] * ms:.1f} ms)")
    one, many = summary["weak_compute_s_1"], summary["weak_compute_s_n"]
    compute = (f"one rank's compute {one * ms:.1f} ms, with {n} ranks {many * ms:.1f} ms"
               + ("" if many > 1.1 * one else ": no slow-down beyond 10 % this time"))
    if run.backend == "nccl":
        text = (f"why not 1.00: each of the {n} ranks has its own GPU and nccl moves the gradients between "
                f"the GPUs, so the ranks share no compute ({compute}); what the step pays is the "
                f"communication that backward does not hide: {comm}")
    else:
        text = (f"why not 1.00: the {n} ranks are processes on this machine's {cpu_cores} CPU cores over gloo"
                f"{run.note}: their all-reduce copies through loopback sockets on the same CPU cores that "
                f"compute, so the two compete ({compute}); {comm}")
    noisy = sum(r["compute_s"] > r["step_s"] for r in rows if r["ranks"] > 1)
    if noisy:
        text += (f"; in {noisy} row(s) the compute alone timed slower than the whole step: two separate "
                 "medians, whose difference is within this machine's timing noise")
    return text


def headline(summary: dict) -> str:
    """The largest world's weak and strong scaling efficiency, and its all-reduce measured vs modelled."""
    return (f"{summary['ranks']} ranks: weak-scaling efficiency {summary['weak_efficiency']:.2f}, strong "
            f"{summary['strong_efficiency']:.2f}; all-reduce of {summary['params_bytes'] / 2**20:.1f} MiB of "
            f"gradients: measured {summary['weak_comm_measured_s'] * 1e3:.1f} ms/step, alpha-beta model "
            f"{summary['weak_comm_model_s'] * 1e3:.1f} ms")


def describe(doc: dict) -> list[str]:
    """What the README quotes from this file: the :func:`headline` and why the efficiencies are what they are."""
    return [headline(doc["summary"]), doc["summary"]["why"]]


def main(argv: list[str] | None = None) -> dict:
    args = _common.parser(__doc__.splitlines()[0]).parse_args(argv)
    plan = placement.plan(max(2, placement.gpu_count()))   # NCCL on every GPU with 2+, else gloo on the CPU
    run = setup(plan, quick=args.quick, tiny=args.tiny, cpu_cores=hardware.cpu_cores())
    print(run)
    device, backend = run.device, run.backend
    sizes, batch, steps, worlds = list(run.sizes), run.batch, run.steps, list(run.worlds)
    rows = []
    for mode in ("weak", "strong"):
        for n in worlds:
            per_rank = batch if mode == "weak" else batch // n
            r = launch.run(measure.ddp_step_worker, n, args=(sizes, per_rank, steps), kwargs={"device": device},
                           backend=backend if n > 1 else None, output="none", timeout_s=600,
                           progress=f"{mode} scaling, {n} rank(s)")[0]
            # one rank has nothing to communicate: its step *is* the compute (the worker timed the
            # same step twice; a second median of it would differ only by timing noise)
            rows.append({"mode": mode, "ranks": n, "batch_per_rank": per_rank, "global_batch": per_rank * n,
                         "step_s": r["step_s"], "compute_s": r["compute_s"] if n > 1 else r["step_s"],
                         "grad_bytes": r["grad_bytes"],
                         "samples_per_s": per_rank * n / r["step_s"]})
    for r in rows:
        base = next(b for b in rows if b["mode"] == r["mode"] and b["ranks"] == 1)
        # weak: throughput(n) / (n throughput(1)); strong: speed-up / n - the same ratio, as
        # a fixed global batch makes throughput proportional to 1 / step time
        r["efficiency"] = r["samples_per_s"] / (r["ranks"] * base["samples_per_s"])

    n_max = max(worlds)
    sweep = launch.run(measure.allreduce_worker, n_max, args=([2**16, 2**20, 2**22, 2**24][: 2 if args.tiny else 4],),
                       kwargs={"repeats": 3 if args.tiny else 5, "device": device, "stat": "best"},
                       backend=backend, output="none", progress="all-reduce sweep for the model")[0]
    fit = costmodel.fit_alpha_beta([s["bytes"] for s in sweep], [s["seconds"] for s in sweep], n_max)
    for r in rows:
        buckets = max(1, math.ceil(r["grad_bytes"] / BUCKET_BYTES))
        r["comm_measured_s"] = max(0.0, r["step_s"] - r["compute_s"])
        r["comm_model_s"] = float(fit.predict(r["grad_bytes"] / buckets)) * buckets if r["ranks"] > 1 else 0.0

    print(_common.table([{**r, "step ms": r["step_s"] * 1e3, "compute ms": r["compute_s"] * 1e3,
                          "comm ms": r["comm_measured_s"] * 1e3, "model ms": r["comm_model_s"] * 1e3} for r in rows],
                        {"mode": "{}", "ranks": "{}", "global_batch": "{}", "samples_per_s": "{:.0f}",
                         "efficiency": "{:.2f}", "step ms": "{:.2f}", "compute ms": "{:.2f}", "comm ms": "{:.2f}",
                         "model ms": "{:.2f}"}))
    top = {m: next(r for r in rows if r["mode"] == m and r["ranks"] == n_max) for m in ("weak", "strong")}
    summary = {"ranks": n_max, "backend": backend, "params_bytes": rows[0]["grad_bytes"],
               "weak_efficiency": top["weak"]["efficiency"], "strong_efficiency": top["strong"]["efficiency"],
               "weak_comm_measured_s": top["weak"]["comm_measured_s"], "weak_comm_model_s": top["weak"]["comm_model_s"],
               "weak_compute_s_1": rows[0]["compute_s"], "weak_compute_s_n": top["weak"]["compute_s"],
               "alpha_s": fit.alpha, "beta_s_per_byte": fit.beta, "device": device,
               "sizes": sizes, "batch_per_rank": batch}
    print(headline(summary))
    summary["why"] = conclusion(run, rows, summary, hardware.cpu_cores())
    print(summary["why"])
    _common.write("ddp_scaling", args, rows, summary, describe)
    return summary


if __name__ == "__main__":
    main()
