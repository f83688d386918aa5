"""The Llama-style model (course_utils.llama) under tensor, context and pipeline parallelism == one
process on 2 gloo ranks: the plans for SwiGLU and grouped-query attention, ring attention with K/V at
their own head count and RoPE at each rank's true positions, and a pipeline stage without a position
table. Each test names the planted bug it catches."""
from types import SimpleNamespace

import pytest
import workers
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel

from course_utils import composed, launch, tensor_parallel
from course_utils.llama import Llama
from course_utils.placement import cpu_plan  # the workers here use CPU tensors
from course_utils.shape import GPTConfig

LLAMA = GPTConfig(**workers.LLAMA)
NAMES = sorted(n for n, _ in Llama(LLAMA).named_parameters())


def check(results):
    """Every rank holds every parameter, trained like one process; losses equal one process's."""
    from test_composed import check as composed_check
    composed_check(results, NAMES)


def test_llama_plan_splits_gate_and_up_by_columns_down_by_rows():
    """Fails if the plan keeps the GPT's names (``mlp.fc``/``mlp.proj``: nothing of SwiGLU split)."""
    for sp in (False, True):
        plan = tensor_parallel.llama_block_plan(sp)
        assert all(isinstance(plan[k], ColwiseParallel) for k in ("attn.q", "attn.k", "attn.v", "mlp.gate", "mlp.up"))
        assert all(isinstance(plan[k], RowwiseParallel) for k in ("attn.proj", "mlp.down"))
        assert not {"mlp.fc", "mlp.proj"} & set(plan)
        assert all(isinstance(plan.get(k), SequenceParallel) == sp for k in ("ln_1", "ln_2"))


def test_k_v_heads_that_do_not_split_say_to_pick_t_dividing_n_kv_head():
    """4 query heads split over 4 ranks, but 2 K/V heads do not. Fails without the K/V check (the
    model would split k and v unevenly, or fail deep inside DTensor)."""
    mesh = SimpleNamespace(size=lambda: 4)
    message = "n_kv_head=2 K/V heads do not split over 4 ranks.*pick t dividing n_kv_head=2"
    with pytest.raises(ValueError, match=message):
        tensor_parallel.parallelize_gpt(Llama(LLAMA), mesh)


@pytest.mark.parametrize("sequence_parallel", [False, True])
def test_tensor_parallel_llama_equals_one_process(sequence_parallel):
    """TP 2, with and without sequence parallelism (RMSNorm on DTensors): two SGD steps == one process;
    without SP two all-reduces per block each way (gate and up share one). Fails with the GPT's plan
    or a planted wrong plan (next test)."""
    results = launch.run(workers.composed_vs_one_process, 2, plan=cpu_plan(2), args=(composed.Layout(tp=2),),
                         kwargs={"llama": True, "sequence_parallel": sequence_parallel}, output="none")
    check(results)
    talk = results[0][3]["tp"]
    if sequence_parallel:
        assert set(talk) == {"all_gather", "reduce_scatter"}
    else:
        assert talk == ["all_reduce"] * (4 * LLAMA.n_layer)     # 2 forward + 2 backward per block


def test_a_wrong_llama_plan_does_not_pass():
    """Planted wrong plans: SwiGLU's down split by columns fails on its shapes; k and v left whole on
    every rank (attention's input handed over as a plain tensor, so nothing raises) trains silently
    wrong — each rank's query heads read the wrong K/V heads — and the equality check catches it."""
    with pytest.raises(launch.WorkerError):
        launch.run(workers.composed_vs_one_process, 2, plan=cpu_plan(2), args=(composed.Layout(tp=2),),
                   kwargs={"llama": True, "planted": "down_colwise"}, output="none")
    results = launch.run(workers.composed_vs_one_process, 2, plan=cpu_plan(2), args=(composed.Layout(tp=2),),
                         kwargs={"llama": True, "planted": "kv_whole"}, output="none")
    with pytest.raises(AssertionError):
        check(results)
    assert min(diff for _, diff, *_ in results) > 1e-3


@pytest.mark.parametrize("layout", [composed.Layout(pp=2), composed.Layout(pp=2, tp=2)], ids=str)
def test_pipeline_of_a_llama_equals_one_process(layout):
    """PP 2 (1F1B) of the Llama, alone and with TP 2 inside each stage: stages without a position
    table, each block given the positions. Fails on the old stage (it reached for ``pos_emb``)."""
    check(launch.run(workers.composed_vs_one_process, layout.world_size, plan=cpu_plan(layout.world_size),
                     args=(layout, "Schedule1F1B"), kwargs={"llama": True}, output="none"))


def test_ring_attention_with_grouped_query_attention_equals_sdpa():
    """K/V at 1 head of 3, in float64: output and gradients == SDPA(enable_gqa). Fails if dK/dV are
    not summed over the query heads each K/V head serves."""
    errors = launch.run(workers.ring_attention_vs_sdpa, 2, plan=cpu_plan(2), args=("zigzag", "float64", 1),
                        output="none")
    assert max(max(e) for e in errors) < 1e-12, errors


@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
def test_context_parallel_llama_equals_one_process_and_sends_kv_at_g_heads(layout):
    """The whole Llama (float64) with each sequence split over 2 ranks == one process, loss and every
    gradient. Each rank's ring messages are counted: K/V at g = 2 heads cost g/a = 1/2 of the bytes of
    multi-head K/V (a = 4), and equal n_layer · (t−1) hops of K and V forward, K, V, dK, dV on t−1 hops
    plus dK, dV home backward. Fails if the ring expands K/V to a heads before sending."""
    gqa = launch.run(workers.llama_context_parallel_vs_one_process, 2, plan=cpu_plan(2), args=(layout, 2),
                     output="none")
    mha = launch.run(workers.llama_context_parallel_vs_one_process, 2, plan=cpu_plan(2), args=(layout, 4),
                     output="none")
    assert max(loss for loss, _, _ in gqa + mha) < 1e-12 and max(grad for _, grad, _ in gqa + mha) < 1e-12
    t, g, a, B, hd = 2, LLAMA.kv_heads, LLAMA.n_head, 2, LLAMA.head_dim
    kv = 2 * B * g * (LLAMA.block_size // t) * hd * 8            # K and V of one rank, float64
    for (_, _, sent), (_, _, sent_mha) in zip(gqa, mha):
        assert sent == {"forward": LLAMA.n_layer * (t - 1) * kv, "backward": LLAMA.n_layer * (2 * (t - 1) + 1) * kv}
        assert all(sent[p] * a == sent_mha[p] * g for p in sent)


def test_rope_at_each_ranks_true_positions_is_what_makes_it_equal():
    """Planted: every rank rotates its q and k as if its tokens were 0..T_local-1 (the default)."""
    wrong = launch.run(workers.llama_context_parallel_vs_one_process, 2, plan=cpu_plan(2),
                       kwargs={"true_positions": False}, output="none")
    assert min(grad for _, grad, _ in wrong) > 1e-6
