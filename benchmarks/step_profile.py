"""Where one training step's time goes: chapter 12's MLP step, timed and profiled.

    python benchmarks/step_profile.py --quick     # CPU sizes (~15 s)
    python benchmarks/step_profile.py             # full sizes; on a GPU, the GPU's kernels

The model and step are chapter 12's (an MLP, cross-entropy, Adam), at the sizes chapter 12 uses on
that device. Records the median step time, the gradient bytes a data-parallel all-reduce would move,
and the operators with the most self time on the device (torch.profiler over 3 steps; each row's
``self_s`` and ``calls`` are per step, ``share`` its fraction of all self time).
"""
from __future__ import annotations

import _common
from course_utils import measure, models, placement

MATMULS = {"aten::addmm", "aten::mm", "aten::bmm", "aten::matmul", "aten::linear"}


def describe(doc: dict) -> list[str]:
    """What a chapter quotes from this file: the step time, the top operators' shares, the matmuls' share."""
    s = doc["summary"]
    ops = [f"{r['op']} {r['share']:.0%}" for r in doc["results"][:5]]
    return [f"MLP {s['sizes']}, batch {s['batch']}: step {s['step_s'] * 1e3:,.2f} ms, {s['params']:,d} parameters "
            f"({s['grad_bytes'] / 2**20:,.1f} MiB of fp32 gradients)",
            f"top operators, share of {s['device']} time: {_common.joined(ops)}",
            f"matrix products: {s['matmul_share']:.0%} of it"]


def main(argv: list[str] | None = None) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    args = _common.parser(__doc__.splitlines()[0]).parse_args(argv)
    plan = placement.plan(1)
    device = plan.device
    if args.tiny:
        sizes, batch, repeats = [64, 128, 10], 32, 3
    elif args.quick:
        sizes, batch, repeats = [256, 1024, 1024, 10], 256, 5
    else:  # chapter 12's sizes on this device
        sizes, batch, repeats = plan.sizes(cpu=([256, 1024, 1024, 10], 256, 10),
                                           gpu=([1024, 8192, 8192, 1000], 4096, 20))
    torch.manual_seed(0)
    model = models.mlp(sizes, seed=0).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(batch, sizes[0], device=device)
    y = torch.randint(0, sizes[-1], (batch,), device=device)

    def step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    step_s = measure.time_fn(step, repeats=repeats, warmup=3, device=device).median
    steps = 3
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        measure.synchronize(device)
    key = "self_device_time_total" if device == "cuda" else "self_cpu_time_total"
    events = sorted(prof.key_averages(), key=lambda e: getattr(e, key), reverse=True)
    total = sum(getattr(e, key) for e in events)
    rows = [{"op": e.key, "self_s": getattr(e, key) / 1e6 / steps, "calls": e.count / steps,
             "share": getattr(e, key) / total} for e in events[:8] if getattr(e, key) > 0]
    print(f"{device}: MLP {sizes}, batch {batch}: step {step_s * 1e3:.3f} ms")
    print(_common.table([{**r, "self ms": r["self_s"] * 1e3} for r in rows],
                        {"op": "{}", "self ms": "{:.3f}", "calls": "{:.0f}", "share": "{:.1%}"}))
    summary = {"device": device, "sizes": sizes, "batch": batch, "step_s": step_s,
               "params": models.count_params(model), "grad_bytes": 4 * models.count_params(model),
               "matmul_share": sum(r["share"] for r in rows if r["op"] in MATMULS),
               "top_ops": [r["op"] for r in rows]}
    _common.write("step_profile", args, rows, summary, describe)
    return summary


if __name__ == "__main__":
    main()
