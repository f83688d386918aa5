"""Execute notebooks in place so their stored outputs are what the code produces now.

    .venv/bin/python tools/run_notebooks.py notebooks/01_why_parallel.ipynb [...]

Runs each notebook top to bottom in its own folder with COURSE_PROFILE=cpu (the profile the stored
outputs and the tests use), keeps cells tagged raises-exception going, and prints the wall time.
Run it after changing a notebook or anything in course_utils a notebook prints; then `make test`.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def execute(path: Path, timeout_s: int = 300) -> float:
    nb = nbformat.read(path, as_version=4)
    os.environ["COURSE_PROFILE"] = "cpu"
    kernel = nb.metadata.get("kernelspec", {}).get("name", "python3")
    client = NotebookClient(nb, timeout=timeout_s, kernel_name=kernel,
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - start
    nbformat.write(nb, path)
    return elapsed


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for arg in sys.argv[1:]:
        print(f"{arg}: {execute(Path(arg)):.1f} s", flush=True)
