"""Run chapters as a CPU Colab runtime would, in the virtualenv tools/colab_reproduction.sh builds.

    /tmp/colab-venv/bin/python tools/colab_run.py --home /tmp/colab-home 00 01 04 ...

What it imitates, per chapter:
- the kernel is this interpreter's (Colab's package versions, course_utils *not* installed: checked);
- ``google.colab`` is imported: a preamble cell puts a stand-in module in ``sys.modules``, so the
  set-up cell takes its Colab branch (real Colab imports google.colab at kernel start);
- the set-up cell is the one tools/colab_setup_cell.py writes, run unchanged except for two
  strings: the clone URL is this repository's committed HEAD (``file://``, no network) and
  ``/content/course`` is ``HOME/runs/NN/content/course``, new for each chapter (each Colab notebook
  gets a fresh runtime); the kernel starts in that ``content``, as Colab's starts in /content, with
  ``PYTHONPATH`` set to an empty ``HOME/env/python`` (Colab sets /env/python);
- no GPU (``CUDA_VISIBLE_DEVICES=``), no ``COURSE_PROFILE``: a CPU runtime.

What a set-up cell pip-installs stays in the virtualenv for later chapters (only chapter 04 uses
torchao). Chapters run one after another in this process; run two such processes at most on a 2-core machine.
Each executed notebook is saved under ``HOME/out/``; one JSON line per chapter is appended to
``HOME/results.jsonl``: chapter, ok, seconds, and the error's last lines.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

import nbclient
import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import colab_setup_cell  # noqa: E402

PREAMBLE = ('# Reproduction only: Colab imports google.colab at kernel start; this stand-in makes the\n'
            '# set-up cell below take its Colab branch.\n'
            'import sys, types\nsys.modules["google.colab"] = types.ModuleType("google.colab")')


def colab_notebook(path: Path, content: Path) -> nbformat.NotebookNode:
    """The chapter at ``path`` with the stand-in preamble, its set-up cell cloning into ``content/course``."""
    nb = nbformat.read(path, as_version=4)
    cell = colab_setup_cell.colab_cell(path.name[:2], colab_setup_cell.repository(), colab_setup_cell.pins())
    url = f"https://github.com/{colab_setup_cell.repository()}"
    assert url in cell and colab_setup_cell.HOME in cell, cell
    nb.cells[1].source = (cell.replace(url, ROOT.as_uri())
                          .replace(colab_setup_cell.HOME, str(content / "course")))
    nb.cells.insert(0, nbformat.v4.new_code_cell(PREAMBLE))
    return nb


def kernel_env(home: Path) -> dict[str, str]:
    """The kernel's environment: this one without the course's variables, as on a CPU Colab runtime."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "COURSE_PROFILE", "VIRTUAL_ENV") and not k.startswith("JPY_")}
    (home / "env" / "python").mkdir(parents=True, exist_ok=True)
    (home / "root").mkdir(exist_ok=True)
    env.update(PYTHONPATH=str(home / "env" / "python"), HOME=str(home / "root"), CUDA_VISIBLE_DEVICES="",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    return env


def check_not_installed(env: dict[str, str], home: Path) -> None:
    """Fail unless a fresh interpreter of this virtualenv, outside the repository, lacks course_utils."""
    probe = subprocess.run([sys.executable, "-c", "import course_utils"], env=env, cwd=home,
                           capture_output=True, text=True)
    if probe.returncode == 0:
        raise SystemExit("course_utils is importable in this virtualenv: the reproduction needs it absent")


def run_chapter(number: str, home: Path, env: dict[str, str], timeout_s: int) -> dict:
    """Execute chapter ``number`` Colab-style; return its result record."""
    (path,) = (ROOT / "notebooks").glob(f"{number}_*.ipynb")
    content = home / "runs" / number / "content"   # a fresh runtime: each Colab notebook gets its own
    shutil.rmtree(content.parent, ignore_errors=True)
    content.mkdir(parents=True)
    nb = colab_notebook(path, content)
    os.environ.clear()
    os.environ.update(env)   # the kernel inherits it
    start = time.monotonic()
    error = ""
    try:
        nbclient.NotebookClient(nb, timeout=timeout_s, kernel_name="python3",
                                resources={"metadata": {"path": str(content)}}).execute()
    except Exception as exc:  # noqa: BLE001 - recorded, the next chapter still runs
        error = "\n".join((str(exc) or traceback.format_exc()).strip().splitlines()[-25:])
    seconds = round(time.monotonic() - start, 1)
    (home / "out").mkdir(exist_ok=True)
    nbformat.write(nb, home / "out" / path.name)
    return {"chapter": number, "ok": not error, "seconds": seconds, "error": error}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("chapters", nargs="+", help='two-digit chapter numbers, e.g. 00 04 16')
    parser.add_argument("--home", type=Path, default=Path("/tmp/colab-home"))
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    args = parser.parse_args()
    home = args.home.resolve()
    home.mkdir(parents=True, exist_ok=True)
    env = kernel_env(home)
    check_not_installed(env, home)
    for number in args.chapters:
        record = run_chapter(number, home, env, args.timeout)
        with open(home / "results.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        print(f"{number}: {'ran to the end' if record['ok'] else 'FAILED'} in {record['seconds']} s", flush=True)
        if record["error"]:
            print(record["error"], flush=True)


if __name__ == "__main__":
    main()
