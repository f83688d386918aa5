"""Wall time and peak memory of each chapter, run top to bottom (the figures the README lists).

    python benchmarks/notebooks.py --quick        # chapters 01 and 08 (~40 s)
    python benchmarks/notebooks.py                # every chapter (~7 min on 2 CPU cores)
    python benchmarks/notebooks.py --torch-only --save DIR   # the GPU reference run: PyTorch chapters,
                                                             # executed copies in DIR
    python benchmarks/notebooks.py --chapters 14,15          # only those

Runs each notebook with tools/run_notebooks.py's executor without touching the stored outputs, in
the profile this machine picks (gpu where a GPU is visible, else cpu); ``--save`` keeps each executed
copy (up to the failing cell where one fails). A chapter that fails is recorded with its error and
the run goes on; one stopped by the caller's deadline (``--deadline``) is recorded as cut off, the
chapters after it as not run. Peak memory is the largest sum of PSS over the kernel and every process it
started, sampled every 0.1 s.
"""
from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import _common
from course_utils import placement
from course_utils.subprocesses import descendants

sys.path.insert(0, str(_common.ROOT / "tools"))
import run_notebooks  # noqa: E402

QUICK = ["01_why_parallel.ipynb", "08_caffe2_legacy.ipynb"]
NOT_TORCH = ["05_tensorflow_strategies.ipynb", "06_keras_multi_device.ipynb", "07_mxnet_legacy.ipynb"]
"""Chapters that need TensorFlow or MXNet (a GPU machine with only PyTorch skips them: --torch-only)."""


def tiny_notebook(folder: Path) -> Path:
    """A two-cell notebook (for the schema test: seconds, not minutes)."""
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = sum(range(10**6))"),
                                         nbformat.v4.new_code_cell("print(x)")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = folder / "tiny.ipynb"
    nbformat.write(nb, path)
    return path


class Stop:
    """The caller's SIGTERM (``timeout`` in gpu_reference.sh sends it at the deadline). Jupyter starts
    each kernel in a session of its own, so the signal does not reach it: the handler kills the kernel
    and whatever it started, the chapter in progress then fails (a dead kernel) and is recorded as cut
    off, and no chapter starts after it. Nothing is raised inside nbclient or jupyter_client.

    The chapters run in a thread (:func:`execute`) so that this handler stays the process's: nbclient,
    run in the main thread, puts its own SIGTERM handler in while a notebook runs (it shuts the kernel
    down, and the chapter then looks failed) and leaves the default one, which ends the process, behind."""

    requested = False

    @classmethod
    def handle(cls, signum: int, frame) -> None:
        cls.requested = True
        cls.kill_tree(os.getpid())

    @classmethod
    def kernel_started(cls, pid: int) -> None:
        """A kernel that started after the signal is killed at once."""
        if cls.requested:
            cls.kill_tree(pid, including=True)

    @staticmethod
    def kill_tree(pid: int, including: bool = False) -> None:
        for victim in [*descendants(pid), *([pid] if including else [])]:
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                pass


def execute(path: Path, **kwargs) -> tuple[float, int]:
    """``run_notebooks.execute(path, **kwargs)`` in another thread, the main one waiting (see :class:`Stop`)."""
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = run_notebooks.execute(path, **kwargs)
        except BaseException as exc:  # handed to the main thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, name=path.name, daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.5)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def describe(doc: dict) -> list[str]:
    """What the run says: chapters run, their time and largest peak memory, and which failed or did not finish."""
    s = doc["summary"]

    def names(key: str) -> str:
        return ", ".join(s[key]) or "none"

    return [f"{s['notebooks']} chapters run in {s['total_s']:,.0f} s; largest peak memory "
            f"{s['max_peak_bytes'] / 1e9:,.2f} GB (over 1.5 GB: {names('over_1_5_GB')})",
            f"failed: {names('failed')}; cut off: {names('cut_off')}; not run: {names('not_run')}"]


def main(argv: list[str] | None = None) -> dict:
    parser = _common.parser(__doc__.splitlines()[0])
    parser.add_argument("--torch-only", action="store_true", help="skip the TensorFlow and MXNet chapters")
    parser.add_argument("--save", type=Path, help="folder for the executed copies")
    parser.add_argument("--chapters", help="only these chapters, by number: 00,04,14 (e.g. those a cut-off run missed)")
    parser.add_argument("--deadline", type=float, default=float(os.environ.get("STEP_DEADLINE", "inf")),
                        help="when the caller stops this run, in seconds since the epoch (gpu_reference.sh sets "
                             "STEP_DEADLINE): a chapter failing then is recorded as cut off, and none starts after it")
    args = parser.parse_args(argv)
    chapters = sorted((_common.ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    with tempfile.TemporaryDirectory() as tmp:
        if args.tiny:
            paths = [tiny_notebook(Path(tmp))]
        else:
            paths = [p for p in chapters if p.name in QUICK] if args.quick else chapters
        if args.torch_only:
            paths = [p for p in paths if p.name not in NOT_TORCH]
        if args.chapters:
            wanted = set(args.chapters.split(","))
            paths = [p for p in paths if p.name[:2] in wanted]
            if not paths:
                parser.error(f"no chapter numbered {args.chapters} (the notebooks are 00_... to 16_...)")
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
        profile = placement.plan(1).profile
        rows: list[dict] = []

        def out_of_time() -> bool:
            """The caller's deadline has come (its SIGTERM reaches the kernel too: the chapter then fails)."""
            return time.time() >= args.deadline - 2

        signal.signal(signal.SIGTERM, Stop.handle)   # from here on a SIGTERM cuts the chapter in progress off
        for i, path in enumerate(paths):
            row = {"notebook": path.name, "profile": profile}
            print(f"{path.name}: running", flush=True)
            try:
                row["seconds"], row["peak_bytes"] = execute(
                    path, write=False, profile=profile, save_as=args.save / path.name if args.save else None,
                    on_kernel=Stop.kernel_started)
            except Exception as exc:  # a failing chapter is a result; the others still run
                row.update(seconds=0.0, peak_bytes=0, error=f"{type(exc).__name__}: {str(exc).strip()[-300:]}")
            if "error" in row and (out_of_time() or Stop.requested):
                row.update(cut_off=True, error="cut off: the run's time budget ended during this chapter")
            rows.append(row)
            done = f"{row['seconds']:.1f} s, peak {row['peak_bytes'] / 1e6:,.0f} MB"
            print(f"{path.name}: " + (row["error"] if "cut_off" in row else f"FAILED {row['error']}"
                                      if "error" in row else done), flush=True)
            summary = {"notebooks": len(rows),
                       "failed": [r["notebook"] for r in rows if "error" in r and "cut_off" not in r],
                       "cut_off": [r["notebook"] for r in rows if "cut_off" in r],
                       "not_run": [p.name for p in paths[i + 1:]],
                       "total_s": sum(r["seconds"] for r in rows),
                       "max_peak_bytes": max(r["peak_bytes"] for r in rows),
                       "over_1_5_GB": [r["notebook"] for r in rows if r["peak_bytes"] > 1.5e9]}
            # after each chapter: a cut-off run keeps what it measured
            _common.write("notebooks", args, rows, summary, describe)
            if out_of_time() or Stop.requested or "cut_off" in row:
                break
    return summary


if __name__ == "__main__":
    main()
