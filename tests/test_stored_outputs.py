"""Stored outputs that strict nbval compares must hold on every machine.

A compared output (a code cell not tagged ``nbval-ignore-output``) may not contain
- a framework's log line (they depend on the CPU: TensorFlow's oneDNN notice appears only where
  oneDNN is its default), see course_utils.quiet;
- a hardware fact (CPU model, core count, memory size, instruction sets, bf16 support, GPU names):
  those belong in ignore-output cells next to an assert on what the chapter relies on;
- a float printed at float-noise precision (below 1e-5, in scientific notation) instead of the bound
  it was checked against (course_utils.stable).
"""
import re
from pathlib import Path

import nbformat
import pytest

from course_utils import hardware, quiet

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

HARDWARE = re.compile(
    r"\b(AMD|Intel|EPYC|Xeon|Ryzen|Apple M\d|Graviton|Neoverse|NVIDIA|GeForce|Tesla|[AHB]100|H200|GH200)\b"
    r"|\b(AVX\w*|avx\w*|AMX\w*|amx_\w+|SSE4\w*|NEON)\b"
    r"|native bf(loat)?16|CPU bf16|CPU cores|cpu_capability|GiB of memory|\bmemory +\d+(\.\d+)? GiB"
)
FRAMEWORK_LOG = re.compile(r"oneDNN custom operations|cpu_feature_guard|This TensorFlow binary is optimized"
                           r"|absl::InitializeLog|TF-TRT Warning|Unable to register cu(DNN|FFT|BLAS) factory")
# a float below 1e-5 in scientific notation, in an output that compares runs (a difference, "vs"),
# not the bound it was checked against (≤ 1e-6, ± 1e-4, < 1e-5, a range 1e-7–1e-4)
NOISE = re.compile(r"(?<![≤±<] )(?<![≤±<])\b\d(\.\d+)?e-(0?[5-9]|[1-9]\d)\b(?!–)")
COMPARISON = re.compile(r"Δ|\bdiff|\bvs\b|max \||\|.*−.*\|")


def compared_outputs(path: Path):
    """(cell number, text) for every text output that nbval compares in ``path``."""
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or "nbval-ignore-output" in cell.metadata.get("tags", []):
            continue
        for out in cell.outputs:
            yield i, out.get("text", "") if out.output_type == "stream" else out.get("data", {}).get("text/plain", "")


def offending(path: Path, pattern: re.Pattern, within: re.Pattern | None = None) -> list[str]:
    """Lines of compared outputs of ``path`` that match ``pattern`` (in outputs matching ``within``)."""
    return [f"cell {i}: {line.strip()[:160]}" for i, text in compared_outputs(path)
            if within is None or within.search(text) for line in text.splitlines() if pattern.search(line)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_framework_log_line(path):
    found = offending(path, quiet.LOG_LINE) + offending(path, FRAMEWORK_LOG)
    assert not found, "framework log lines in compared outputs (see course_utils.quiet):\n" + "\n".join(found)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_hardware_fact_outside_ignored_cells(path):
    found = offending(path, HARDWARE)
    model = hardware.cpu_model()
    if model not in ("", "unknown"):
        found += offending(path, re.compile(re.escape(model)))
    assert not found, ("hardware facts in compared outputs; print them in a cell tagged nbval-ignore-output "
                       "next to an assert:\n" + "\n".join(found))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_float_noise(path):
    found = offending(path, NOISE, COMPARISON)
    assert not found, ("floats printed at noise precision; print the bound they were checked against "
                       "(course_utils.stable.at_most) instead:\n" + "\n".join(found))


def test_the_checks_can_fail():
    assert quiet.LOG_LINE.match("I0000 00:00:1796403573.157132    6588 port.cc:153] oneDNN custom operations are on.")
    assert quiet.LOG_LINE.match("WARNING: All log messages before absl::InitializeLog() is called are written to ...")
    assert quiet.LOG_LINE.match("2026-12-04 10:00:00.123456: I tensorflow/core/util/port.cc:113] oneDNN ...")
    assert not quiet.LOG_LINE.match("E0000 00:00:1796403573.157132    6588 rpc.cc:1] a real error stays visible")
    for line in ("CPU: AMD EPYC; native bfloat16: False", "profile cpu, device cpu, native bf16: True",
                 "CPU cores       2", "memory          23.5 GiB", "ATen CPU capability AVX512"):
        assert HARDWARE.search(line), line
    for line in ("max |Δparam| = 6.0e-08", "max |Δw|: 1.2e-06, final loss 0.03", "ratio 4.1e-5 vs 1",
                 "jax_none vs tf diff 3e-7", "max |onnxruntime − PyTorch| / max |logit| = 4e-07"):
        assert NOISE.search(line) and COMPARISON.search(line), line
    for line in ("max |Δparam| ≤ 1e-6", "ratio vs 1: 2 ± 1e-4", "Δ lr 1e-2", "3.5e-02 vs correct", "Δloss 2.02e-03",
                 "max |Δparam| from forgetting to divide: 1e-7–0.0001"):
        assert not NOISE.search(line), line
