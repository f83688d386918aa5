"""GPU reference numbers: read what a real GPU run committed, label it, never invent it.

``scripts/gpu_reference.sh`` runs the benchmarks on a GPU machine and writes one folder,
``results/gpu-<device>-<YYYYMMDD>/``, with one JSON per benchmark (``benchmarks/_common.py``
describes the format: ``meta`` says which machine and when, ``summary`` the quoted numbers).
Chapters show those numbers beside the ones they measure on the reader's machine::

    GPU_AMP = gpu_reference.show("amp")     # prints where they come from and what they say; None if absent

What a run says is the benchmark's own account, ``summary["quoted"]``: each benchmark script's
``describe`` writes the labelled lines a chapter prints, so this module knows no benchmark's keys.
A file there that was not measured on a GPU is an error, not a reference.
"""
from __future__ import annotations

import json
import re
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


def folder_name(gpus: list[str], date: str) -> str:
    """The folder a run is committed as: ``gpu-<chip>-<YYYYMMDD>``, ``gpu-<chip>x<n>-...`` for several GPUs.

    ``gpus`` are the names PyTorch reports ("NVIDIA H200", "NVIDIA H100 80GB HBM3": chip h200, h100);
    ``date`` is ISO (``2026-12-06`` or a timestamp). No GPU: ``rehearsal-cpu-<YYYYMMDD>``, which
    :func:`latest` never reads.
    """
    day = date[:10].replace("-", "")
    if not gpus:
        return f"rehearsal-cpu-{day}"
    name = gpus[0].replace("NVIDIA", "")
    chip = re.search(r"\b([A-Z]+\d+[A-Za-z]*)\b", name)
    chip_name = chip.group(1).lower() if chip else re.sub(r"\W+", "-", name.strip()).lower()
    return f"gpu-{chip_name}{f'x{len(gpus)}' if len(gpus) > 1 else ''}-{day}"


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


def show(benchmark: str, root: Path | None = None) -> Reference | None:
    """Print the committed GPU run of ``benchmark`` (its label, then :func:`describe`) and return it;
    print :func:`missing` and return None where none is committed."""
    ref = latest(benchmark, root)
    print(missing(benchmark) if ref is None else f"{ref.label}\n{describe(ref)}")
    return ref


def describe(ref: Reference) -> str:
    """The lines a chapter quotes from one benchmark's run, as the benchmark wrote them (``summary["quoted"]``).

    Raises ``ValueError`` for a file written before the benchmarks quoted themselves (schema 1).
    """
    quoted = ref.summary.get("quoted")
    if not quoted:
        raise ValueError(f"{ref.path} has no summary['quoted'] (schema {ref.doc.get('schema')}): it was written "
                         "before the benchmarks described their own runs; run scripts/gpu_reference.sh again on "
                         "a GPU machine and commit its folder in place of this one")
    return "\n".join(quoted)


def _folder_name_here() -> str:
    """:func:`folder_name` for the GPUs this process sees, today (UTC)."""
    import datetime

    from . import hardware

    return folder_name(hardware.gpus(), datetime.datetime.now(datetime.UTC).isoformat())


if __name__ == "__main__":  # python -m course_utils.gpu_reference: the folder a run here would be filed as
    print(_folder_name_here())
