"""Stored outputs that strict nbval compares must hold on every machine.

A compared output (a code cell not tagged ``nbval-ignore-output``) may not contain
- a framework's log line (they depend on the CPU: TensorFlow's oneDNN notice appears only where
  oneDNN is its default), see course_utils.quiet;
- a hardware fact (CPU model, core count, memory size, instruction sets, bf16 support, GPU names):
  those belong in ignore-output cells next to an assert on what the chapter relies on;
- a float printed at float-noise precision (below 1e-5, in scientific notation) instead of the bound
  it was checked against (course_utils.bounds).

Any stored output, compared or not (it is what a reader sees on GitHub), may not contain
- a progress bar that never moved (``desc:   0%|          | 0/4``, the text form of a tqdm widget at
  the moment it appeared), or one with its timings (course_utils.progress prints the finished bar);
- an absolute path of the machine that executed it (its checkout, a virtual environment's
  site-packages, /work/, /tmp/, /root/, /home/): print paths relative to the notebook or the repository;
- a profiler's log line (kineto's ``STAGE:`` / ``USDT:`` / ActivityProfiler lines, torch's ``[W...]``).
"""
import re
import sys
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
UNMOVED_BAR = re.compile(r"(?<!\d)0%\|\s*\| 0/\d+")          # tqdm's text form before the first step
TIMED_BAR = re.compile(r"\d+%\|.*\| \d+/\d+ \[\d+:\d\d")       # ... [00:03<00:00, 1.2it/s]
MACHINE_ROOTS = r"work|tmp|root|home|Users|mnt|scratch|builds"
MACHINE_PATH = re.compile(rf"(?<![\w.$}}])/({MACHINE_ROOTS})/\S|/(site|dist)-packages/"
                          rf"|{re.escape(str(ROOT))}/|{re.escape(sys.prefix)}/")
PROFILER_LOG = re.compile(r"^\s*(STAGE:|USDT:)|ActivityProfiler|libkineto|\bkineto\b.*\b(warn|init)"
                          r"|^\[W\d{4} .*\]|^\[W (\S+ )?\S+\.(cpp|h):\d+\]")


def _text(out) -> str:
    if out.output_type == "stream":
        return out.get("text", "")
    if out.output_type == "error":
        return "\n".join(out.get("traceback", []))
    return out.get("data", {}).get("text/plain", "")


def compared_outputs(path: Path, every: bool = False):
    """(cell number, text) for every text output that nbval compares in ``path`` (``every``: all outputs)."""
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or (not every and "nbval-ignore-output" in cell.metadata.get("tags", [])):
            continue
        for out in cell.outputs:
            yield i, _text(out)


def offending(path: Path, pattern: re.Pattern, within: re.Pattern | None = None, every: bool = False) -> list[str]:
    """Lines of compared outputs of ``path`` that match ``pattern`` (in outputs matching ``within``;
    ``every``: in all stored outputs, also of cells tagged nbval-ignore-output)."""
    return [f"cell {i}: {line.strip()[:160]}" for i, text in compared_outputs(path, every)
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
                       "(course_utils.bounds.at_most) instead:\n" + "\n".join(found))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_progress_bars_are_stored_finished(path):
    found = list(dict.fromkeys(offending(path, UNMOVED_BAR, every=True) + offending(path, TIMED_BAR, every=True)))
    assert not found, ("progress bars stored as they appeared (0%) or with timings; course_utils.progress "
                       "prints the finished bar: re-execute with tools/run_notebooks.py\n" + "\n".join(found))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_machine_path(path):
    found = offending(path, MACHINE_PATH, every=True)
    assert not found, ("absolute paths of the machine that ran the notebook; print them relative to the "
                       "notebook or the repository:\n" + "\n".join(found))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_profiler_log_line(path):
    found = offending(path, PROFILER_LOG, every=True)
    assert not found, "profiler log lines in stored outputs:\n" + "\n".join(found)


def writefile_words(path: Path) -> list[str]:
    """``"cell N: stored 'Overwriting', a fresh run says 'Writing'"`` (and the reverse) for each %%writefile
    cell of ``path`` whose stored word is not what a fresh clone prints: "Writing" the first time the
    chapter writes a file, "Overwriting" after that (a re-run over an old work/ folder stores the latter)."""
    written, found = set(), []
    for n, cell in enumerate(nbformat.read(path, as_version=4).cells):
        match = re.match(r"%%writefile(?: -a)? (\S+)", cell.source) if cell.cell_type == "code" else None
        if not match:
            continue
        fresh = "Overwriting" if match.group(1) in written else "Writing"
        written.add(match.group(1))
        for text in (_text(out) for out in cell.outputs if out.output_type == "stream"):
            stored = text.split(" ", 1)[0]
            if stored in ("Writing", "Overwriting") and stored != fresh:
                found.append(f"cell {n}: stored {stored!r}, a fresh run says {fresh!r}")
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_writefile_says_what_a_fresh_clone_prints(path):
    found = writefile_words(path)
    assert not found, ("re-execute with `make outputs` (it removes notebooks/work first):\n" + "\n".join(found))


def test_a_stale_writefile_word_is_found(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("%%writefile work/a.py\nx = 1\n"),
                                         nbformat.v4.new_code_cell("%%writefile work/a.py\nx = 2\n")])
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="Overwriting work/a.py\n")]
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="Overwriting work/a.py\n")]
    nbformat.write(nb, tmp_path / "x.ipynb")
    assert writefile_words(tmp_path / "x.ipynb") == ["cell 0: stored 'Overwriting', a fresh run says 'Writing'"]


def test_the_stored_output_checks_can_fail():
    for line in ("world sizes:   0%|          | 0/3 [00:00<?, ?it/s]", "DDP:   0%|          | 0/2"):
        assert UNMOVED_BAR.search(line), line
    assert TIMED_BAR.search("sizes: 100%|██████████| 3/3 [00:04<00:00,  1.45s/it]")
    for line in ("sizes: 100%|██████████| 3/3", "stopped:  25%|██▌       | 1/4", "loss 10%| of 0/3"):
        assert not UNMOVED_BAR.search(line) and not TIMED_BAR.search(line), line
    for line in ('  File "/work/main/notebooks/work/ch00_broken.py", line 3, in broken',
                 "ImportError: cannot import name 'x' from 'keras.utils' (/opt/venv/lib/python3.11/site-packages/k.py)",
                 "wrote /home/ci/course/notebooks/work/ch12_results/allreduce.json", "saved in /tmp/tmpab12/ckpt",
                 f"see {ROOT}/README.md"):
        assert MACHINE_PATH.search(line), line
    for line in ("wrote work/ch12_results/allreduce.json", '  File "REPO/notebooks/work/x.py", line 3',
                 'srun "$COURSE_DIR/.venv/bin/torchrun"', "from the repository root, .venv on a shared disk",
                 "SITE-PACKAGES/keras/utils/__init__.py", "checkpoint in work/tmp/step_3"):
        assert not MACHINE_PATH.search(line), line
    for line in ("USDT:2026-12-06 04:11:09 2349:2349 SyncActivityProfilerHandler.cpp:52] profiler_start",
                 "STAGE:2024-01-01 10:00:00 1:1 ActivityProfilerController.cpp:314] Completed Stage: Warm Up",
                 "[W1206 04:11:09.455162930 CPUAllocator.cpp:245] Warning: something"):
        assert PROFILER_LOG.search(line), line
    for line in ("the profiler's table: 3 kernels", "Name    Self CPU %   CPU total"):
        assert not PROFILER_LOG.search(line), line


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
