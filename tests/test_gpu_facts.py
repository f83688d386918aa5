"""Decisions that depend on a GPU, checked on faked ones (tests/fake_cuda.py): T4 .. H200, 1, 2, 8 GPUs."""
import pytest
from fake_cuda import CARDS, COUNTS, fake_cuda

from course_utils import gpu_facts, hardware, placement
from course_utils.gpu_facts import KNOWN, GiB

NATIVE_BF16 = {"T4": False, "V100": False, "A100": True, "L4": True, "H100": True, "H200": True}
FLOAT8 = {"T4": False, "V100": False, "A100": False, "L4": True, "H100": True, "H200": True}


@pytest.mark.parametrize("card", CARDS)
def test_bf16_supported_counts_no_emulation(monkeypatch, card):
    """torch.cuda.is_bf16_supported() says True on a T4 (emulation); the course must say False there."""
    fake_cuda(monkeypatch, card)
    assert hardware.bf16_supported("cuda") is NATIVE_BF16[card]
    assert gpu_facts.native_bf16(KNOWN[card]) is NATIVE_BF16[card]


@pytest.mark.parametrize("card", CARDS)
def test_float8_matmul_needs_sm89(card):
    assert gpu_facts.float8_matmul(KNOWN[card]) is FLOAT8[card]


def test_no_gpu_no_bf16_on_cuda(monkeypatch):
    fake_cuda(monkeypatch, "H100", count=0)
    assert gpu_facts.cuda_gpus() == [] and gpu_facts.current() is None
    assert hardware.bf16_supported("cuda") is False


@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("card", CARDS)
def test_cuda_gpus_reads_every_card(monkeypatch, card, count):
    fake_cuda(monkeypatch, card, count=count)
    found = gpu_facts.cuda_gpus()
    assert len(found) == count and {g.capability for g in found} == {KNOWN[card].capability}
    assert hardware.gpus() == [KNOWN[card].name] * count


@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("world_size", [1, 2, 4, 8])   # ranks: NCCL only with a GPU for each
def test_plan_on_faked_gpus(monkeypatch, count, world_size):
    fake_cuda(monkeypatch, "T4", count=count)
    monkeypatch.delenv("COURSE_PROFILE", raising=False)
    p = placement.plan(world_size)
    assert p.device == "cuda" and p.gpus == count
    assert p.backend == ("nccl" if 1 < world_size <= count else "gloo")
    monkeypatch.setenv("COURSE_PROFILE", "cpu")
    assert placement.plan(world_size).device == "cpu"


def test_largest_fitting_follows_free_memory():
    square = lambda n: 3 * n * n * 4   # noqa: E731  three float32 n x n matrices
    sizes = [1024, 2048, 4096, 8192, 16384]
    assert gpu_facts.largest_fitting(sizes, square, KNOWN["H100"]) == 16384
    assert gpu_facts.largest_fitting(sizes, square, KNOWN["T4"]) == 16384        # 3 GiB < 7.5 GiB
    assert gpu_facts.largest_fitting(sizes, square, KNOWN["T4"].with_free(2 * GiB)) == 8192
    with pytest.raises(ValueError, match="COURSE_PROFILE=cpu"):
        gpu_facts.largest_fitting(sizes, square, KNOWN["T4"].with_free(10 * 2**20))


def test_fake_cuda_refuses_a_missing_device(monkeypatch):
    import torch

    fake_cuda(monkeypatch, "A100", count=2)
    assert torch.cuda.get_device_capability(1) == (8, 0)
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        torch.cuda.get_device_properties("cuda:2")


def seed_model_parallel_loop():
    """Seed 001's "model parallel" loop as chapter 09 runs it: the model on the CPU, Subset batches."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    data = torch.randn(100, 10)
    model = nn.DataParallel(nn.Sequential(nn.Linear(10, 10), nn.Linear(10, 1)))
    for batch in torch.utils.data.random_split(data, [10] * 10):
        model(batch)


@pytest.mark.parametrize("count", [0, 2, 8])
def test_seed_data_parallel_error_is_what_torch_raises(monkeypatch, count):
    """Chapter 09 cell 4 expected TypeError everywhere; with 2+ GPUs DataParallel raises RuntimeError first."""
    if count:
        fake_cuda(monkeypatch, "V100", count=count)
    with pytest.raises(placement.seed_data_parallel_error(count)):
        seed_model_parallel_loop()
    assert placement.seed_data_parallel_error(1) is TypeError   # one GPU: moved to it, then the Subset


@pytest.mark.parametrize("count", COUNTS)
def test_data_parallel_device_ids(monkeypatch, count):
    fake_cuda(monkeypatch, "A100", count=count)
    monkeypatch.delenv("COURSE_PROFILE", raising=False)
    assert placement.data_parallel_device_ids(placement.plan(1)) == list(range(count))
    monkeypatch.setenv("COURSE_PROFILE", "cpu")   # chapter 09 cell 6 crashed here: DataParallel took the GPUs
    assert placement.data_parallel_device_ids(placement.plan(1)) == list(range(count))
    assert placement.data_parallel_device_ids(placement.plan(1, gpus=0)) is None


@pytest.mark.parametrize("card, free_gib, width", [(None, None, 256), ("T4", None, 8192), ("T4", 5, 4096),
                                                   ("V100", None, 8192), ("L4", None, 8192), ("H100", None, 8192),
                                                   ("RTX 3070", None, 4096), ("T4", 0.7, 1024)])
def test_amp_bench_width_fits_the_card(card, free_gib, width):
    """Chapter 04's speed table was 8192 wide on every GPU (~6 GB): too much for an 8 GB card."""
    from course_utils import measure
    from course_utils.gpu_facts import GPU

    gpu = None if card is None else GPU("GeForce RTX 3070", (8, 6), 8 * GiB) if card == "RTX 3070" else KNOWN[card]
    if free_gib is not None:
        gpu = gpu.with_free(int(free_gib * GiB))
    assert measure.amp_bench_width(gpu) == width
    if gpu is not None:
        assert measure.amp_step_bytes(width) <= gpu.free / 2
