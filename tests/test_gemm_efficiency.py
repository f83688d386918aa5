"""course_utils.gemm_efficiency: the three-term GEMM model by hand, its fit on synthetic points, and the
stored measurement read back. (Timings are never asserted: the fit is checked on points a known model
generated; the stored file only for its format.)"""
import json
import math
from pathlib import Path

import jsonschema
import pytest

from course_utils import gemm_efficiency
from course_utils.gemm_efficiency import GemmEfficiency

ROOT = Path(__file__).resolve().parents[1]
KNOWN = GemmEfficiency(peak_tflops=100.0, eta_max=0.8, bandwidth_gbps=1000.0, overhead_s=1e-5, element_bytes=2)
SIZES = [(64, 64, 64), (256, 256, 256), (1024, 1024, 1024), (4096, 4096, 4096), (8192, 1024, 4096),
         (8192, 4096, 1024), (128, 8192, 8192), (2048, 512, 2048)]


def test_the_model_by_hand():
    """t = F/(η_max·P) + W/bw + t₀ for a 1024³ bf16 GEMM: 2·1024³ FLOPs, 3·1024² elements of 2 bytes."""
    flops, moved = 2 * 1024**3, 2 * 3 * 1024**2
    seconds = flops / (0.8 * 100e12) + moved / 1000e9 + 1e-5
    assert KNOWN.seconds(1024, 1024, 1024) == pytest.approx(seconds)
    assert KNOWN(1024, 1024, 1024) == pytest.approx(flops / (seconds * 100e12))
    assert KNOWN.tflops(1024, 1024, 1024) == pytest.approx(flops / seconds / 1e12)


def test_efficiency_rises_with_size_and_saturates_at_eta_max():
    etas = [KNOWN(n, n, n) for n in (32, 128, 512, 2048, 8192, 32768)]
    assert etas == sorted(etas) and etas[0] < 0.01 and 0.79 < etas[-1] < 0.8
    assert KNOWN(8192, 8192, 16) < 0.2 < 0.7 < KNOWN(8192, 8192, 8192)     # a thin GEMM is bound by its bytes


def test_tile_and_wave_quantisation():
    """Tiles of 128 × 128 on 4 units: 129 × 129 is 4 tiles in 1 wave (the work of 256 × 256); 257 × 257 is
    9 tiles, 3 waves of 4: the work of 12 tiles."""
    tiled = GemmEfficiency(peak_tflops=100.0, eta_max=1.0, tile=(128, 128), units=4)
    assert tiled.quantised_flops(129, 129, 64) == 2 * 256 * 256 * 64
    assert tiled.quantised_flops(257, 257, 64) == 2 * 12 * 128 * 128 * 64
    assert tiled(256, 256, 64) == pytest.approx(1.0) and tiled(129, 129, 64) == pytest.approx(129**2 / 256**2)
    with pytest.raises(ValueError, match="tile and units go together"):
        GemmEfficiency(peak_tflops=1.0, eta_max=1.0, tile=(128, 128))


def test_fit_recovers_the_model_that_made_the_points():
    points = [(m, n, k, KNOWN.tflops(m, n, k)) for m, n, k in SIZES]
    got = gemm_efficiency.fit(points, peak_tflops=100.0, element_bytes=2)
    assert got.eta_max == pytest.approx(0.8, rel=1e-6)
    assert got.bandwidth_gbps == pytest.approx(1000.0, rel=1e-6)
    assert got.overhead_s == pytest.approx(1e-5, rel=1e-6)


def test_fit_drops_a_term_the_points_do_not_need():
    """Points from a pure compute ceiling and a fixed cost: no memory term (bw = inf), never a negative one."""
    source = GemmEfficiency(peak_tflops=10.0, eta_max=0.5, overhead_s=2e-6, element_bytes=4)
    got = gemm_efficiency.fit([(m, n, k, source.tflops(m, n, k)) for m, n, k in SIZES], 10.0, 4)
    assert got.bandwidth_gbps == math.inf
    assert got.eta_max == pytest.approx(0.5) and got.overhead_s == pytest.approx(2e-6)


