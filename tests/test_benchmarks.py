"""benchmarks/*.py: a tiny run of each writes JSON that matches benchmarks/schema.json and carries the
fields the chapters and the README read. (Timings are only checked to be positive numbers.)"""
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from course_utils import gpu_reference

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / "benchmarks" / "schema.json").read_text())
sys.path.insert(0, str(ROOT / "benchmarks"))  # the scripts import their siblings (_common, amp) as top-level modules
ROW_KEYS = {
    "allreduce": {"backend", "ranks", "bytes", "seconds", "algbw_Bps", "busbw_Bps", "copy_Bps"},
    "ddp_scaling": {"mode", "ranks", "global_batch", "step_s", "compute_s", "samples_per_s", "efficiency",
                    "comm_measured_s", "comm_model_s"},
    "amp": {"kind", "dtype"},
    "device": {"kind"},
    "step_profile": {"op", "self_s", "calls", "share"},
    "gpt_mfu": {"variant", "seconds", "tokens", "tokens_per_s", "tflops", "peak_memory_bytes"},
    "notebooks": {"notebook", "profile", "seconds", "peak_bytes"},
    "gemm_efficiency": {"kind", "dtype", "m", "n", "k", "seconds", "tflops"},
}
SUMMARY_KEYS = {
    "allreduce": {"busbw_over_copy", "gloo_busbw_Bps", "copy_Bps", "alpha_s", "beta_s_per_byte"},
    "ddp_scaling": {"weak_efficiency", "strong_efficiency", "weak_comm_measured_s", "weak_comm_model_s"},
    "amp": {"bf16_speedup", "peak_source", "best_fp32_tflops"},
    "device": {"device", "best_fp32_gflops", "copy_Bps"},
    "step_profile": {"device", "step_s", "grad_bytes", "matmul_share", "top_ops"},
    "gpt_mfu": {"params", "flops_per_token", "best_tokens_per_s", "best_mfu", "planner_step_s", "failed"},
    "notebooks": {"notebooks", "failed", "cut_off", "not_run", "total_s", "max_peak_bytes", "over_1_5_GB"},
    "gemm_efficiency": {"device", "peak_tflops", "peak_source", "fit", "repeats", "statistic"},
}


@pytest.mark.parametrize("name", sorted(ROW_KEYS))
def test_tiny_run_writes_valid_json(name, tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), "--tiny", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    doc = json.loads((tmp_path / f"{name}.json").read_text())
    jsonschema.validate(doc, SCHEMA)
    assert doc["benchmark"] == name and doc["quick"] is True
    assert all(ROW_KEYS[name] <= row.keys() for row in doc["results"])
    assert SUMMARY_KEYS[name] <= doc["summary"].keys()
    quoted = doc["summary"].pop("quoted")   # the script's own description of the file it wrote, as reference prints it
    assert quoted == importlib.import_module(name).describe(doc)
    doc["summary"]["quoted"] = quoted
    assert gpu_reference.describe(gpu_reference.Reference(tmp_path / f"{name}.json", doc)) == "\n".join(quoted)
    numbers = [v for row in doc["results"] for k, v in row.items() if k.endswith(("_s", "seconds", "_Bps"))]
    assert numbers and all(isinstance(v, float) and v >= 0 for v in numbers)


def test_schema_rejects_a_result_without_meta():
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"benchmark": "amp", "schema": 2, "quick": True, "results": [{}], "summary": {"x": 1}},
                            SCHEMA)


def test_schema_rejects_a_summary_that_quotes_nothing():
    doc = {"benchmark": "amp", "schema": 2, "quick": True, "results": [{}], "summary": {"x": 1},
           "meta": {"date": "2026-12-05T10:00:00+00:00", "host": "h", "python": "3.11", "torch": "2.13",
                    "device": "cpu", "gpus": [], "cpu": "x", "cpu_cores": 2}}
    for summary in ({"x": 1}, {"x": 1, "quoted": []}, {"x": 1, "quoted": [""]}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**doc, "summary": summary}, SCHEMA)
    jsonschema.validate({**doc, "summary": {"x": 1, "quoted": ["x: 1"]}}, SCHEMA)


