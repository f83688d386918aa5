"""How close to peak a matrix multiply runs, from its sizes: a three-term model of one GEMM's time,
fitted to measured points (``benchmarks/gemm_efficiency.py`` measures them).

A GEMM C = A·B with A of m × k and B of k × n does F = 2·m·n·k FLOPs and moves at least
W = e·(m·k + k·n + m·n) bytes, e bytes per element. Its time is modelled as three costs in a row::

    t(m, n, k) = F_q / (η_max · P) + W / bw + t₀        η(m, n, k) = F / (t · P)

- ``eta_max`` η_max: the fraction of the peak P (``peak_tflops``) a large GEMM reaches — the
  compute-bound ceiling;
- ``bandwidth_gbps`` bw: an effective memory bandwidth; a thin GEMM (one small dimension: few FLOPs
  per byte) is bound by moving its operands, the memory side of the roofline (Williams, Waterman
  and Patterson 2009, "Roofline", CACM 52(4));
- ``overhead_s`` t₀: a fixed cost per call (the kernel's launch, the framework's dispatch), which
  dominates tiny GEMMs;
- F_q: with a ``tile`` (Tm, Tn) and ``units`` (a GPU's SMs), F rounded up to whole output tiles and
  whole waves of tiles over the units — the tile and wave quantisation of NVIDIA's *Matrix
  Multiplication Background User's Guide* (a 129-row GEMM pays for two 128-row tiles); without
  them (a CPU), F.

So η rises with the arithmetic intensity F/W and with the size, and saturates at η_max: one
equation with three numbers, each with a meaning. The model is linear in (1/(η_max·P), 1/bw, t₀),
so :func:`fit` is a least-squares fit of measured times (relative error, non-negative
coefficients). Pure Python: no torch, no NumPy.

:func:`measured` reads the newest stored measurement (``results/<device>-*/gemm_efficiency.json``,
written by the benchmark: which machine, when) and fits it; ``course_utils.planner`` prices each of
a layer's GEMMs with it when given one instead of a constant efficiency.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"
"""The repository's results/ folder: ``cpu-<cpu>-<YYYYMMDD>/`` and ``gpu-<chip>-<YYYYMMDD>/`` runs."""

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


@dataclass(frozen=True)
class GemmEfficiency:
    """t(m, n, k) = F_q/(η_max·P) + W/bw + t₀ (see the module docstring); ``source`` says where the
    numbers come from (a fit of which file, or "synthetic")."""

    peak_tflops: float
    eta_max: float
    bandwidth_gbps: float = math.inf
    overhead_s: float = 0.0
    element_bytes: int = 2
    tile: tuple[int, int] | None = None
    units: int | None = None
    source: str = ""

    def __post_init__(self):
        if not (self.peak_tflops > 0 and 0 < self.eta_max <= 1.5):
            raise ValueError(f"peak_tflops must be > 0 and eta_max a fraction of it (0, 1.5], got "
                             f"{self.peak_tflops!r}, {self.eta_max!r}")
        if self.bandwidth_gbps <= 0 or self.overhead_s < 0:
            raise ValueError(f"bandwidth_gbps must be > 0 (math.inf: no memory term) and overhead_s >= 0, got "
                             f"{self.bandwidth_gbps!r}, {self.overhead_s!r}")
        if (self.tile is None) != (self.units is None):
            raise ValueError("tile and units go together: give both (a GPU's output tile and its SMs) or neither")

    def quantised_flops(self, m: int, n: int, k: int) -> float:
        """F_q: 2·m·n·k, or with ``tile`` and ``units`` the FLOPs of whole waves of whole tiles."""
        if self.tile is None:
            return 2.0 * m * n * k
        tm, tn = self.tile
        tiles = math.ceil(m / tm) * math.ceil(n / tn)
        waves = math.ceil(tiles / self.units)
        return 2.0 * waves * self.units * tm * tn * k

    def seconds(self, m: int, n: int, k: int) -> float:
        """Modelled seconds of one (m × k)·(k × n) GEMM."""
        if min(m, n, k) < 1:
            raise ValueError(f"a GEMM's sizes must be >= 1, got m={m}, n={n}, k={k}")
        moved = self.element_bytes * (m * k + k * n + m * n)
        return (self.quantised_flops(m, n, k) / (self.eta_max * self.peak_tflops * 1e12)
                + moved / (self.bandwidth_gbps * 1e9) + self.overhead_s)

    def __call__(self, m: int, n: int, k: int) -> float:
        """η(m, n, k): the fraction of ``peak_tflops`` this GEMM reaches."""
        return 2.0 * m * n * k / (self.seconds(m, n, k) * self.peak_tflops * 1e12)

    def tflops(self, m: int, n: int, k: int) -> float:
        """Modelled TFLOP/s of this GEMM."""
        return self(m, n, k) * self.peak_tflops


