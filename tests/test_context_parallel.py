"""Context parallelism (course_utils.context_parallel): the layouts, and ring attention == full
causal attention, forward and backward, on 1 to 4 gloo ranks."""
import pytest
import torch
import workers

from course_utils import context_parallel as cp
from course_utils import launch
from course_utils.placement import cpu_plan  # the workers here use CPU tensors


@pytest.mark.parametrize("layout", cp.LAYOUTS)
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_shard_then_unshard_is_the_identity(layout, world_size):
    x = torch.arange(2 * 12 * world_size).reshape(2, 12 * world_size)
    parts = [cp.shard(x, layout, r, world_size) for r in range(world_size)]
    assert all(p.shape == (2, 12) for p in parts)
    assert torch.equal(cp.unshard(parts, layout), x)


def test_each_rank_holds_two_chunks_and_every_position_once():
    assert [cp.chunk_ids("contiguous", r, 4) for r in range(4)] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert [cp.chunk_ids("zigzag", r, 4) for r in range(4)] == [[0, 7], [1, 6], [2, 5], [3, 4]]
    assert cp.positions(16, "zigzag", 1, 4).tolist() == [2, 3, 12, 13]
    held = torch.cat([cp.positions(24, "zigzag", r, 3) for r in range(3)])
    assert sorted(held.tolist()) == list(range(24))


@pytest.mark.parametrize("world_size", [1, 2, 4, 8])
def test_work_per_rank_contiguous_grows_zigzag_is_flat(world_size):
    t = world_size
    contiguous = [cp.work("contiguous", r, t) for r in range(t)]
    zigzag = [cp.work("zigzag", r, t) for r in range(t)]
    assert contiguous == [4 * r + 3 for r in range(t)]
    assert zigzag == [2 * t + 1] * t
    assert sum(contiguous) == sum(zigzag) == (2 * t) * (2 * t + 1) // 2   # the causal triangle


def test_pairs_skip_future_keys_and_mark_the_diagonal():
    assert cp.pairs([2, 5], [2, 5]) == [(0, 0, True), (1, 0, False), (1, 1, True)]
    assert cp.pairs([0, 7], [3, 4]) == [(1, 0, False), (1, 1, False)]


def test_bad_input_gets_a_clear_error():
    with pytest.raises(ValueError, match="unknown layout 'ring'"):
        cp.chunk_ids("ring", 0, 2)
    with pytest.raises(ValueError, match="multiple of 2 x world_size"):
        cp.shard(torch.zeros(1, 10), "zigzag", 0, 4)
    q = torch.zeros(1, 1, 3, 4)
    with pytest.raises(ValueError, match="two equal chunks"):
        cp.ring_attention(q, q, q)


def test_one_rank_without_a_process_group_is_full_attention():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 8, 4, generator=g, dtype=torch.float64, requires_grad=True)
               for _ in range(3))
    import torch.nn.functional as F
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(cp.ring_attention(q, k, v), expected, atol=1e-12)


@pytest.mark.parametrize("world_size,layout", [(1, "zigzag"), (2, "contiguous"), (3, "zigzag"),
                                               (4, "contiguous"), (4, "zigzag")])
def test_ring_attention_equals_full_causal_attention(world_size, layout):
    errors = launch.run(workers.ring_attention_vs_sdpa, world_size, plan=cpu_plan(world_size), args=(layout,),
                        output="none")
    assert max(max(e) for e in errors) < 1e-12, errors   # output, dq, dk, dv on every rank


def test_ring_attention_in_float32_and_bfloat16_accumulates_in_float32():
    errors32 = launch.run(workers.ring_attention_vs_sdpa, 2, plan=cpu_plan(2), args=("zigzag", "float32"),
                          output="none")
    assert max(max(e) for e in errors32) < 1e-5
    errors16 = launch.run(workers.ring_attention_vs_sdpa, 2, plan=cpu_plan(2), args=("zigzag", "bfloat16"),
                          output="none")
    assert max(max(e) for e in errors16) < 0.05          # bf16 rounding of inputs and outputs only


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
def test_ring_attention_keeps_every_tensor_on_q_s_device(layout):
    """On a GPU rank the running log-sum-exp was created on the CPU ("Expected all tensors to be on the
    same device"); the meta device stands in for a GPU: any CPU tensor mixed in raises the same way."""
    q = torch.randn(1, 2, 8, 4, device="meta", requires_grad=True)
    out = cp.RingAttention.apply(q, q.detach(), q.detach(), layout, None)
    out.sum().backward()
    assert out.device.type == q.grad.device.type == "meta"
