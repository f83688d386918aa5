"""benchmarks/*.py: a tiny run of each writes JSON that matches benchmarks/schema.json and carries the
fields the chapters and the README read. (Timings are only checked to be positive numbers.)"""
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from course_utils import reference

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / "benchmarks" / "schema.json").read_text())
ROW_KEYS = {
    "allreduce": {"backend", "ranks", "bytes", "seconds", "algbw_Bps", "busbw_Bps", "copy_Bps"},
    "ddp_scaling": {"mode", "ranks", "global_batch", "step_s", "compute_s", "samples_per_s", "efficiency",
                    "comm_measured_s", "comm_model_s"},
    "amp": {"kind", "dtype"},
    "device": {"kind"},
    "step_profile": {"op", "self_s", "calls", "share"},
    "gpt_mfu": {"variant", "seconds", "tokens", "tokens_per_s", "tflops", "peak_memory_bytes"},
    "notebooks": {"notebook", "profile", "seconds", "peak_bytes"},
}
SUMMARY_KEYS = {
    "allreduce": {"busbw_over_copy", "gloo_busbw_Bps", "copy_Bps", "alpha_s", "beta_s_per_byte"},
    "ddp_scaling": {"weak_efficiency", "strong_efficiency", "weak_comm_measured_s", "weak_comm_model_s"},
    "amp": {"bf16_speedup", "peak_source", "best_fp32_tflops"},
    "device": {"device", "best_fp32_gflops", "copy_Bps"},
    "step_profile": {"device", "step_s", "grad_bytes", "matmul_share", "top_ops"},
    "gpt_mfu": {"params", "flops_per_token", "best_tokens_per_s", "best_mfu", "planner_step_s", "failed"},
    "notebooks": {"notebooks", "failed", "cut_off", "not_run", "total_s", "max_peak_bytes", "over_1_5_GB"},
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
    if name in ("device", "amp", "allreduce", "step_profile", "gpt_mfu"):   # what a chapter quotes reads any run
        assert reference.describe(reference.Reference(tmp_path / f"{name}.json", doc))
    numbers = [v for row in doc["results"] for k, v in row.items() if k.endswith(("_s", "seconds", "_Bps"))]
    assert numbers and all(isinstance(v, float) and v >= 0 for v in numbers)


def test_schema_rejects_a_result_without_meta():
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"benchmark": "amp", "schema": 1, "quick": True, "results": [{}], "summary": {"x": 1}},
                            SCHEMA)


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
