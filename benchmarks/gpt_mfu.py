"""The course GPT at a real size on one device: tokens/s, TFLOP/s, MFU, memory — beside the planner.

    python benchmarks/gpt_mfu.py --quick      # CPU sizes (~20 s): checks the code path, eager only
    python benchmarks/gpt_mfu.py              # on a GPU: a 1.3B GPT (L=24, h=2048, s=2048), bf16

Trains ``course_utils.gpt.GPT`` with AdamW under ``torch.autocast`` in three ways: fp32 weights in
eager mode, then the same with each block compiled (``block.compile()``: one compiled block serves
all 24, so compiling takes seconds, not minutes), on a GPU also with fused AdamW. Attention is
``scaled_dot_product_attention(is_causal=True)``, which picks a fused (flash) kernel on a GPU in bf16.
FLOPs per token are chapter 13's 6N + 12·L·s·h (``GPTConfig.flops_per_token``); MFU is the
achieved rate over the device's dense bf16 peak (``amp.device_peak``: the datasheet for a known
GPU). The planner's one-GPU prediction (``planner.predict`` at the efficiency it is given) is
printed beside what was measured: step time, and memory against ``torch.cuda.max_memory_allocated``.
A variant that fails (e.g. no compiler for ``torch.compile``) is recorded with its error.
"""
from __future__ import annotations

import _common
from amp import device_peak
from course_utils import measure, placement, planner
from course_utils.layout import Layout
from course_utils.shape import GPTConfig

SIZES = {  # layers, hidden, heads, seq, vocab, batch (sequences)
    "tiny": (2, 64, 4, 64, 256, 2),
    "quick": (4, 256, 4, 256, 4096, 4),
    "full": (24, 2048, 16, 2048, 50304, 8),
}
PLANNER_EFFICIENCY = 0.5   # chapter 16's default: the fraction of peak the planner assumes


def train_step(model, optimizer, idx, device: str):
    """One step: forward and loss under bf16 autocast, backward, optimizer step."""
    import torch

    def step():
        with torch.autocast(device, dtype=torch.bfloat16):
            _, loss = model(idx, idx)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def measure_variant(variant: str, size: tuple, device: str, repeats: int) -> dict:
    """Median step time and peak memory of one variant ("eager", "compiled", "compiled+fused")."""
    import torch

    from course_utils.gpt import GPT, GPTConfig

    layers, hidden, heads, seq, vocab, batch = size
    config = GPTConfig(vocab_size=vocab, block_size=seq, n_layer=layers, n_head=heads, d_model=hidden)
    model = GPT(config).to(device)
    if variant.startswith("compiled"):
        for block in model.blocks:
            block.compile()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=variant.endswith("fused"))
    idx = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(0)).to(device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    timing = measure.time_fn(train_step(model, optimizer, idx, device), repeats=repeats, warmup=3, device=device)
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else None
    del model, optimizer
    if device == "cuda":
        torch.cuda.empty_cache()
    return {"variant": variant, "seconds": timing.median, "tokens": batch * seq, "peak_memory_bytes": peak}


def describe(doc: dict) -> list[str]:
    """What a chapter quotes from this file: the model, each variant's throughput and MFU, and the
    planner's predicted step beside the best measured one."""
    s = doc["summary"]
    lines = [f"GPT of {s['params'] / 1e9:,.2f}B parameters, {s['tokens_per_step']:,d} tokens per step, "
             f"{s['flops_per_token'] / 1e9:,.1f} GFLOP per token (6N + 12·L·s·h)"]
    for r in doc["results"]:
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
    return lines


def main(argv: list[str] | None = None) -> dict:
    args = _common.parser(__doc__.splitlines()[0]).parse_args(argv)
    device = placement.plan(1).device
    size = SIZES["tiny" if args.tiny else "quick" if args.quick or device != "cuda" else "full"]
    layers, hidden, heads, seq, vocab, batch = size
    shape = GPTConfig(vocab_size=vocab, block_size=seq, n_layer=layers, n_head=heads, d_model=hidden)
    peak_tflops = device_peak(device)[0].get("bf16")
    variants = ["eager", "compiled", "compiled+fused"] if device == "cuda" else ["eager"]
    rows = []
    for variant in variants:
        try:
            row = measure_variant(variant, size, device, repeats=2 if args.tiny else 5)
        except Exception as exc:  # a variant that cannot run here is a result; the others still run
            rows.append({"variant": variant, "error": f"{type(exc).__name__}: {str(exc).strip()[-300:]}"})
            print(f"{variant}: FAILED {rows[-1]['error']}", flush=True)
            continue
        row["tokens_per_s"] = row["tokens"] / row["seconds"]
        row["tflops"] = shape.flops_per_token * row["tokens_per_s"] / 1e12
        row["mfu"] = row["tflops"] / peak_tflops if peak_tflops else None
        rows.append(row)
    predicted = None
    if peak_tflops:   # the planner speaks of GPUs with a known bf16 peak
        cluster = planner.Cluster(gpus=1, gpus_per_node=1, hbm_gb=1e6, peak_tflops=peak_tflops)
        predicted = planner.predict(shape, Layout(), planner.Recipe(microbatch=batch), batch, cluster,
                                    PLANNER_EFFICIENCY)
    done = [r for r in rows if "error" not in r]
    print(f"GPT L={layers} h={hidden} heads={heads} s={seq} V={vocab}: {shape.params / 1e9:.2f}B parameters, "
          f"batch {batch} x {seq} tokens, {shape.flops_per_token / 1e9:.1f} GFLOP per token")
    if done:
        print(_common.table([{**r, "ms": r["seconds"] * 1e3, "mfu": r["mfu"] or float("nan"),
                              "GB": (r["peak_memory_bytes"] or 0) / 1e9} for r in done],
                            {"variant": "{}", "ms": "{:.1f}", "tokens_per_s": "{:,.0f}", "tflops": "{:.1f}",
                             "mfu": "{:.1%}", "GB": "{:.1f}"}))
    print(f"planner.predict, one GPU at efficiency {PLANNER_EFFICIENCY}: step {predicted.step_s * 1e3:.1f} ms, "
          f"memory {predicted.memory_gb:.1f} GB" if predicted else "planner.predict: no bf16 peak known, no prediction")
    best = min(done, key=lambda r: r["seconds"]) if done else None
    summary = {"device": device, "params": shape.params, "tokens_per_step": batch * seq,
               "flops_per_token": shape.flops_per_token, "peak_bf16_tflops": peak_tflops,
               "best_variant": best and best["variant"], "best_tokens_per_s": best and best["tokens_per_s"],
               "best_tflops": best and best["tflops"], "best_mfu": best and best["mfu"],
               "planner_efficiency": PLANNER_EFFICIENCY, "planner_step_s": predicted and predicted.step_s,
               "planner_memory_bytes": predicted and predicted.memory_gb * 1e9,
               "failed": [r["variant"] for r in rows if "error" in r]}
    _common.write("gpt_mfu", args, rows, summary, describe)
    return summary


if __name__ == "__main__":
    main()