def test_fit_says_what_it_needs():
    with pytest.raises(ValueError, match="at least 3"):
        gemm_efficiency.fit([(64, 64, 64, 1.0)], 10.0)
    with pytest.raises(ValueError, match="> 0"):
        gemm_efficiency.fit([(64, 64, 64, 1.0), (128, 128, 128, 0.0), (256, 256, 256, 1.0)], 10.0)


def synthetic_file(folder: Path, device: str = "cpu") -> Path:
    """A result file in the benchmark's format, from :data:`KNOWN`'s times (no machine measured)."""
    folder.mkdir(parents=True)
    rows = [{"kind": "square", "dtype": "bf16", "m": m, "n": n, "k": k, "seconds": KNOWN.seconds(m, n, k),
             "tflops": KNOWN.tflops(m, n, k)} for m, n, k in SIZES]
    doc = {"benchmark": "gemm_efficiency", "schema": 2, "quick": False,
           "meta": {"date": "2026-01-01T00:00:00+00:00", "host": "h", "python": "3.11", "torch": "2.13",
                    "device": device, "gpus": ["NVIDIA H100 80GB HBM3"] if device == "cuda" else [], "cpu": "Test CPU",
                    "cpu_cores": 2},
           "results": rows, "summary": {"peak_tflops": {"bf16": 100.0}, "quoted": ["synthetic"]}}
    path = folder / "gemm_efficiency.json"
    path.write_text(json.dumps(doc))
    return path


def test_measured_reads_the_newest_stored_run_of_a_device(tmp_path):
    synthetic_file(tmp_path / "cpu-test-cpu-20260101")
    got = gemm_efficiency.measured("cpu", "bf16", root=tmp_path)
    assert got.eta_max == pytest.approx(0.8) and "Test CPU, 2026-01-01" in got.source
    assert gemm_efficiency.measured("cuda", "bf16", root=tmp_path) is None      # no GPU run: none made up
    with pytest.raises(ValueError, match="no fp32 measurements"):
        gemm_efficiency.load(tmp_path / "cpu-test-cpu-20260101" / "gemm_efficiency.json", "fp32")


def test_the_stored_cpu_curve_is_a_measurement_in_the_benchmarks_format():
    """results/cpu-*/gemm_efficiency.json: written by benchmarks/gemm_efficiency.py on a CPU (schema, meta),
    fp32 and bf16 points over 64-2048 and the layer shapes, each fitted by the model."""
    stored = sorted((ROOT / "results").glob("cpu-*/gemm_efficiency.json"))
    assert stored, "no CPU curve stored: run benchmarks/gemm_efficiency.py and store it as its output says"
    schema = json.loads((ROOT / "benchmarks" / "schema.json").read_text())
    for path in stored:
        doc = json.loads(path.read_text())
        jsonschema.validate(doc, schema)
        assert doc["meta"]["device"] == "cpu" and doc["meta"]["cpu"] and doc["summary"]["statistic"] == "median"
        assert path.parent.name == gemm_efficiency.folder_name(doc["meta"]["cpu"], doc["meta"]["date"])
        squares = {r["m"] for r in doc["results"] if r["kind"] == "square"}
        assert {64, 2048} <= squares and any(r["kind"] == "layer" for r in doc["results"])
        for dtype in ("fp32", "bf16"):
            assert gemm_efficiency.load(path, dtype).eta_max > 0


def test_folder_name():
    assert gemm_efficiency.folder_name("AMD EPYC 7B13 64-Core Processor", "2026-12-07T23:00:00") == \
        "cpu-amd-epyc-7b13-64-core-20261207"


def test_importing_it_needs_no_torch():
    import subprocess
    import sys

    code = "import sys; from course_utils import gemm_efficiency; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
