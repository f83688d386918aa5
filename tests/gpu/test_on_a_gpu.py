"""The GPU path, checked on a real GPU: what the CPU tiers can only fake (a device count) or not reach.

Skipped where PyTorch sees no CUDA GPU (every CI machine); ``scripts/gpu_reference.sh`` runs this file
first on a GPU machine and keeps its report beside the benchmarks. Each test can fail there: it runs
the course's own code on the GPU and compares with the CPU or with what the chapters claim.
"""
import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (scripts/gpu_reference.sh)")

from course_utils import launch, measure, placement, subprocesses  # noqa: E402
from course_utils.gpt import GPT, GPTConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_the_plan_uses_the_gpu_and_never_puts_two_nccl_ranks_on_one():
    gpus = torch.cuda.device_count()
    one = placement.plan(1, env={})
    assert one.device == "cuda" and one.profile == "gpu"
    two = placement.plan(2, env={})
    if gpus >= 2:
        assert two.backend == "nccl" and two.rank_devices == ("cuda:0", "cuda:1")
    else:
        assert two.backend == "gloo" and two.rank_devices == ("cpu", "cpu") and two.rank_profile == "cpu"


def nccl_all_reduce(rank, world_size):
    import torch.distributed as dist

    device = placement.rank_device()
    x = torch.full((1024,), float(rank + 1), device=device)
    dist.all_reduce(x)
    return device.type, x[0].item()


def test_nccl_all_reduce_on_one_gpu_per_rank():
    """NCCL with as many ranks as GPUs (one rank on a one-GPU machine): each rank on its own GPU."""
    n = min(torch.cuda.device_count(), 2)
    results = launch.run(nccl_all_reduce, n, backend="nccl", output="none")
    assert results == [("cuda", n * (n + 1) / 2)] * n


def test_chapter_03s_two_simulated_nodes_no_longer_share_a_gpu():
    """The crash issue 17 found: two 1-process "nodes" both took cuda:0 under NCCL. Now a node gets
    its own GPU or none (then gloo), and the job trains to the end."""
    out = subprocesses.torchrun_nodes(ROOT / "recipes" / "train_ddp.py", "--epochs", "1", nnodes=2, nproc_per_node=1,
                                 timeout_s=180)
    results = [json.loads(line.split("RESULT ", 1)[1]) for text in out for line in text.splitlines()
               if "RESULT " in line]   # torchrun prefixes each line with its rank: "[default0]:RESULT {...}"
    assert results and all(r["world_size"] == 2 for r in results)
    expected = "nccl" if torch.cuda.device_count() >= 2 else "gloo"
    assert {r["backend"] for r in results} == {expected}


def test_the_gpt_computes_the_same_on_the_gpu_as_on_the_cpu():
    torch.backends.cuda.matmul.fp32_precision = "ieee"   # TF32 off: fp32 means fp32
    config = GPTConfig(vocab_size=128, block_size=64, n_layer=2, n_head=4, d_model=64)
    idx = torch.randint(0, 128, (4, 64), generator=torch.Generator().manual_seed(0))
    cpu_logits, cpu_loss = GPT(config)(idx, idx)
    gpu_logits, gpu_loss = GPT(config).cuda()(idx.cuda(), idx.cuda())
    torch.testing.assert_close(gpu_logits.cpu(), cpu_logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(gpu_loss.cpu(), cpu_loss, rtol=1e-5, atol=1e-5)


def test_fp16_with_a_grad_scaler_trains_and_bf16_needs_none():
    torch.manual_seed(0)
    for dtype, scaled in ((torch.float16, True), (torch.bfloat16, False)):
        model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 10)).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        scaler = torch.amp.GradScaler("cuda", enabled=scaled)
        x = torch.randn(512, 256, device="cuda")
        y = (x @ torch.randn(256, 10, device="cuda")).argmax(1)     # labels a model can learn
        losses = []
        for _ in range(30):
            opt.zero_grad()
            with torch.autocast("cuda", dtype=dtype):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            losses.append(loss.item())
        assert all(map(torch.isfinite, map(torch.tensor, losses))) and losses[-1] < 0.5 * losses[0], (dtype, losses)


def test_time_fn_waits_for_the_gpu():
    """A timed matmul on the GPU takes at least its FLOPs at the datasheet's dense bf16 peak."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    seconds = measure.time_fn(lambda: a @ a, repeats=3, device="cuda").best
    assert seconds >= 2 * 8192**3 / 2000e12   # no GPU does 2 PFLOP/s dense bf16: unsynchronised timing would


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability() < (8, 9),
                    reason="float8 matmuls need compute capability 8.9+ (Ada, Hopper)")
@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_float8_on_the_gpu_equals_its_emulation(recipe):
    """Chapter 04's claim, on real float8 units: torchao's _scaled_mm == its emulation within bf16 rounding."""
    pytest.importorskip("torchao")
    import dataclasses

    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    def run(emulate):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)).cuda()
        config = dataclasses.replace(Float8LinearConfig.from_recipe_name(recipe), emulate=emulate)
        convert_to_float8_training(model, config=config)
        x = torch.randn(1024, 256, device="cuda", generator=torch.Generator("cuda").manual_seed(1))
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x)
        out.float().square().mean().backward()
        return [out.detach().float()] + [p.grad for p in model.parameters()]

    for real, emulated in zip(run(False), run(True)):
        assert ((real - emulated).norm() / emulated.norm()).item() <= 2**-7


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
