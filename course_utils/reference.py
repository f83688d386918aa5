"""GPU reference numbers: read what a real GPU run committed, label it, never invent it.

``scripts/gpu_reference.sh`` runs the benchmarks on a GPU machine and writes one folder,
``results/gpu-<device>-<YYYYMMDD>/``, with one JSON per benchmark (``benchmarks/_common.py``
describes the format: ``meta`` says which machine and when, ``summary`` the quoted numbers).
Chapters show those numbers beside the ones they measure on the reader's machine::

    ref = reference.latest("amp")
    print(ref.label if ref else reference.missing("amp"))

A file there that was not measured on a GPU is an error, not a reference.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"
"""The repository's results/ folder (the chapters read it from a checkout)."""


@dataclass(frozen=True)
class Reference:
    """One benchmark's JSON from a GPU run: ``doc["summary"]``, ``doc["results"]``, ``doc["meta"]``."""

    path: Path
    doc: dict

    @property
    def summary(self) -> dict:
        return self.doc["summary"]

    @property
    def results(self) -> list[dict]:
        return self.doc["results"]

    @property
    def device(self) -> str:
        """The GPU's name as PyTorch reported it (the first one, and how many)."""
        gpus = self.doc["meta"]["gpus"]
        return gpus[0] + (f" (x{len(gpus)})" if len(gpus) > 1 else "")

    @property
    def date(self) -> str:
        """The UTC day it was measured, YYYY-MM-DD."""
        return self.doc["meta"]["date"][:10]

    @property
    def label(self) -> str:
        """Where the numbers come from, for a table title: device, date, torch version, file."""
        meta = self.doc["meta"]
        where = f"{self.path.parent.name}/{self.path.name}"
        return f"measured on {self.device}, {self.date}, torch {meta['torch']} (results/{where})"


def latest(benchmark: str, root: Path | None = None) -> Reference | None:
    """The newest committed GPU run of ``benchmark`` ("amp", "allreduce", "device", ...), or None.

    Looks in ``root/gpu-*/<benchmark>.json`` (``root`` defaults to :data:`RESULTS`); the newest by
    the date it records. Raises ``ValueError`` for a file there that was not measured on a GPU.
    """
    found = []
    for path in sorted((root or RESULTS).glob(f"gpu-*/{benchmark}.json")):
        doc = json.loads(path.read_text())
        meta = doc.get("meta", {})
        if meta.get("device") != "cuda" or not meta.get("gpus"):
            raise ValueError(f"{path} was measured on {meta.get('device', 'an unknown device')!r}, not a GPU: "
                             "only scripts/gpu_reference.sh output from a GPU machine belongs in results/gpu-*/")
        found.append(Reference(path, doc))
    return max(found, key=lambda r: r.doc["meta"]["date"]) if found else None


def missing(benchmark: str) -> str:
    """What to print where a chapter would show a GPU reference that is not committed yet."""
    return (f"no GPU reference yet: results/gpu-*/{benchmark}.json is not committed "
            "(scripts/gpu_reference.sh writes it on a GPU machine)")