def _solve(rows: list[list[float]], target: list[float], columns: tuple[int, ...]) -> list[float] | None:
    """Least squares of rows[:, columns] · x = target (normal equations, Gaussian elimination), or None
    where the columns are degenerate."""
    size = len(columns)
    a = [[sum(r[i] * r[j] for r in rows) for j in columns] for i in columns]
    b = [sum(r[i] * y for r, y in zip(rows, target)) for i in columns]
    for col in range(size):
        pivot = max(range(col, size), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) < 1e-300:
            return None
        a[col], a[pivot], b[col], b[pivot] = a[pivot], a[col], b[pivot], b[col]
        for r in range(size):
            if r != col:
                f = a[r][col] / a[col][col]
                a[r] = [x - f * y for x, y in zip(a[r], a[col])]
                b[r] -= f * b[col]
    return [b[i] / a[i][i] for i in range(size)]


def fit(points: Iterable[tuple[int, int, int, float]], peak_tflops: float, element_bytes: int = 2,
        tile: tuple[int, int] | None = None, units: int | None = None, source: str = "") -> GemmEfficiency:
    """The :class:`GemmEfficiency` whose times best match measured ``points`` (m, n, k, TFLOP/s): the
    least relative squared error of t(m, n, k), with every coefficient >= 0 (each subset of the three
    terms is fitted and the best non-negative one kept; the compute term is always in). ``peak_tflops``
    is the peak η is a fraction of (a datasheet's, or the best rate measured); ``element_bytes``,
    ``tile`` and ``units`` as in :class:`GemmEfficiency`.

    ValueError with fewer than 3 points or a non-positive rate."""
    points = list(points)
    if len(points) < 3:
        raise ValueError(f"fit needs at least 3 measured (m, n, k, tflops) points, got {len(points)}")
    if any(p[3] <= 0 for p in points):
        raise ValueError("every measured rate must be > 0 TFLOP/s")
    shape = GemmEfficiency(peak_tflops, 1.0, element_bytes=element_bytes, tile=tile, units=units)
    rows, target = [], []
    for m, n, k, tflops in points:
        measured_s = 2.0 * m * n * k / (tflops * 1e12)
        features = (shape.quantised_flops(m, n, k), element_bytes * (m * k + k * n + m * n), 1.0)
        rows.append([x / measured_s for x in features])      # relative error: each point weighs the same
        target.append(1.0)
    best = None
    for extra in ((), (1,), (2,), (1, 2)):
        columns = (0, *extra)
        x = _solve(rows, target, columns)
        if x is None or min(x) < 0 or x[0] <= 0:
            continue
        coef = dict(zip(columns, x))
        error = sum((sum(r[c] * coef[c] for c in columns) - 1.0) ** 2 for r in rows)
        if best is None or error < best[0]:
            best = (error, coef)
    if best is None:
        raise ValueError("no non-negative fit: the points do not look like GEMM timings (time growing with size)")
    coef = best[1]
    return GemmEfficiency(peak_tflops=peak_tflops, eta_max=min(1.5, 1.0 / (coef[0] * peak_tflops * 1e12)),
                          bandwidth_gbps=1.0 / (coef[1] * 1e9) if coef.get(1) else math.inf,
                          overhead_s=coef.get(2, 0.0), element_bytes=element_bytes, tile=tile, units=units,
                          source=source)


def load(path: Path | str, dtype: str = "bf16", tile: tuple[int, int] | None = None,
         units: int | None = None) -> GemmEfficiency:
    """Fit the points of ``dtype`` ("bf16", "fp32") in one ``benchmarks/gemm_efficiency.py`` result
    file, against the peak the file names for that dtype (``summary["peak_tflops"]``)."""
    path = Path(path)
    doc = json.loads(path.read_text())
    if doc.get("benchmark") != "gemm_efficiency":
        raise ValueError(f"{path} is a {doc.get('benchmark')!r} result, not benchmarks/gemm_efficiency.py's")
    points = [(r["m"], r["n"], r["k"], r["tflops"]) for r in doc["results"] if r["dtype"] == dtype]
    peaks = doc["summary"]["peak_tflops"]
    if dtype not in peaks or not points:
        raise ValueError(f"{path} has no {dtype} measurements (it has {sorted(peaks)})")
    meta = doc["meta"]
    where = meta["gpus"][0] if meta.get("gpus") else meta["cpu"]
    return fit(points, peaks[dtype], DTYPE_BYTES[dtype], tile, units,
               source=f"fit of {len(points)} {dtype} GEMMs measured on {where}, {meta['date'][:10]} ({path.name})")


def measured(device: str = "cpu", dtype: str = "bf16", root: Path | None = None) -> GemmEfficiency | None:
    """:func:`load` of the newest stored run on ``device`` ("cpu": ``results/cpu-*/``, "cuda":
    ``results/gpu-*/``), or None where none is stored (no GPU curve is ever made up)."""
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    pattern = f"{'cpu' if device == 'cpu' else 'gpu'}-*/gemm_efficiency.json"
    found = [(json.loads(p.read_text())["meta"]["date"], p) for p in sorted((root or RESULTS).glob(pattern))]
    return load(max(found)[1], dtype) if found else None


def folder_name(cpu: str, date: str) -> str:
    """Where a CPU run is stored: ``cpu-<model>-<YYYYMMDD>``, the model's name lower-cased, words joined by -."""
    spaced = "".join(c if c.isalnum() else " " for c in cpu.lower())
    words = [w for w in spaced.split() if w not in ("cpu", "processor")]
    return f"cpu-{'-'.join(words) or 'unknown'}-{date[:10].replace('-', '')}"

