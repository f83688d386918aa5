"""One device's own speed: matmul rate by size (chapter 00's sweep) and memory-copy bandwidth.

    python benchmarks/device.py --quick      # CPU sizes (~10 s)
    python benchmarks/device.py              # full sizes; on a GPU also host <-> device copies

The matmul rate is 2n^3 / time for an n x n fp32 matmul (TF32 off: fp32 means fp32), the best of
the repeats, exactly the measurement chapter 00 makes on the reader's machine. Copy bandwidth is
bytes moved per second by ``dst.copy_(src)`` for 256 MiB (64 MiB with --quick): within the device's
memory, and on a GPU from pinned host memory to the device and back (the PCIe/C2C link).
"""
from __future__ import annotations

import _common
from course_utils import measure, placement


def matmul_rate(n: int, device: str, repeats: int) -> tuple[float, float]:
    """(seconds, GFLOP/s) of an n x n fp32 matmul on ``device``, best of ``repeats``."""
    import torch

    a = torch.randn(n, n, device=device)
    seconds = measure.time_fn(lambda: a @ a, repeats=repeats, warmup=2, device=device, min_time_s=0.01).best
    return seconds, measure.matmul_gflops(n, seconds)


def copy_rate(nbytes: int, src_device: str, dst_device: str, repeats: int) -> float:
    """Bytes per second of ``dst.copy_(src)`` between two devices (pinned host memory for a GPU copy)."""
    import torch

    pin = "cuda" in (src_device + dst_device) and "cpu" in (src_device, dst_device)
    src = torch.ones(nbytes // 4, device=src_device)
    dst = torch.empty(nbytes // 4, device=dst_device)
    src, dst = (t.pin_memory() if pin and t.device.type == "cpu" else t for t in (src, dst))
    sync = "cuda" if "cuda" in (src_device + dst_device) else "cpu"
    return nbytes / measure.time_fn(lambda: dst.copy_(src), repeats=repeats, warmup=2, device=sync).best


def describe(doc: dict) -> list[str]:
    """What a chapter quotes from this file: the matmul rate by size and the copy bandwidths."""
    results = doc["results"]
    rates = [f"{r['n']}: {r['gflops']:,.0f}" for r in results if r["kind"] == "matmul"]
    names = {"device": "on the device", "host_to_device": "host→device", "device_to_host": "device→host"}
    copies = [f"{names.get(r['direction'], r['direction'])} {r['Bps'] / 1e9:,.1f}"
              for r in results if r["kind"] == "copy"]
    return [f"fp32 matmul (TF32 off), GFLOP/s by n: {_common.joined(rates)}",
            f"copy bandwidth, GB/s: {_common.joined(copies)}"]


def main(argv: list[str] | None = None) -> dict:
    import torch

    args = _common.parser(__doc__.splitlines()[0]).parse_args(argv)
    device = placement.plan(1).device
    torch.backends.cuda.matmul.fp32_precision = "ieee"  # fp32 means fp32: no TF32
    if args.tiny:
        sizes, nbytes, repeats = [32, 64], 2**20, 2
    elif args.quick or device == "cpu":
        sizes, nbytes, repeats = [32, 64, 128, 256, 512] + ([] if args.quick else [1024, 2048]), 2**26, 5
    else:
        sizes, nbytes, repeats = [256, 1024, 2048, 4096, 8192], 2**28, 10
    rows = []
    for n in sizes:
        seconds, gflops = matmul_rate(n, device, repeats)
        rows.append({"kind": "matmul", "n": n, "dtype": "fp32", "seconds": seconds, "gflops": gflops})
    copies = [("device", device, device)] + ([("host_to_device", "cpu", "cuda"), ("device_to_host", "cuda", "cpu")]
                                             if device == "cuda" else [])
    for name, src, dst in copies:
        rows.append({"kind": "copy", "direction": name, "bytes": nbytes, "Bps": copy_rate(nbytes, src, dst, repeats)})
    print(_common.table([r for r in rows if r["kind"] == "matmul"],
                        {"n": "{}", "seconds": "{:.6f}", "gflops": "{:.1f}"}))
    print(_common.table([{**r, "GB/s": r["Bps"] / 1e9} for r in rows if r["kind"] == "copy"],
                        {"direction": "{}", "bytes": "{}", "GB/s": "{:.1f}"}))
    summary = {"device": device, "best_fp32_gflops": max(r["gflops"] for r in rows if r["kind"] == "matmul"),
               "copy_Bps": {r["direction"]: r["Bps"] for r in rows if r["kind"] == "copy"}}
    _common.write("device", args, rows, summary, describe)
    return summary


if __name__ == "__main__":
    main()
