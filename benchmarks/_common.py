"""What every benchmark shares: the command line, the machine description, the JSON it writes.

Every script takes ``--quick`` (CPU-sized: small messages, few steps, under 2 minutes on 2 cores)
and ``--out DIR`` (default ``results/``); without ``--quick`` it runs the full sizes, and on a GPU
machine the same script uses the GPUs. Each writes ``DIR/<name>.json``:

    {"benchmark": name, "schema": 2, "quick": bool,
     "meta": {date, host, python, torch, device, gpus, cpu, cpu_cores[, cuda, driver]},
     "results": [ {...one row per measurement...} ],
     "summary": { ...the few numbers a chapter or the README quotes...,
                  "quoted": ["the lines a chapter prints from this run", ...]}}

Each benchmark owns what its file says: its ``describe(doc)`` turns the file's results and summary into
the labelled lines ``summary["quoted"]`` (figures with their units, and what they measure), which
``course_utils.gpu_reference`` prints beside a chapter's own measurement without knowing any benchmark's keys.

benchmarks/schema.json is the JSON schema; tests/test_benchmarks.py checks each script against it.
Timings are measurements of this machine at this moment: the JSON says which machine and when.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # course_utils from this checkout, also when run as a plain script

from course_utils import hardware, placement  # noqa: E402

SCHEMA_VERSION = 2  # 2: summary["quoted"], the lines a chapter prints


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="CPU sizes: finishes in under 2 minutes")
    p.add_argument("--out", type=Path, default=ROOT / "results", help="folder for the JSON (default results/)")
    p.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)  # the schema test's seconds-long run
    return p


def meta() -> dict:
    """Which machine, which software, when."""
    import torch

    device = placement.plan(1).device  # where the benchmarks ran (COURSE_PROFILE=cpu: the CPU)
    doc = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": device,
        "gpus": hardware.gpus() if device == "cuda" else [],
        "cpu": hardware.cpu_model(),
        "cpu_cores": hardware.cpu_cores(),
    }
    if device == "cuda":
        doc["cuda"] = torch.version.cuda
        doc["driver"] = _nvidia_driver()
    return doc


def _nvidia_driver() -> str | None:
    """The NVIDIA driver version nvidia-smi reports, or None where it cannot be asked."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def write(name: str, args: argparse.Namespace, results: list[dict], summary: dict,
          describe: Callable[[dict], list[str]]) -> Path:
    """Write ``args.out/<name>.json`` and return its path.

    ``describe(doc)`` is the benchmark's own account of the file it writes (``doc`` as written, without
    ``quoted``): the few labelled lines a chapter prints, stored as ``summary["quoted"]``.
    """
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{name}.json"
    doc = {"benchmark": name, "schema": SCHEMA_VERSION, "quick": bool(args.quick or args.tiny), "meta": meta(),
           "results": results, "summary": summary}
    quoted = describe(doc)
    if not quoted or not all(isinstance(line, str) and line for line in quoted):
        raise ValueError(f"{name}'s describe() returned {quoted!r}: it must return the non-empty lines a chapter "
                         "prints from this run (a list of strings)")
    summary["quoted"] = quoted
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path}")
    return path


def joined(items: list[str]) -> str:
    """``items`` as one line of a quoted description, or "none measured"."""
    return " · ".join(items) if items else "none measured"


def size(nbytes: float) -> str:
    """A message size for a quoted line: MiB from 1 MiB up, else KiB."""
    return f"{nbytes / 2**20:,.0f} MiB" if nbytes >= 2**20 else f"{nbytes / 2**10:,.0f} KiB"


def table(rows: list[dict], columns: dict[str, str]) -> str:
    """A plain text table: ``columns`` maps a row key to a format like '{:>10.3f}' (header = key)."""
    widths = {k: max([len(k)] + [len(fmt.format(r[k])) for r in rows]) for k, fmt in columns.items()}
    head = "  ".join(f"{k:>{widths[k]}}" for k in columns)
    body = ["  ".join(f"{fmt.format(r[k]):>{widths[k]}}" for k, fmt in columns.items()) for r in rows]
    return "\n".join([head, *body])
