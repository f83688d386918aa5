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