def described(name: str, results: list[dict], summary: dict, gpus: int = 1) -> str:
    """What benchmarks/<name>.py's describe() says of a file with these results and summary."""
    doc = {"benchmark": name, "meta": {"gpus": ["NVIDIA H200"] * gpus}, "results": results, "summary": summary}
    lines = importlib.import_module(name).describe(doc)
    assert lines and all(isinstance(line, str) and line for line in lines)
    return "\n".join(lines)


def test_device_quotes_matmul_rates_and_copy_bandwidths():
    text = described("device", [{"kind": "matmul", "n": 8192, "dtype": "fp32", "seconds": 0.02, "gflops": 55000.0},
                                {"kind": "copy", "direction": "device", "bytes": 2**28, "Bps": 3.9e12},
                                {"kind": "copy", "direction": "host_to_device", "bytes": 2**28, "Bps": 5.5e10}],
                     {"device": "cuda"})
    assert text == ("fp32 matmul (TF32 off), GFLOP/s by n: 8192: 55,000\n"
                    "copy bandwidth, GB/s: on the device 3,900.0 · host→device 55.0")


def test_amp_quotes_speedups_and_the_fraction_of_peak():
    steps = [{"kind": "step", "model": m, "dtype": d, "seconds": s}
             for m, d, s in [("mlp", "fp32", 0.03), ("mlp", "bf16", 0.01), ("mlp", "fp16", 0.012)]]
    mm = [{"kind": "matmul", "n": n, "dtype": "bf16", "tflops": t, "peak_tflops": 989.4, "fraction_of_peak": t / 989.4}
          for n, t in [(4096, 600.0), (8192, 700.0)]]
    text = described("amp", steps + mm, {"peak_source": "datasheet"})
    assert "bf16 speed-up over fp32: mlp 3.00x" in text and "fp16 speed-up over fp32: mlp 2.50x" in text
    assert "bf16 700.0 of 989.4 peak (71%)" in text and "peak: datasheet" in text


def test_allreduce_says_what_one_gpu_could_not_measure():
    row = {"backend": "gloo", "device": "cpu", "ranks": 2, "seconds": 0.1, "algbw_Bps": 1e9, "busbw_Bps": 1e9,
           "copy_Bps": 2e10}
    rows = [{**row, "bytes": 4096}, {**row, "bytes": 2**28}]
    text = described("allreduce", rows, {})
    assert "gloo, 2 ranks on cpu: busbw 1.00 GB/s at 256 MiB" in text
    assert "nccl: not measured (1 GPU" in text
    nccl = [{**row, "backend": "nccl", "device": "cuda", "ranks": 8, "bytes": 2**28, "busbw_Bps": 3.5e11}]
    text = described("allreduce", rows + nccl, {}, gpus=8)
    assert "nccl, 8 ranks on cuda: busbw 350.00 GB/s" in text and "not measured" not in text


def test_step_profile_names_where_the_time_goes():
    rows = [{"op": "aten::mm", "self_s": 0.004, "calls": 4.0, "share": 0.6},
            {"op": "aten::addmm", "self_s": 0.001, "calls": 3.0, "share": 0.15}]
    summary = {"device": "cuda", "sizes": [1024, 8192, 1000], "batch": 4096, "step_s": 0.0123, "params": 1000,
               "grad_bytes": 2**22, "matmul_share": 0.75, "top_ops": ["aten::mm", "aten::addmm"]}
    text = described("step_profile", rows, summary)
    assert "step 12.30 ms" in text and "4.0 MiB of fp32 gradients" in text
    assert "aten::mm 60%" in text and "matrix products: 75%" in text


