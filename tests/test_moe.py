"""Mixture of experts (course_utils.moe) and expert parallelism (course_utils.expert_parallel)."""
import math

import pytest
import torch
import workers

from course_utils import launch
from course_utils.moe import MoE, capacity, route
from course_utils.placement import cpu_plan  # the workers here use CPU tensors


def test_capacity_is_the_factor_times_a_fair_share_rounded_up():
    assert capacity(tokens=64, n_expert=8, top_k=1, capacity_factor=1.0) == 8
    assert capacity(64, 8, 2, 1.25) == 20
    assert capacity(10, 4, 1, 1.0) == 3


def test_routing_priority_capacity_and_the_balancing_loss():
    # 4 tokens, 2 experts, top-1: every token prefers expert 0, capacity 2 -> the last two are dropped
    logits = torch.tensor([[2.0, 0.0]] * 4)
    r = route(logits, top_k=1, capacity_factor=1.0)
    assert r.token.tolist() == [0, 1] and r.expert.tolist() == [0, 0] and r.dropped == 2
    assert r.load.tolist() == [4, 0]
    p0 = math.exp(2) / (math.exp(2) + 1)
    assert r.aux_loss.item() == pytest.approx(2 * (1.0 * p0))          # E · Σ f_i P_i
    # top-2: first choices are served before second choices
    logits = torch.tensor([[1.0, 0.0, -1.0], [1.0, 0.0, -1.0], [0.0, 1.0, -1.0]])
    r = route(logits, top_k=2, capacity_factor=1.0)                     # capacity ceil(2·3/3) = 2
    kept = sorted(zip(r.expert.tolist(), r.token.tolist()))
    assert kept == [(0, 0), (0, 1), (1, 0), (1, 2)] and r.dropped == 2   # token 2's 2nd, token 1's 2nd
    assert torch.allclose(r.gate[r.token == 0].sum(), torch.tensor(1.0))  # a token's gates sum to 1


def test_a_balanced_router_has_loss_one():
    logits = torch.eye(4).repeat(2, 1) * 5                                # 8 tokens, 2 per expert
    r = route(logits, top_k=1, capacity_factor=1.0)
    assert r.dropped == 0 and r.load.tolist() == [2, 2, 2, 2]
    assert r.aux_loss.item() == pytest.approx(1.0)


def test_top_k_experts_cost_k_mlps_when_nothing_is_dropped():
    from course_utils.accounting import count_flops

    moe = MoE(d_model=16, n_expert=8, top_k=2, capacity_factor=8.0)      # capacity: every token
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(0))
    flops = count_flops(lambda: moe(x))
    mlp = 2 * 2 * 16 * 64                                                 # fc + proj, 2 FLOPs per MAC
    assert moe.dropped == 0 and flops == 10 * (2 * mlp + 2 * 16 * 8)      # k MLPs + the router


def test_one_group_equals_the_sum_of_each_tokens_experts():
    moe = MoE(d_model=8, n_expert=4, top_k=2, capacity_factor=4.0).double()
    x = torch.randn(1, 6, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    y = moe(x)[0]
    probs = moe.router(x[0]).softmax(-1)
    for n in range(6):
        g, e = probs[n].topk(2)
        want = sum(gi / g.sum() * moe.experts[ei](x[0, n]) for gi, ei in zip(g, e.tolist()))
        assert torch.allclose(y[n], want)


def test_bad_arguments_say_what_to_do():
    with pytest.raises(ValueError, match="top_k must be between 1 and n_expert=4"):
        MoE(8, 4, top_k=5)
    with pytest.raises(ValueError, match="capacity_factor must be positive"):
        MoE(8, 4, capacity_factor=0)
    with pytest.raises(ValueError, match="does not split into 2 equal groups"):
        MoE(8, 4, groups=2)(torch.zeros(3, 2, 8))


def test_a_config_with_experts_builds_through_moe_gpt_only():
    """One GPTConfig says the shape, experts included: moe_gpt reads n_expert and top_k from it (the
    same model as passing them), and the dense GPT refuses it rather than drop the experts."""
    from course_utils.gpt import GPT, GPTConfig
    from course_utils.moe import moe_gpt

    dense = GPTConfig(vocab_size=16, block_size=8, n_layer=2, n_head=2, d_model=8)
    sparse = GPTConfig(vocab_size=16, block_size=8, n_layer=2, n_head=2, d_model=8, n_expert=4, top_k=1)
    ours, theirs = moe_gpt(sparse, seed=3), moe_gpt(dense, n_expert=4, top_k=1, seed=3)
    assert ours.config == theirs.config == sparse and ours.blocks[0].mlp.top_k == 1
    assert all(torch.equal(a, b) for a, b in zip(ours.state_dict().values(), theirs.state_dict().values()))
    with pytest.raises(ValueError, match="build it with course_utils.moe.moe_gpt"):
        GPT(sparse)
    with pytest.raises(ValueError, match="n_expert must be 0 .dense. or at least top_k=2"):
        GPTConfig(n_expert=1)


@pytest.mark.parametrize("world_size,n_expert,top_k,capacity_factor",
                         [(2, 4, 1, 1.0), (2, 4, 2, 1.25), (4, 8, 2, 1.0), (3, 3, 1, 4.0)])
def test_expert_parallel_equals_one_process_with_a_group_per_rank(world_size, n_expert, top_k,
                                                                   capacity_factor):
    results = launch.run(workers.expert_parallel_vs_one_process, world_size, plan=cpu_plan(world_size),
                         args=(n_expert, top_k, capacity_factor), output="none")
    assert max(err for err, _ in results) < 1e-12, results
    if capacity_factor == 1.0:
        assert sum(dropped for _, dropped in results) > 0     # the check covers dropped tokens too


def test_expert_parallel_needs_experts_that_split_evenly():
    with pytest.raises(launch.WorkerError, match="3 experts do not split evenly over 2 ranks"):
        launch.run(workers.expert_parallel_vs_one_process, 2, plan=cpu_plan(2), args=(3, 1, 1.0), output="none")
