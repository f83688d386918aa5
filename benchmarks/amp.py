"""Mixed precision: training-step time fp32 vs bf16 (vs fp16 on a GPU), and matmul TFLOP/s vs peak.

    python benchmarks/amp.py --quick      # CPU sizes (~40 s)
    python benchmarks/amp.py              # full sizes; on a GPU adds fp16 + GradScaler

Two models: an MLP and one transformer encoder block (self-attention + MLP). A step is forward,
backward and an Adam update under ``torch.autocast`` (bf16/fp16) or plain fp32; median of the
repeats. fp16 is skipped on a CPU: CPUs have no fast fp16 matmul (chapter 04 measured it ~160x
slower). The matmul table compares measured TFLOP/s with the device's peak, whose source is
recorded: a datasheet for known GPUs, an estimate from cores x clock x FLOP/cycle for a CPU.
"""
from __future__ import annotations

import re
from pathlib import Path

import _common
from course_utils import hardware, measure, placement

# dense (no sparsity) peak TFLOP/s from NVIDIA's datasheets (SXM parts): fp32, tf32, bf16/fp16
GPU_PEAKS = {
    "H200": ({"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4},
             "NVIDIA H200 Tensor Core GPU datasheet (SXM, dense)"),
    "H100": ({"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4},
             "NVIDIA H100 Tensor Core GPU datasheet (SXM, dense)"),
    "A100": ({"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
             "NVIDIA A100 Tensor Core GPU datasheet (dense)"),
}


def device_peak(device: str) -> tuple[dict[str, float], str]:
    """Peak TFLOP/s by dtype and where the figure comes from."""
    if device == "cuda":
        name = hardware.gpus()[0]
        for key, (peaks, source) in GPU_PEAKS.items():
            if key in name:
                return peaks, source
        return {}, f"unknown for {name}: add its datasheet figures to GPU_PEAKS"
    mhz = [float(m) for m in re.findall(r"cpu MHz\s*:\s*([\d.]+)", _read("/proc/cpuinfo"))]
    if not mhz:
        return {}, "unknown: no clock in /proc/cpuinfo"
    flops_per_cycle = 32  # fp32: two 256-bit FMA pipes x 8 lanes x 2 (AVX2/AVX-512 on 256-bit datapaths)
    peak = hardware.cpu_cores() * max(mhz) * 1e6 * flops_per_cycle / 1e12
    return {"fp32": peak}, (f"estimate: {hardware.cpu_cores()} cores x {max(mhz):.0f} MHz x {flops_per_cycle} fp32 "
                            "FLOP/cycle (2 FMA pipes of 256 bits); the real figure depends on the CPU model")


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def models(kind: str, quick: bool):
    import torch

    if kind == "mlp":
        width = 1024 if quick else 8192
        net = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.Linear(width, width))
        return net, (lambda batch: torch.randn(batch, width)), 256 if quick else 4096
    d = 256 if quick else 2048
    net = torch.nn.TransformerEncoderLayer(d_model=d, nhead=4 if quick else 16, dim_feedforward=4 * d,
                                           batch_first=True, dropout=0.0)
    seq = 128 if quick else 1024
    return net, (lambda batch: torch.randn(batch, seq, d)), 8 if quick else 16


def step_time(kind: str, dtype: str, device: str, quick: bool, repeats: int) -> float:
    import torch

    torch.manual_seed(0)
    net, make, batch = models(kind, quick)
    net = net.to(device)
    x = make(batch).to(device)
    opt = torch.optim.Adam(net.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler(device, enabled=dtype == "fp16")
    cast = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=cast or torch.float32, enabled=cast is not None):
            loss = net(x).float().pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    return measure.time_fn(step, repeats=repeats, warmup=2, device=device).median


def matmul_tflops(n: int, dtype: str, device: str, repeats: int) -> float:
    import torch

    dt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    a, b = torch.randn(n, n, device=device, dtype=dt), torch.randn(n, n, device=device, dtype=dt)
    seconds = measure.time_fn(lambda: a @ b, repeats=repeats, warmup=2, device=device, min_time_s=0.02).best
    return measure.matmul_gflops(n, seconds) / 1e3


def describe(doc: dict) -> list[str]:
    """What a chapter quotes from this file: each dtype's training-step speed-up over fp32, the best
    matmul rate of each dtype (and its fraction of the peak, where one is known), the peak's source."""
    results = doc["results"]
    steps = {(r["model"], r["dtype"]): r["seconds"] for r in results if r["kind"] == "step"}
    lines = []
    for dtype in ("bf16", "fp16"):
        ratios = [f"{model} {fp32 / steps[model, dtype]:.2f}x" for (model, d), fp32 in steps.items()
                  if d == "fp32" and (model, dtype) in steps]
        if ratios:
            lines.append(f"training step, {dtype} speed-up over fp32: {_common.joined(ratios)}")
    best: dict[str, dict] = {}
    for r in results:
        if r["kind"] == "matmul" and r["tflops"] > best.get(r["dtype"], {"tflops": -1.0})["tflops"]:
            best[r["dtype"]] = r
    rates = [f"{d} {r['tflops']:,.1f}" + (f" of {r['peak_tflops']:,.1f} peak ({r['tflops'] / r['peak_tflops']:.0%})"
                                         if r.get("peak_tflops") else "") for d, r in best.items()]
    lines.append(f"best matmul TFLOP/s: {_common.joined(rates)}")
    lines.append(f"peak: {doc['summary'].get('peak_source', 'unknown')}")
    return lines


def main(argv: list[str] | None = None) -> dict:
    import torch

    args = _common.parser(__doc__.splitlines()[0]).parse_args(argv)
    small = args.quick or args.tiny
    device = placement.plan(1).device
    if device == "cuda":
        torch.backends.cuda.matmul.fp32_precision = "ieee"  # fp32 means fp32 (no TF32)
    dtypes = ["fp32", "bf16"] + (["fp16"] if device == "cuda" else [])
    repeats = 2 if args.tiny else 5 if args.quick else 20
    rows = []
    kinds = ["mlp"] if args.tiny else ["mlp", "transformer"]
    for kind in kinds:
        for dtype in dtypes:
            rows.append({"kind": "step", "model": kind, "dtype": dtype,
                         "seconds": step_time(kind, dtype, device, small, repeats)})
    peaks, source = device_peak(device)
    sizes = [256] if args.tiny else [512, 1024] if args.quick else [2048, 4096, 8192]
    for n in sizes:
        for dtype in dtypes:
            tflops = matmul_tflops(n, dtype, device, repeats)
            peak = peaks.get(dtype)
            rows.append({"kind": "matmul", "n": n, "dtype": dtype, "tflops": tflops, "peak_tflops": peak,
                         "fraction_of_peak": tflops / peak if peak else None})
    steps = [r for r in rows if r["kind"] == "step"]
    print(_common.table([{**r, "ms": r["seconds"] * 1e3} for r in steps],
                        {"model": "{}", "dtype": "{}", "ms": "{:.2f}"}))
    mm = [r for r in rows if r["kind"] == "matmul"]
    print(_common.table([{**r, "peak": r["peak_tflops"] or float("nan"),
                          "of peak": r["fraction_of_peak"] or float("nan")} for r in mm],
                        {"n": "{}", "dtype": "{}", "tflops": "{:.3f}", "peak": "{:.1f}", "of peak": "{:.1%}"}))
    print(f"peak source: {source}")
    fp32 = {r["model"]: r["seconds"] for r in steps if r["dtype"] == "fp32"}
    summary = {"device": device, "peak_source": source,
               "bf16_speedup": {m: fp32[m] / r["seconds"] for r in steps if r["dtype"] == "bf16" for m in [r["model"]]},
               "best_fp32_tflops": max(r["tflops"] for r in mm if r["dtype"] == "fp32"),
               "best_bf16_tflops": max(r["tflops"] for r in mm if r["dtype"] == "bf16")}
    _common.write("amp", args, rows, summary, describe)
    return summary


if __name__ == "__main__":
    main()