def test_gpt_mfu_quotes_each_variant_and_the_planner():
    summary = {"params": 1.3e9, "tokens_per_step": 8192, "flops_per_token": 8.1e9, "best_tokens_per_s": 40960.0,
               "planner_step_s": 0.15, "planner_efficiency": 0.4, "planner_memory_bytes": 30e9}
    rows = [{"variant": "eager", "tokens_per_s": 40960.0, "tflops": 330.0, "mfu": 0.33, "peak_memory_bytes": 40e9},
            {"variant": "compiled", "error": "OutOfMemoryError: CUDA out of memory"}]
    text = described("gpt_mfu", rows, summary)
    assert "GPT of 1.30B parameters, 8,192 tokens per step" in text
    assert "eager: 40,960 tokens/s, 330.0 TFLOP/s, MFU 33%, 40.0 GB peak" in text
    assert "compiled: failed (OutOfMemoryError" in text
    assert "step 150.0 ms (measured best: 200.0 ms), 30.0 GB" in text


def test_gemm_efficiency_quotes_the_rates_and_the_fit():
    rows = [{"kind": "square", "dtype": "bf16", "m": n, "n": n, "k": n, "seconds": 1.0, "tflops": t}
            for n, t in ((512, 300.0), (8192, 700.0))]
    summary = {"peak_tflops": {"bf16": 989.4},
               "fit": {"bf16": {"eta_max": 0.75, "bandwidth_gbps": 2500.0, "overhead_s": 5e-6}}}
    assert described("gemm_efficiency", rows, summary) == (
        "bf16 GEMMs: 300-700 TFLOP/s over 2 shapes; fit: eta_max 0.75 of 989 TFLOP/s, bw 2,500.0 GB/s, "
        "5.0 µs per call")


def test_quick_is_the_documented_flag():
    for name in ROW_KEYS:
        out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), "--help"],
                             capture_output=True, text=True, timeout=60).stdout
        assert "--quick" in out and "--out" in out


def test_a_chapter_that_does_not_exist_is_named_in_the_error(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "notebooks.py"), "--chapters", "99",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no chapter numbered 99" in proc.stderr


def test_a_sigterm_cuts_the_chapter_in_progress_off_without_calling_it_failed(tmp_path):
    """gpu_reference.sh runs each step under `timeout LIMIT`, which sends SIGTERM at the deadline. The
    kernel runs in a session of its own (as Jupyter starts kernels), so the signal reaches only the
    script: it kills the kernel, records the chapter in progress as cut off and the rest as not run.

    The SIGTERM goes to the script's process group as `timeout` sends it, 2 s after the first chapter
    has started (chapter 01 runs for ~20 s): never before, as on a loaded machine the script's imports
    alone can take many seconds."""
    import signal
    import threading
    import time

    env = {**os.environ, "COURSE_PROFILE": "cpu"}
    proc = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "notebooks.py"), "--chapters", "01,02,03",
                             "--out", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, start_new_session=True)
    watchdog = threading.Timer(300, os.killpg, (proc.pid, signal.SIGKILL))   # a hang fails, never blocks
    watchdog.start()
    try:
        output = []
        for line in proc.stdout:
            output.append(line)
            if line.endswith(": running\n"):
                break
        time.sleep(2)
        os.killpg(proc.pid, signal.SIGTERM)
        output += proc.stdout.readlines()
        proc.wait(timeout=120)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    said = f"exit status {proc.returncode}; its output:\n" + "".join(output)[-3000:]
    assert proc.returncode == 0 and (tmp_path / "notebooks.json").exists(), said
    summary = json.loads((tmp_path / "notebooks.json").read_text())["summary"]
    assert summary["cut_off"] == ["01_why_parallel.ipynb"] and summary["failed"] == [], said
    assert summary["not_run"] == ["02_data_parallel_from_scratch.ipynb", "03_pytorch_ddp.ipynb"], said
    assert summary["notebooks"] == 1 and "cut off: the run's time budget ended" in said, said
