"""course_utils.gpu_reference: committed GPU numbers are read and labelled, never made up."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from course_utils import gpu_reference


def write_run(root: Path, folder: str, benchmark: str, *, date: str, device: str = "cuda",
              gpus: list[str] | None = None, summary: dict | None = None) -> Path:
    path = root / folder / f"{benchmark}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"date": date, "device": device, "gpus": ["NVIDIA H200"] if gpus is None else gpus,
            "torch": "2.13.0", "host": "gpu-host", "python": "3.12.3", "cpu": "x", "cpu_cores": 16}
    path.write_text(json.dumps({"benchmark": benchmark, "schema": 2, "quick": False, "meta": meta,
                                "results": [{"kind": "matmul"}],
                                "summary": summary or {"x": 1.0, "quoted": ["x: 1.0"]}}))
    return path


def test_nothing_committed_is_none_and_says_so(tmp_path):
    assert gpu_reference.latest("amp", root=tmp_path) is None
    text = gpu_reference.missing("amp")
    assert "no GPU reference yet" in text and "amp.json" in text and "gpu_reference.sh" in text


def test_the_newest_run_wins_by_its_recorded_date(tmp_path):
    write_run(tmp_path, "gpu-h200-20261205", "amp", date="2026-12-05T10:00:00+00:00", summary={"bf16_speedup": 2.0})
    write_run(tmp_path, "gpu-h100-20270101", "amp", date="2027-01-01T09:00:00+00:00", summary={"bf16_speedup": 3.0},
              gpus=["NVIDIA H100 80GB HBM3"])
    ref = gpu_reference.latest("amp", root=tmp_path)
    assert ref.summary == {"bf16_speedup": 3.0}
    assert ref.date == "2027-01-01" and ref.device == "NVIDIA H100 80GB HBM3"
    assert ref.label == ("measured on NVIDIA H100 80GB HBM3, 2027-01-01, torch 2.13.0 "
                         "(results/gpu-h100-20270101/amp.json)")
    assert gpu_reference.latest("device", root=tmp_path) is None   # other benchmarks are not confused with it


def test_several_gpus_are_counted_in_the_label(tmp_path):
    write_run(tmp_path, "gpu-h200x8-20261205", "allreduce", date="2026-12-05T10:00:00+00:00",
              gpus=["NVIDIA H200"] * 8)
    assert gpu_reference.latest("allreduce", root=tmp_path).device == "NVIDIA H200 (x8)"


@pytest.mark.parametrize("device,gpus", [("cpu", []), ("cuda", [])])
def test_a_cpu_run_filed_as_gpu_reference_is_an_error(tmp_path, device, gpus):
    write_run(tmp_path, "gpu-h200-20261205", "amp", date="2026-12-05T10:00:00+00:00", device=device, gpus=gpus)
    with pytest.raises(ValueError, match="not a GPU"):
        gpu_reference.latest("amp", root=tmp_path)


@pytest.mark.parametrize("gpus,name", [
    (["NVIDIA H200"], "gpu-h200-20261206"),
    (["NVIDIA H100 80GB HBM3"], "gpu-h100-20261206"),
    (["NVIDIA A100-SXM4-80GB"] * 8, "gpu-a100x8-20261206"),
    (["Tesla T4"], "gpu-t4-20261206"),
    (["NVIDIA GeForce RTX 4090"], "gpu-geforce-rtx-4090-20261206"),
    ([], "rehearsal-cpu-20261206"),
])
def test_a_run_is_filed_under_its_chip_and_day(gpus, name):
    assert gpu_reference.folder_name(gpus, "2026-12-06T20:15:00+00:00") == name


def test_the_repository_holds_only_real_gpu_runs():
    """Whatever results/gpu-*/ holds was measured on a GPU (reading it raises otherwise)."""
    for path in gpu_reference.RESULTS.glob("gpu-*/*.json"):
        assert gpu_reference.latest(path.stem) is not None


def test_show_prints_the_label_and_the_lines_the_benchmark_quoted(tmp_path, capsys):
    """reference knows no benchmark's keys: it prints the lines the benchmark wrote, whatever the results say."""
    quoted = ["fp32 matmul (TF32 off), GFLOP/s by n: 8192: 55,000", "copy bandwidth, GB/s: on the device 3,900.0"]
    write_run(tmp_path, "gpu-h200-20261205", "device", date="2026-12-05T10:00:00+00:00",
              summary={"device": "cuda", "quoted": quoted})
    ref = gpu_reference.show("device", root=tmp_path)
    out = capsys.readouterr().out
    assert ref is not None
    assert out == ("measured on NVIDIA H200, 2026-12-05, torch 2.13.0 (results/gpu-h200-20261205/device.json)\n"
                   + "\n".join(quoted) + "\n")
    assert gpu_reference.describe(ref) == "\n".join(quoted)
    assert gpu_reference.show("amp", root=tmp_path) is None
    assert capsys.readouterr().out.startswith("no GPU reference yet")


def test_a_run_that_quotes_nothing_says_to_measure_again(tmp_path):
    """A schema-1 file (before the benchmarks described their own runs) is named, with what to do."""
    write_run(tmp_path, "gpu-h200-20261205", "amp", date="2026-12-05T10:00:00+00:00", summary={"bf16_speedup": 2.0})
    with pytest.raises(ValueError, match=r"amp.json has no summary\['quoted'\].*gpu_reference.sh again"):
        gpu_reference.show("amp", root=tmp_path)
