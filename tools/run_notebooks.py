"""Execute notebooks in place so their stored outputs are what the code produces now, and measure them.

    .venv/bin/python tools/run_notebooks.py notebooks/01_why_parallel.ipynb [...]
    .venv/bin/python tools/run_notebooks.py --readme notebooks/[0-9]*.ipynb

Runs each notebook top to bottom in its own folder with COURSE_PROFILE=cpu and the GPUs hidden (the
profile the stored outputs and the tests use), with this machine's own CPU kernels — `make test` then
compares the outputs under other ones (notebooks/capped-kernels.env) — and prints its wall time and
peak memory. Peak memory is the largest sum,
over the kernel and every process it started (workers, TensorFlow tasks), of the proportional set
size (PSS: shared pages split between the processes that share them, so forked workers are not
counted twice), sampled every 0.1 s from /proc — what a Binder container's memory limit sees.
``--readme`` also rewrites README.md's resource table (between its ``resources`` markers) with
these measurements, the date and the machine. Run it after changing a notebook or anything in
course_utils a notebook prints; then ``make test``.
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import threading
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from course_utils import hardware, kernels
from course_utils.scripts import descendants

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BEGIN, END = "<!-- resources:start -->", "<!-- resources:end -->"


def pss_bytes(pid: int) -> int:
    """Proportional set size of one process in bytes (0 if it has gone or /proc is unreadable)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class PeakMemory(threading.Thread):
    """Samples the PSS of a process tree (``pid`` and its descendants) until ``stop()``."""

    def __init__(self, interval_s: float = 0.1):
        super().__init__(daemon=True)
        self.pid: int | None = None
        self.interval_s, self.peak_bytes = interval_s, 0
        self.at_peak: dict[str, int] = {}  # command line -> PSS in bytes, when the peak was seen
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(self.interval_s):
            if self.pid is not None:
                tree = {self.pid: "kernel", **descendants(self.pid)}
                sizes = {pid: pss_bytes(pid) for pid in tree}
                if sum(sizes.values()) > self.peak_bytes:
                    self.peak_bytes = sum(sizes.values())
                    self.at_peak = {f"{pid} {tree[pid][:100]}": size for pid, size in sizes.items()}

    def stop(self) -> int:
        self._done.set()
        self.join()
        return self.peak_bytes


def execute(path: Path, timeout_s: int = 300, verbose: bool = False, write: bool = True,
            profile: str = "cpu", save_as: Path | None = None) -> tuple[float, int]:
    """Run ``path`` in place; return (wall time in s, peak memory of kernel + workers in bytes).
    ``verbose`` prints the processes running at the peak and their PSS; ``write=False`` leaves the
    file as it was (benchmarks/notebooks.py); ``save_as`` writes the executed copy there instead,
    also when a cell fails (up to the failing cell); ``profile`` is the COURSE_PROFILE to run with."""
    nb = nbformat.read(path, as_version=4)
    saved = dict(os.environ)
    os.environ["COURSE_PROFILE"] = profile
    if profile == "cpu":   # the stored outputs: written as on a machine without GPUs, on any machine
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    kernel = nb.metadata.get("kernelspec", {}).get("name", "python3")
    sampler = PeakMemory()
    client = NotebookClient(nb, timeout=timeout_s, kernel_name=kernel,
                            resources={"metadata": {"path": str(path.parent)}})
    client.on_notebook_start = lambda **_: setattr(sampler, "pid", client.km.provisioner.pid)
    sampler.start()
    start = time.perf_counter()
    try:
        client.execute()
    finally:
        elapsed, peak = time.perf_counter() - start, sampler.stop()
        os.environ.clear()
        os.environ.update(saved)
        if save_as is not None:
            nbformat.write(nb, save_as)
    if write:
        nbformat.write(nb, path)
    if verbose:
        for process, size in sorted(sampler.at_peak.items(), key=lambda kv: -kv[1]):
            print(f"    {size / 1e6:7,.0f} MB  {process}")
    return elapsed, peak


def resource_table(rows: dict[str, tuple[float, int]]) -> str:
    """The README's markdown table: one row per notebook, time in s, peak memory in MB."""
    cpu = re.sub(r"\s+", " ", hardware.cpu_model())
    head = (f"Measured {datetime.date.today().isoformat()} by `tools/run_notebooks.py --readme` on "
            f"{os.cpu_count()} vCPUs ({cpu}), Linux, profile `cpu`, no GPU.\n\n"
            "| notebook | wall time | peak memory (kernel + workers, PSS) |\n|---|---:|---:|\n")
    body = "".join(f"| {name} | {t:.0f} s | {mem / 1e6:,.0f} MB |\n" for name, (t, mem) in rows.items())
    return head + body


def update_readme(rows: dict[str, tuple[float, int]]) -> None:
    text = README.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"README.md has no {BEGIN} ... {END} block to rewrite")
    before, rest = text.split(BEGIN, 1)
    old, after = rest.split(END, 1)
    kept = dict(re.findall(r"^\| (\S+\.ipynb) \| (.*?) \|$", old, re.M))  # rows not re-measured
    table = {**{k: _parse(v) for k, v in kept.items()}, **rows}
    README.write_text(before + BEGIN + "\n" + resource_table(dict(sorted(table.items()))) + END + after)


def _parse(row: str) -> tuple[float, int]:
    t, mem = re.match(r"([\d.]+) s \| ([\d,]+) MB", row).groups()
    return float(t), int(mem.replace(",", "")) * 1_000_000


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--readme", action="store_true", help="rewrite README.md's resource table")
    parser.add_argument("--verbose", action="store_true", help="list the processes running at each peak")
    args = parser.parse_args()
    kernels.use_for_every_kernel()  # Unix sockets, no ports to race for; a kernel that dies says why
    measured = {}
    for nb_path in args.notebooks:
        seconds, peak = execute(nb_path, verbose=args.verbose)
        measured[nb_path.name] = (seconds, peak)
        print(f"{nb_path}: {seconds:.1f} s, peak {peak / 1e6:,.0f} MB", flush=True)
    if args.readme:
        update_readme(measured)
