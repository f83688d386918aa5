"""Wall time and peak memory of each chapter, run top to bottom (the figures the README lists).

    python benchmarks/notebooks.py --quick        # chapters 01 and 08 (~40 s)
    python benchmarks/notebooks.py                # every chapter (~7 min on 2 CPU cores)

Runs each notebook with tools/run_notebooks.py's executor without saving it (the stored outputs are
untouched), in the profile this machine picks (gpu where a GPU is visible, else cpu). Peak memory is
the largest sum of PSS over the kernel and every process it started, sampled every 0.1 s.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import _common
from course_utils import hardware

sys.path.insert(0, str(_common.ROOT / "tools"))
import run_notebooks  # noqa: E402

QUICK = ["01_why_parallel.ipynb", "08_caffe2_legacy.ipynb"]


def tiny_notebook(folder: Path) -> Path:
    """A two-cell notebook (for the schema test: seconds, not minutes)."""
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = sum(range(10**6))"),
                                         nbformat.v4.new_code_cell("print(x)")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = folder / "tiny.ipynb"
    nbformat.write(nb, path)
    return path


def main(argv: list[str] | None = None) -> dict:
    args = _common.parser(__doc__.splitlines()[0]).parse_args(argv)
    chapters = sorted((_common.ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    with tempfile.TemporaryDirectory() as tmp:
        if args.tiny:
            paths = [tiny_notebook(Path(tmp))]
        else:
            paths = [p for p in chapters if p.name in QUICK] if args.quick else chapters
        profile = hardware.profile()
        rows = []
        for path in paths:
            seconds, peak = run_notebooks.execute(path, write=False, profile=profile)
            rows.append({"notebook": path.name, "profile": profile, "seconds": seconds, "peak_bytes": peak})
            print(f"{path.name}: {seconds:.1f} s, peak {peak / 1e6:,.0f} MB", flush=True)
            summary = {"notebooks": len(rows), "total_s": sum(r["seconds"] for r in rows),
                       "max_peak_bytes": max(r["peak_bytes"] for r in rows),
                       "over_1_5_GB": [r["notebook"] for r in rows if r["peak_bytes"] > 1.5e9]}
            _common.write("notebooks", args, rows, summary)  # after each: a cut-off run keeps what it measured
    return summary


if __name__ == "__main__":
    main()
