"""Build the student and autograder versions of every exercise notebook with otter-grader.

    .venv/bin/python tools/build_exercises.py exercises dist     (what `make student` runs)

For each exercises/NN_name.ipynb this writes dist/NN_name/student/ (notebook without solutions, with
its public tests) and dist/NN_name/autograder/ (solutions, all tests, and autograder.zip for
`otter run`). `otter assign` runs every solution against its tests and fails if one does not pass.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from course_utils import kernels

OTTER = Path(sys.executable).with_name("otter")


def build(source: Path, dest: Path, run_tests: bool = True) -> Path:
    """Run ``otter assign`` on one notebook; return its folder with a stable ``autograder.zip``.

    ``run_tests=False`` skips running the solutions against their tests (the site only needs the
    student version; the exercise tests run them)."""
    out = dest / source.stem
    shutil.rmtree(out, ignore_errors=True)
    cmd = [str(OTTER), "assign", str(source), str(out)] + ([] if run_tests else ["--no-run-tests"])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"otter assign failed for {source} (a solution fails its tests?):\n"
                         f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    (zipped,) = (out / "autograder").glob("*-autograder_*.zip")
    shutil.copy(zipped, out / "autograder" / "autograder.zip")
    return out


def main(src: str = "exercises", dest: str = "dist") -> None:
    kernels.use_for_every_kernel()  # otter assign's kernels on Unix sockets (course_utils/kernels.py)
    sources = sorted(Path(src).glob("[0-9]*.ipynb"))
    if not sources:
        raise SystemExit(f"no exercise notebooks in {src}/")
    for source in sources:
        out = build(source, Path(dest))
        print(f"{source} -> {out}/student/{source.name} (students), {out}/autograder/ (instructors)")


if __name__ == "__main__":
    main(*sys.argv[1:])
