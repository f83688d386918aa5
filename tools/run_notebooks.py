"""Execute notebooks in place so their stored outputs are what the code produces now, and measure them.

    .venv/bin/python tools/run_notebooks.py notebooks/01_why_parallel.ipynb [...]
    .venv/bin/python tools/run_notebooks.py --readme notebooks/[0-9]*.ipynb
    .venv/bin/python tools/run_notebooks.py --headers notebooks/[0-9]*.ipynb   # no run: from README's table

Runs each notebook top to bottom in its own folder with COURSE_PROFILE=cpu and the GPUs hidden (the
profile the stored outputs and the tests use), with this machine's own CPU kernels — `make test` then
compares the outputs under other ones (notebooks/capped-kernels.env) — and prints its wall time and
peak memory. Peak memory is the largest sum,
over the kernel and every process it started (workers, TensorFlow tasks), of the proportional set
size (PSS: shared pages split between the processes that share them, so forked workers are not
counted twice), sampled every 0.1 s from /proc — what a Binder container's memory limit sees.
``--readme`` also rewrites README.md's resource table (between its ``resources`` markers) with
these measurements, the date and the machine, and the runtime each chapter's header (its first
cell) states — "about 45 s on a 2-core CPU" — from the same measurement (:func:`runtime_phrase`).
``--headers`` only rewrites the headers from README's table, running nothing. Run it after changing
a notebook or anything in course_utils a notebook prints; then ``make test``.
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from course_utils import hardware, kernels
from course_utils.subprocesses import descendants

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
            profile: str = "cpu", save_as: Path | None = None,
            on_kernel: Callable[[int], None] | None = None) -> tuple[float, int]:
    """Run ``path`` in place; return (wall time in s, peak memory of kernel + workers in bytes).
    ``verbose`` prints the processes running at the peak and their PSS; ``write=False`` leaves the
    file as it was (benchmarks/notebooks.py); ``save_as`` writes the executed copy there instead,
    also when a cell fails (up to the failing cell); ``profile`` is the COURSE_PROFILE to run with;
    ``on_kernel(pid)`` is called once the kernel has started (Jupyter starts it in its own session)."""
    nb = nbformat.read(path, as_version=4)
    nb.metadata.pop("widgets", None)   # the state of widgets of an earlier run; nbclient stores this run's
    saved = dict(os.environ)
    os.environ["COURSE_PROFILE"] = profile
    if profile == "cpu":   # the stored outputs: written as on a machine without GPUs, on any machine
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    kernel = nb.metadata.get("kernelspec", {}).get("name", "python3")
    sampler = PeakMemory()
    client = NotebookClient(nb, timeout=timeout_s, kernel_name=kernel,
                            resources={"metadata": {"path": str(path.parent)}})
    def started(**_) -> None:
        sampler.pid = client.km.provisioner.pid
        if on_kernel is not None:
            on_kernel(sampler.pid)

    client.on_notebook_start = started
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


HEADER_RUNTIME = re.compile(r"about(\s+)\d+ (?:s|min)(\s+)on(\s+)a(\s+)\d+-core(\s+)CPU")
TABLE_CORES = re.compile(r"on (\d+) vCPUs")


def runtime_phrase(seconds: float) -> str:
    """How a header states a measured wall time: to 5 s below two minutes, to the minute above
    (``14.6`` -> ``'about 15 s'``, ``87`` -> ``'about 85 s'``, ``150`` -> ``'about 2 min'``)."""
    if seconds < 117.5:
        return f"about {max(5, 5 * round(seconds / 5))} s"
    return f"about {max(1, round(seconds / 60))} min"


def stated_runtime(header: str) -> tuple[str, int] | None:
    """(the runtime phrase, the core count) a chapter header states, e.g. ('about 30 s', 2); None if none."""
    match = HEADER_RUNTIME.search(header)
    if match is None:
        return None
    words = match.group(0).split()
    return f"about {words[1]} {words[2]}", int(words[5].split("-")[0])


def with_runtime(header: str, seconds: float, cores: int) -> str:
    """``header`` with its stated runtime replaced by the one measured (its line breaks kept)."""
    if HEADER_RUNTIME.search(header) is None:
        raise SystemExit(f"no 'about N s on a N-core CPU' in this header to rewrite:\n{header[:300]}")
    _, number, unit = runtime_phrase(seconds).split()
    return HEADER_RUNTIME.sub(lambda m: f"about{m[1]}{number} {unit}{m[2]}on{m[3]}a{m[4]}{cores}-core{m[5]}CPU",
                              header, count=1)


def readme_runtimes(text: str | None = None) -> tuple[dict[str, float], int]:
    """README's resource table: ({notebook file name: wall time in s}, the vCPUs it was measured on)."""
    text = README.read_text() if text is None else text
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    rows = re.findall(r"^\| (\S+\.ipynb) \| (.*?) \|$", block, re.M)
    return {name: _parse(row)[0] for name, row in rows}, int(TABLE_CORES.search(block).group(1))


def update_header(path: Path, seconds: float, cores: int) -> bool:
    """Rewrite the runtime ``path``'s first cell states; True if it changed."""
    nb = nbformat.read(path, as_version=4)
    new = with_runtime(nb.cells[0].source, seconds, cores)
    if new == nb.cells[0].source:
        return False
    nb.cells[0].source = new
    nbformat.write(nb, path)
    return True


def _parse(row: str) -> tuple[float, int]:
    t, mem = re.match(r"([\d.]+) s \| ([\d,]+) MB", row).groups()
    return float(t), int(mem.replace(",", "")) * 1_000_000


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--readme", action="store_true",
                        help="rewrite README.md's resource table and the runtime in each chapter's header")
    parser.add_argument("--headers", action="store_true",
                        help="run nothing: rewrite each chapter header's runtime from README.md's table")
    parser.add_argument("--verbose", action="store_true", help="list the processes running at each peak")
    args = parser.parse_args()
    if args.headers:
        times, cores = readme_runtimes()
        for nb_path in args.notebooks:
            if update_header(nb_path, times[nb_path.name], cores):
                print(f"{nb_path}: header now says {runtime_phrase(times[nb_path.name])}")
        raise SystemExit(0)
    kernels.use_for_every_kernel()  # Unix sockets, no ports to race for; a kernel that dies says why
    measured = {}
    for nb_path in args.notebooks:
        seconds, peak = execute(nb_path, verbose=args.verbose)
        measured[nb_path.name] = (seconds, peak)
        print(f"{nb_path}: {seconds:.1f} s, peak {peak / 1e6:,.0f} MB", flush=True)
    if args.readme:
        update_readme(measured)
        for nb_path in args.notebooks:
            update_header(nb_path, measured[nb_path.name][0], os.cpu_count() or 1)
