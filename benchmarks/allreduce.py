"""All-reduce bandwidth beside the local memory-copy bandwidth: how far is "the network" from memory?

    python benchmarks/allreduce.py --quick        # gloo, 2 processes, 4 KiB - 16 MiB (CPU, ~30 s)
    python benchmarks/allreduce.py                # 4 KiB - 256 MiB; NCCL too with 2+ GPUs

For each message size: the all-reduce time (best of the repeats, max over ranks), algbw = bytes / time
and busbw = algbw * 2(n-1)/n (nccl-tests' definitions: busbw is what each link carried, comparable
across n), and the single-process copy bandwidth of the same number of bytes (dst.copy_(src), bytes
copied per second) - the local limit any transport between processes on this machine works against.
The summary fits the alpha-beta ring model to the largest world's times (chapter 01's model).
"""
from __future__ import annotations

import _common
from course_utils import costmodel, hardware, launch, measure, placement


def copy_bandwidth(nbytes: int, device: str, repeats: int) -> float:
    """Bytes per second of ``dst.copy_(src)`` for float32 tensors of ``nbytes``."""
    import torch

    src = torch.ones(max(1, nbytes // 4), device=device)
    dst = torch.empty_like(src)
    best = measure.time_fn(lambda: dst.copy_(src), repeats=repeats, warmup=2, device=device, min_time_s=0.01).best
    return src.numel() * 4 / best


def describe(doc: dict) -> list[str]:
    """What a chapter quotes from this file: each backend and world size's bus bandwidth at its largest
    message (beside one process's copy bandwidth), and why NCCL was not measured where it was not."""
    largest: dict[tuple[str, int], dict] = {}
    for r in doc["results"]:
        key = (r["backend"], r["ranks"])
        if r["bytes"] >= largest.get(key, {"bytes": -1})["bytes"]:
            largest[key] = r
    lines = [f"{b}, {n} ranks on {r['device']}: busbw {r['busbw_Bps'] / 1e9:,.2f} GB/s at {_common.size(r['bytes'])} "
             f"(copy in one process {r['copy_Bps'] / 1e9:,.1f} GB/s)" for (b, n), r in sorted(largest.items())]
    if not any(b == "nccl" for b, _ in largest):
        gpus = len(doc["meta"]["gpus"])
        lines.append(f"nccl: not measured ({gpus} GPU{'' if gpus == 1 else 's'}: "
                     "a GPU all-reduce needs one GPU per rank)")
    return lines


def main(argv: list[str] | None = None) -> dict:
    args = _common.parser(__doc__.splitlines()[0]).parse_args(argv)
    top = 12 if args.tiny else 24 if args.quick else 28            # 4 KiB * 2**k: 16 KiB, 16 MiB, 256 MiB
    sizes = [4096 * 4**k for k in range((top - 12) // 2 + 1)] if not args.tiny else [4096, 65536]
    repeats = 3 if args.tiny else 5 if args.quick else 20
    gpu_plan = placement.plan(max(2, placement.gpu_count()))   # every GPU, if each rank can have its own
    runs = [("gloo", "cpu", n) for n in ([2] if args.quick or args.tiny else sorted({2, min(4, hardware.cpu_cores())}))]
    if gpu_plan.backend == "nccl":
        runs.append(("nccl", "cuda", gpu_plan.world_size))
    rows = []
    for backend, device, n in runs:
        measured = launch.run(measure.allreduce_worker, n, args=(sizes,), backend=backend, output="none",
                              kwargs={"repeats": repeats, "device": device, "stat": "best"},
                              progress=f"{backend} all-reduce, {n} ranks", timeout_s=600)[0]
        for r in measured:
            rows.append({"backend": backend, "device": device, "ranks": n, "bytes": r["bytes"],
                         "seconds": r["seconds"], "algbw_Bps": r["algbw"], "busbw_Bps": r["busbw"],
                         "copy_Bps": copy_bandwidth(r["bytes"], device, repeats)})
    print(_common.table([{**r, "KiB": r["bytes"] / 1024, "ms": r["seconds"] * 1e3, "algbw GB/s": r["algbw_Bps"] / 1e9,
                          "busbw GB/s": r["busbw_Bps"] / 1e9, "copy GB/s": r["copy_Bps"] / 1e9} for r in rows],
                        {"backend": "{}", "ranks": "{}", "KiB": "{:.0f}", "ms": "{:.3f}", "algbw GB/s": "{:.2f}",
                         "busbw GB/s": "{:.2f}", "copy GB/s": "{:.1f}"}))
    gloo = [r for r in rows if r["backend"] == "gloo" and r["ranks"] == max(n for b, _, n in runs if b == "gloo")]
    fit = costmodel.fit_alpha_beta([r["bytes"] for r in gloo], [r["seconds"] for r in gloo], gloo[0]["ranks"])
    largest = gloo[-1]
    summary = {"ranks": largest["ranks"], "largest_bytes": largest["bytes"],
               "gloo_busbw_Bps": largest["busbw_Bps"], "copy_Bps": largest["copy_Bps"],
               "busbw_over_copy": largest["busbw_Bps"] / largest["copy_Bps"],
               "alpha_s": fit.alpha, "beta_s_per_byte": fit.beta, "fitted_bandwidth_Bps": fit.bandwidth}
    print(f"gloo busbw at {largest['bytes'] / 2**20:.0f} MiB: {largest['busbw_Bps'] / 1e9:.2f} GB/s = "
          f"{summary['busbw_over_copy']:.3f} x the copy bandwidth ({largest['copy_Bps'] / 1e9:.1f} GB/s); "
          f"alpha = {fit.alpha * 1e6:.0f} us, 1/beta = {fit.bandwidth / 1e9:.2f} GB/s")
    _common.write("allreduce", args, rows, summary, describe)
    return summary


if __name__ == "__main__":
    main()
