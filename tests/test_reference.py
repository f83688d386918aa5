"""course_utils.reference: committed GPU numbers are read and labelled, never made up."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from course_utils import reference


def write_run(root: Path, folder: str, benchmark: str, *, date: str, device: str = "cuda",
              gpus: list[str] | None = None, summary: dict | None = None) -> Path:
    path = root / folder / f"{benchmark}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"date": date, "device": device, "gpus": ["NVIDIA H200"] if gpus is None else gpus,
            "torch": "2.13.0", "host": "gpu-host", "python": "3.12.3", "cpu": "x", "cpu_cores": 16}
    path.write_text(json.dumps({"benchmark": benchmark, "schema": 1, "quick": False, "meta": meta,
                                "results": [{"kind": "matmul"}], "summary": summary or {"x": 1.0}}))
    return path


def test_nothing_committed_is_none_and_says_so(tmp_path):
    assert reference.latest("amp", root=tmp_path) is None
    text = reference.missing("amp")
    assert "no GPU reference yet" in text and "amp.json" in text and "gpu_reference.sh" in text


def test_the_newest_run_wins_by_its_recorded_date(tmp_path):
    write_run(tmp_path, "gpu-h200-20261205", "amp", date="2026-12-05T10:00:00+00:00", summary={"bf16_speedup": 2.0})
    write_run(tmp_path, "gpu-h100-20270101", "amp", date="2027-01-01T09:00:00+00:00", summary={"bf16_speedup": 3.0},
              gpus=["NVIDIA H100 80GB HBM3"])
    ref = reference.latest("amp", root=tmp_path)
    assert ref.summary == {"bf16_speedup": 3.0}
    assert ref.date == "2027-01-01" and ref.device == "NVIDIA H100 80GB HBM3"
    assert ref.label == ("measured on NVIDIA H100 80GB HBM3, 2027-01-01, torch 2.13.0 "
                         "(results/gpu-h100-20270101/amp.json)")
    assert reference.latest("device", root=tmp_path) is None   # other benchmarks are not confused with it


def test_several_gpus_are_counted_in_the_label(tmp_path):
    write_run(tmp_path, "gpu-h200x8-20261205", "allreduce", date="2026-12-05T10:00:00+00:00",
              gpus=["NVIDIA H200"] * 8)
    assert reference.latest("allreduce", root=tmp_path).device == "NVIDIA H200 (x8)"


@pytest.mark.parametrize("device,gpus", [("cpu", []), ("cuda", [])])
def test_a_cpu_run_filed_as_gpu_reference_is_an_error(tmp_path, device, gpus):
    write_run(tmp_path, "gpu-h200-20261205", "amp", date="2026-12-05T10:00:00+00:00", device=device, gpus=gpus)
    with pytest.raises(ValueError, match="not a GPU"):
        reference.latest("amp", root=tmp_path)


@pytest.mark.parametrize("gpus,name", [
    (["NVIDIA H200"], "gpu-h200-20261206"),
    (["NVIDIA H100 80GB HBM3"], "gpu-h100-20261206"),
    (["NVIDIA A100-SXM4-80GB"] * 8, "gpu-a100x8-20261206"),
    (["Tesla T4"], "gpu-t4-20261206"),
    (["NVIDIA GeForce RTX 4090"], "gpu-geforce-rtx-4090-20261206"),
    ([], "rehearsal-cpu-20261206"),
])
def test_a_run_is_filed_under_its_chip_and_day(gpus, name):
    assert reference.folder_name(gpus, "2026-12-06T20:15:00+00:00") == name


def test_the_repository_holds_only_real_gpu_runs():
    """Whatever results/gpu-*/ holds was measured on a GPU (reading it raises otherwise)."""
    for path in reference.RESULTS.glob("gpu-*/*.json"):
        assert reference.latest(path.stem) is not None


def gpu_run(tmp_path, benchmark: str, results: list[dict], summary: dict, gpus: int = 1) -> reference.Reference:
    path = write_run(tmp_path, "gpu-h200-20261205", benchmark, date="2026-12-05T10:00:00+00:00",
                     gpus=["NVIDIA H200"] * gpus, summary=summary)
    doc = json.loads(path.read_text())
    doc["results"] = results
    path.write_text(json.dumps(doc))
    return reference.latest(benchmark, root=tmp_path)


def test_show_prints_the_label_and_what_was_measured(tmp_path, capsys):
    gpu_run(tmp_path, "device", [{"kind": "matmul", "n": 8192, "dtype": "fp32", "seconds": 0.02, "gflops": 55000.0},
                                 {"kind": "copy", "direction": "device", "bytes": 2**28, "Bps": 3.9e12},
                                 {"kind": "copy", "direction": "host_to_device", "bytes": 2**28, "Bps": 5.5e10}],
            {"device": "cuda"})
    ref = reference.show("device", root=tmp_path)
    out = capsys.readouterr().out
    assert ref is not None and out.startswith("measured on NVIDIA H200, 2026-12-05")
    assert "8192: 55,000" in out and "on the device 3,900.0" in out and "host→device 55.0" in out
    assert reference.show("amp", root=tmp_path) is None
    assert capsys.readouterr().out.startswith("no GPU reference yet")


def test_amp_gives_speedups_and_the_fraction_of_peak(tmp_path):
    steps = [{"kind": "step", "model": m, "dtype": d, "seconds": s}
             for m, d, s in [("mlp", "fp32", 0.03), ("mlp", "bf16", 0.01), ("mlp", "fp16", 0.012)]]
    mm = [{"kind": "matmul", "n": n, "dtype": "bf16", "tflops": t, "peak_tflops": 989.4, "fraction_of_peak": t / 989.4}
          for n, t in [(4096, 600.0), (8192, 700.0)]]
    text = reference.describe(gpu_run(tmp_path, "amp", steps + mm, {"peak_source": "datasheet"}))
    assert "bf16 speed-up over fp32: mlp 3.00x" in text and "fp16 speed-up over fp32: mlp 2.50x" in text
    assert "bf16 700.0 of 989.4 peak (71%)" in text and "peak: datasheet" in text


def test_allreduce_says_what_one_gpu_could_not_measure(tmp_path):
    row = {"backend": "gloo", "device": "cpu", "ranks": 2, "seconds": 0.1, "algbw_Bps": 1e9, "busbw_Bps": 1e9,
           "copy_Bps": 2e10}
    rows = [{**row, "bytes": 4096}, {**row, "bytes": 2**28}]
    text = reference.describe(gpu_run(tmp_path, "allreduce", rows, {}))
    assert "gloo, 2 ranks on cpu: busbw 1.00 GB/s at 256 MiB" in text
    assert "nccl: not measured (1 GPU" in text
    nccl = [{**row, "backend": "nccl", "device": "cuda", "ranks": 8, "bytes": 2**28, "busbw_Bps": 3.5e11}]
    text = reference.describe(gpu_run(tmp_path, "allreduce", rows + nccl, {}, gpus=8))
    assert "nccl, 8 ranks on cuda: busbw 350.00 GB/s" in text and "not measured" not in text


def test_step_profile_names_where_the_time_goes(tmp_path):
    rows = [{"op": "aten::mm", "self_s": 0.004, "calls": 4.0, "share": 0.6},
            {"op": "aten::addmm", "self_s": 0.001, "calls": 3.0, "share": 0.15}]
    summary = {"device": "cuda", "sizes": [1024, 8192, 1000], "batch": 4096, "step_s": 0.0123, "params": 1000,
               "grad_bytes": 2**22, "matmul_share": 0.75, "top_ops": ["aten::mm", "aten::addmm"]}
    text = reference.describe(gpu_run(tmp_path, "step_profile", rows, summary))
    assert "step 12.30 ms" in text and "4.0 MiB of fp32 gradients" in text
    assert "aten::mm 60%" in text and "matrix products: 75%" in text
