"""GEMM efficiency by matrix size: torch.mm TFLOP/s over square sizes and a transformer layer's shapes,
and the fit of course_utils.gemm_efficiency's three-term model to them.

    python benchmarks/gemm_efficiency.py --quick --out results/cpu-<cpu>-<YYYYMMDD>   # CPU: fp32 and bf16, 64-1024
    python benchmarks/gemm_efficiency.py --out results/cpu-<cpu>-<YYYYMMDD>           # CPU: up to 2048
    python benchmarks/gemm_efficiency.py --out results/gpu-<chip>-<YYYYMMDD>          # on a GPU: bf16, 512-16384

Where the file goes: ``--out DIR`` (``DIR/gemm_efficiency.json``). The planner reads the newest
``results/cpu-*/gemm_efficiency.json`` or ``results/gpu-*/gemm_efficiency.json``
(``course_utils.gemm_efficiency.measured``): store a CPU run as ``results/<gemm_efficiency.folder_name>``
(the script prints it), a GPU run in the ``results/gpu-<chip>-<YYYYMMDD>/`` folder of
``scripts/gpu_reference.sh``. Nothing there is estimated.

Each point is the median of a few timed repetitions (``course_utils.measure.time_fn``) of
``a @ b`` with a of m × k and b of k × n: square sizes, and the GEMMs of a transformer layer with
T = b·s tokens of width h (T × h times h × 3h: q, k, v; T × h times h × h: the projection; T × h
times h × 4h and T × 4h times 4h × h: the MLP). TF32 is off (fp32 means fp32). The peak each rate is
a fraction of: the datasheet's on a known GPU (``amp.GPU_PEAKS``), else the best rate measured here
for that dtype (a CPU's peak is not known to the course).
"""
from __future__ import annotations

import datetime

import _common
import amp
from course_utils import gemm_efficiency, hardware, measure, placement

WIDTHS = {"cpu": [256, 512], "cuda": [1024, 4096, 8192]}       # the transformer shapes' h
TOKENS = {"cpu": 512, "cuda": 8192}                             # their b·s


def shapes(device: str, quick: bool, tiny: bool) -> list[tuple[str, int, int, int]]:
    """(kind, m, n, k): square sizes (64-2048 on a CPU, 512-16384 on a GPU) and a layer's GEMMs."""
    if tiny:
        return [("square", n, n, n) for n in (32, 64, 128)] + [("layer", 64, 96, 32)]
    if device == "cpu":
        squares = [64, 128, 256, 512, 1024] + ([] if quick else [2048])
    else:
        squares = [512, 1024, 2048, 4096, 8192] + ([] if quick else [16384])
    out = [("square", n, n, n) for n in squares]
    tokens = TOKENS[device]
    for h in WIDTHS[device][: 1 if quick else None]:
        out += [("layer", tokens, 3 * h, h), ("layer", tokens, h, h), ("layer", tokens, 4 * h, h),
                ("layer", tokens, h, 4 * h)]
    return out


def measure_gemm(m: int, n: int, k: int, dtype, device: str, repeats: int) -> float:
    """Median seconds of one (m × k)·(k × n) product."""
    import torch

    a = torch.randn(m, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype)
    return measure.time_fn(lambda: torch.mm(a, b), repeats=repeats, warmup=1, device=device, min_time_s=0.02).median


def describe(doc: dict) -> list[str]:
    """What a chapter quotes: the fitted model per dtype and the range of rates measured."""
    lines = []
    for dtype, fitted in doc["summary"]["fit"].items():
        rates = [r["tflops"] for r in doc["results"] if r["dtype"] == dtype]
        bw = "no memory term" if fitted["bandwidth_gbps"] is None else f"bw {fitted['bandwidth_gbps']:,.1f} GB/s"
        lines.append(f"{dtype} GEMMs: {min(rates):.3g}-{max(rates):.3g} TFLOP/s over {len(rates)} shapes; "
                     f"fit: eta_max {fitted['eta_max']:.2f} of {doc['summary']['peak_tflops'][dtype]:.3g} TFLOP/s, "
                     f"{bw}, {fitted['overhead_s'] * 1e6:,.1f} µs per call")
    return lines


def main(argv: list[str] | None = None) -> dict:
    import torch

    args = _common.parser(__doc__.splitlines()[0]).parse_args(argv)
    device = placement.plan(1).device
    torch.backends.cuda.matmul.fp32_precision = "ieee"   # fp32 means fp32: no TF32
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16} if device == "cpu" else {"bf16": torch.bfloat16}
    repeats = 3 if device == "cpu" else 10
    peaks, peak_source = amp.device_peak(device) if device == "cuda" else ({}, "")
    rows = []
    for dtype_name, dtype in dtypes.items():
        for kind, m, n, k in shapes(device, args.quick, args.tiny):
            seconds = measure_gemm(m, n, k, dtype, device, repeats)
            rows.append({"kind": kind, "dtype": dtype_name, "m": m, "n": n, "k": k, "seconds": seconds,
                         "tflops": 2 * m * n * k / seconds / 1e12})
    print(_common.table(rows, {"kind": "{}", "dtype": "{}", "m": "{}", "n": "{}", "k": "{}", "seconds": "{:.6f}",
                               "tflops": "{:.4f}"}))
    peak_tflops = {d: peaks.get(d) or max(r["tflops"] for r in rows if r["dtype"] == d) for d in dtypes}
    sources = {d: peak_source if peaks.get(d) else "the best rate measured here (no datasheet peak known)"
               for d in dtypes}
    fits = {}
    for d in dtypes:
        model = gemm_efficiency.fit([(r["m"], r["n"], r["k"], r["tflops"]) for r in rows if r["dtype"] == d],
                                    peak_tflops[d], gemm_efficiency.DTYPE_BYTES[d])
        fits[d] = {"eta_max": model.eta_max, "overhead_s": model.overhead_s,
                   "bandwidth_gbps": None if model.bandwidth_gbps == float("inf") else model.bandwidth_gbps}
    summary = {"device": device, "peak_tflops": peak_tflops, "peak_source": sources, "fit": fits,
               "repeats": repeats, "statistic": "median"}
    path = _common.write("gemm_efficiency", args, rows, summary, describe)
    if device == "cpu":
        today = datetime.datetime.now(datetime.UTC).isoformat()
        print(f"store a CPU run as results/{gemm_efficiency.folder_name(hardware.cpu_model(), today)}/{path.name}")
    return summary


if __name__ == "__main__":
    main()
