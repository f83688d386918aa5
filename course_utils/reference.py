"""GPU reference numbers: read what a real GPU run committed, label it, never invent it.

``scripts/gpu_reference.sh`` runs the benchmarks on a GPU machine and writes one folder,
``results/gpu-<device>-<YYYYMMDD>/``, with one JSON per benchmark (``benchmarks/_common.py``
describes the format: ``meta`` says which machine and when, ``summary`` the quoted numbers).
Chapters show those numbers beside the ones they measure on the reader's machine::

    GPU_AMP = reference.show("amp")     # prints where they come from and what they say; None if absent

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
    """The few lines a chapter quotes from one benchmark's run (any device; fields a run lacks are left out)."""
    return _DESCRIBE[ref.doc["benchmark"]](ref)


def _join(items: list[str]) -> str:
    return " · ".join(items) if items else "none measured"


def _size(nbytes: float) -> str:
    return f"{nbytes / 2**20:,.0f} MiB" if nbytes >= 2**20 else f"{nbytes / 2**10:,.0f} KiB"


def _describe_device(ref: Reference) -> str:
    rates = [f"{r['n']}: {r['gflops']:,.0f}" for r in ref.results if r["kind"] == "matmul"]
    names = {"device": "on the device", "host_to_device": "host→device", "device_to_host": "device→host"}
    copies = [f"{names.get(r['direction'], r['direction'])} {r['Bps'] / 1e9:,.1f}"
              for r in ref.results if r["kind"] == "copy"]
    return (f"fp32 matmul (TF32 off), GFLOP/s by n: {_join(rates)}\n"
            f"copy bandwidth, GB/s: {_join(copies)}")


def _describe_amp(ref: Reference) -> str:
    steps = {(r["model"], r["dtype"]): r["seconds"] for r in ref.results if r["kind"] == "step"}
    lines = []
    for dtype in ("bf16", "fp16"):
        ratios = [f"{model} {fp32 / steps[model, dtype]:.2f}x" for (model, d), fp32 in steps.items()
                  if d == "fp32" and (model, dtype) in steps]
        if ratios:
            lines.append(f"training step, {dtype} speed-up over fp32: {_join(ratios)}")
    best: dict[str, dict] = {}
    for r in ref.results:
        if r["kind"] == "matmul" and r["tflops"] > best.get(r["dtype"], {"tflops": -1.0})["tflops"]:
            best[r["dtype"]] = r
    rates = [f"{d} {r['tflops']:,.1f}" + (f" of {r['peak_tflops']:,.1f} peak ({r['tflops'] / r['peak_tflops']:.0%})"
                                         if r.get("peak_tflops") else "") for d, r in best.items()]
    lines.append(f"best matmul TFLOP/s: {_join(rates)}")
    lines.append(f"peak: {ref.summary.get('peak_source', 'unknown')}")
    return "\n".join(lines)


def _describe_allreduce(ref: Reference) -> str:
    largest: dict[tuple[str, int], dict] = {}
    for r in ref.results:
        key = (r["backend"], r["ranks"])
        if r["bytes"] >= largest.get(key, {"bytes": -1})["bytes"]:
            largest[key] = r
    lines = [f"{b}, {n} ranks on {r['device']}: busbw {r['busbw_Bps'] / 1e9:,.2f} GB/s at {_size(r['bytes'])} "
             f"(copy in one process {r['copy_Bps'] / 1e9:,.1f} GB/s)" for (b, n), r in sorted(largest.items())]
    if not any(b == "nccl" for b, _ in largest):
        gpus = len(ref.doc["meta"]["gpus"])
        lines.append(f"nccl: not measured ({gpus} GPU{'' if gpus == 1 else 's'}: "
                     "a GPU all-reduce needs one GPU per rank)")
    return "\n".join(lines)


def _describe_step_profile(ref: Reference) -> str:
    s = ref.summary
    ops = [f"{r['op']} {r['share']:.0%}" for r in ref.results[:5]]
    return (f"MLP {s['sizes']}, batch {s['batch']}: step {s['step_s'] * 1e3:,.2f} ms, {s['params']:,d} parameters "
            f"({s['grad_bytes'] / 2**20:,.1f} MiB of fp32 gradients)\n"
            f"top operators, share of {s['device']} time: {_join(ops)}\n"
            f"matrix products: {s['matmul_share']:.0%} of it")


def _describe_gpt_mfu(ref: Reference) -> str:
    s = ref.summary
    lines = [f"GPT of {s['params'] / 1e9:,.2f}B parameters, {s['tokens_per_step']:,d} tokens per step, "
             f"{s['flops_per_token'] / 1e9:,.1f} GFLOP per token (6N + 12·L·s·h)"]
    for r in ref.results:
        if "error" in r:
            lines.append(f"{r['variant']}: failed ({r['error'][:80]})")
            continue
        mfu = f", MFU {r['mfu']:.0%}" if r.get("mfu") is not None else ""
        memory = f", {r['peak_memory_bytes'] / 1e9:,.1f} GB peak" if r.get("peak_memory_bytes") else ""
        lines.append(f"{r['variant']}: {r['tokens_per_s']:,.0f} tokens/s, {r['tflops']:,.1f} TFLOP/s{mfu}{memory}")
    if s.get("best_tokens_per_s") and s.get("planner_step_s"):
        measured_s = s["tokens_per_step"] / s["best_tokens_per_s"]
        lines.append(f"planner, one GPU at {s['planner_efficiency']:.0%} of peak: "
                     f"step {s['planner_step_s'] * 1e3:,.1f} ms (measured best: {measured_s * 1e3:,.1f} ms), "
                     f"{s['planner_memory_bytes'] / 1e9:,.1f} GB")
    else:
        lines.append("planner: no prediction (no bf16 peak known for this device) or nothing measured")
    return "\n".join(lines)


_DESCRIBE = {"device": _describe_device, "amp": _describe_amp, "allreduce": _describe_allreduce,
             "step_profile": _describe_step_profile, "gpt_mfu": _describe_gpt_mfu}


def _folder_name_here() -> str:
    """:func:`folder_name` for the GPUs this process sees, today (UTC)."""
    import datetime

    from . import hardware

    return folder_name(hardware.gpus(), datetime.datetime.now(datetime.UTC).isoformat())


if __name__ == "__main__":  # python -m course_utils.reference: the folder a run here would be filed as
    print(_folder_name_here())
