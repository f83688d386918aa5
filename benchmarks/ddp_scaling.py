"""DDP weak and strong scaling, and why it falls short of linear (the alpha-beta model).

    python benchmarks/ddp_scaling.py --quick      # gloo on CPU, 1 and 2 processes (~40 s)
    python benchmarks/ddp_scaling.py              # 1, 2, 4 processes (or every GPU, NCCL)

Weak scaling keeps the batch per rank fixed (more ranks, more samples per step): efficiency =
throughput(n) / (n * throughput(1)). Strong scaling keeps the global batch fixed: efficiency =
speed-up / n. Each step is also timed inside ``no_sync()`` (no all-reduce), so the measured cost of
communication is step - compute; the alpha-beta model, fitted to an all-reduce sweep in the same
run, predicts that cost from the gradient size (DDP sends it in 25 MiB buckets).
"""
from __future__ import annotations

import math

import _common
from course_utils import bench, costmodel, hardware, launch, placement

BUCKET_BYTES = 25 * 2**20  # DDP's default bucket_cap_mb


def main(argv: list[str] | None = None) -> dict:
    args = _common.parser(__doc__.splitlines()[0]).parse_args(argv)
    plan = placement.plan(max(2, placement.gpu_count()))   # NCCL on every GPU with 2+, else gloo on the CPU
    device, backend = plan.rank_device, plan.backend
    if args.tiny:
        sizes, batch, steps, worlds = [64, 128, 10], 32, 3, [1, 2]
    elif args.quick:
        sizes, batch, steps, worlds = [256, 1024, 1024, 10], 256, 10, [1, 2]
    elif device == "cuda":
        sizes, batch, steps, worlds = [4096, 8192, 8192, 8192, 1000], 512, 20, sorted({1, 2, plan.world_size})
    else:
        sizes, batch, steps, worlds = [512, 2048, 2048, 10], 512, 20, sorted({1, 2, min(4, hardware.cpu_cores())})
    rows = []
    for mode in ("weak", "strong"):
        for n in worlds:
            per_rank = batch if mode == "weak" else batch // n
            r = launch.run(bench.ddp_step_worker, n, args=(sizes, per_rank, steps), kwargs={"device": device},
                           backend=backend if n > 1 else None, output="none", timeout_s=600,
                           progress=f"{mode} scaling, {n} rank(s)")[0]
            rows.append({"mode": mode, "ranks": n, "batch_per_rank": per_rank, "global_batch": per_rank * n,
                         "step_s": r["step_s"], "compute_s": r["compute_s"], "grad_bytes": r["grad_bytes"],
                         "samples_per_s": per_rank * n / r["step_s"]})
    for r in rows:
        base = next(b for b in rows if b["mode"] == r["mode"] and b["ranks"] == 1)
        # weak: throughput(n) / (n throughput(1)); strong: speed-up / n - the same ratio, as
        # a fixed global batch makes throughput proportional to 1 / step time
        r["efficiency"] = r["samples_per_s"] / (r["ranks"] * base["samples_per_s"])

    n_max = max(worlds)
    sweep = launch.run(bench.allreduce_worker, n_max, args=([2**16, 2**20, 2**22, 2**24][: 2 if args.tiny else 4],),
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
               "alpha_s": fit.alpha, "beta_s_per_byte": fit.beta}
    print(f"{n_max} ranks: weak-scaling efficiency {summary['weak_efficiency']:.2f}, strong "
          f"{summary['strong_efficiency']:.2f}; all-reduce of {rows[0]['grad_bytes'] / 2**20:.1f} MiB of gradients: "
          f"measured {summary['weak_comm_measured_s'] * 1e3:.1f} ms/step, alpha-beta model "
          f"{summary['weak_comm_model_s'] * 1e3:.1f} ms")
    _common.write("ddp_scaling", args, rows, summary)
    return summary


if __name__ == "__main__":
    main()
