"""course_utils.planner: the memory and time formulas on hand-computed cases, impossible layouts
rejected with their reason, and the predictions against Megatron-LM's published Table 1."""
from dataclasses import replace

import pytest

from course_utils import accounting, costmodel, planner
from course_utils.gemm_efficiency import GemmEfficiency
from course_utils.layout import Layout
from course_utils.planner import Recipe
from course_utils.shape import GPTConfig

SMALL = GPTConfig(vocab_size=256, block_size=128, n_layer=2, n_head=4, d_model=64)
LLAMA_SMALL = GPTConfig(vocab_size=256, block_size=128, n_layer=2, n_head=8, d_model=64, n_kv_head=2, bias=False,
                        mlp="swiglu", ffn_hidden=192, norm="rmsnorm", positions="rope")


def test_memory_of_a_small_layout_by_hand():
    layout = Layout(dp=2, tp=2)
    got = planner.memory(SMALL, layout, Recipe(zero=1, microbatch=2))
    # parameters per GPU: (2 blocks of 12·64² + 13·64 = 49,984, embedding and head 2·256·64, positions
    # 128·64, final LayerNorm 2·64) / tp 2
    params = (2 * 49_984 + 2 * 256 * 64 + 128 * 64 + 2 * 64) / 2
    assert params == 70_528 == planner.params_per_gpu(SMALL, layout)
    assert got["weights"] == got["gradients"] == 2 * params          # bf16
    assert got["optimizer"] == 12 * params / 2                       # fp32 master + 2 moments, ZeRO-1 over dp 2
    # a GPT-2 block keeps 16 values per token (flash, no dropout): 4h outside the TP regions (the two
    # LayerNorms' inputs and outputs; ÷ t with SP), 12h inside (q, k, v, attention output, GELU in and out)
    assert got["activations"] == 2 * 2 * 128 * 2 * (4 * 64 / 2 + 12 * 64 / 2)    # L · 2 bytes · s·b · values
    # the loss's peak, split by vocabulary over tp = 2: fp32 log-probabilities kept, and beside them the three
    # fp32 tensors of loss_parallel's backward (one process: two, test_recomputation_and_...): 4·4·N·V / t
    assert got["logits"] == got["logits gradient"] / 3 == 4 * 128 * 2 * 256 / 2
    assert got["allocator"] == 0                                     # live bytes by default


def test_recomputation_and_materialised_scores_change_the_activations():
    plain = planner.memory(SMALL, Layout(), Recipe(flash=False))["activations"]
    assert plain == 2 * (128 * 64 * 32 + 2 * 4 * 128 * 128)          # 32·sbh and the softmax output 2·as²b
    dropout = planner.memory(SMALL, Layout(), Recipe(flash=False, dropout=True))["activations"]
    assert dropout == 2 * (128 * 64 * 34 + 5 * 4 * 128 * 128)        # Korthikanti: s·b·h·(34 + 5as/h)
    # full recomputation keeps the layers' inputs; the peak is then the loss's backward (3·4·s·V bytes)
    # or one layer's recomputation (2·s·32h bytes), whichever is larger
    full = planner.memory(SMALL, Layout(), Recipe(recompute="full"))
    assert full["activations"] == 2 * 2 * 128 * 64 and full["logits"] + full["logits gradient"] == 12 * 128 * 256
    narrow = planner.memory(replace(SMALL, vocab_size=8), Layout(), Recipe(recompute="full"))
    assert narrow["activations"] == 2 * 2 * 128 * 64 + 128 * 64 * 32 and narrow["logits"] == 0


def test_tensor_parallelism_without_sequence_parallelism_keeps_copies_outside_its_regions():
    """Korthikanti et al. 2022, Table 2 (GPT-2's block, dropout, scores materialised), per layer at t = 4:
    with SP s·b·h·34/t + 5·a·s²·b/t, without it s·b·h·(10 + 24/t) + 5·a·s²·b/t. Fails on the old
    planner, which always assumed SP (34/t)."""
    model = GPTConfig(vocab_size=256, block_size=128, n_layer=2, n_head=8, d_model=64)
    s, b, h, a, t = 128, 1, 64, 8, 4
    korthikanti = Recipe(flash=False, dropout=True)
    with_sp = planner.layer_activations(model, Layout(tp=4), korthikanti)
    without = planner.layer_activations(model, Layout(tp=4), replace(korthikanti, sequence_parallel=False))
    assert with_sp == s * b * h * 34 / t + 5 * a * s * s * b / t
    assert without == s * b * h * (10 + 24 / t) + 5 * a * s * s * b / t
    # flash, no dropout: 2 bytes × (4h outside, whole on every rank, + 12h inside ÷ t)
    flash = planner.layer_activations(model, Layout(tp=4), Recipe(sequence_parallel=False))
    assert flash == 2 * s * b * (4 * h + 12 * h / t)
    # full recomputation keeps each layer's input: 2·s·b·h, split by t only with SP
    narrow = replace(model, vocab_size=8)       # a small loss: the peak is a layer's recomputation
    kept = {sp: planner.memory(narrow, Layout(tp=4), Recipe(recompute="full", sequence_parallel=sp))["activations"]
            for sp in (True, False)}
    assert kept[True] == 2 * 2 * s * b * h / t + 2 * s * b * 16 * h / t
    assert kept[False] == 2 * 2 * s * b * h + flash


def test_a_llama_block_keeps_its_own_values():
    """GQA (2 K/V heads of 8 for 8 query heads), SwiGLU of width 192, RMSNorm, RoPE, at tp = 2, cp = 2:
    outside 4h = 256 (two norms' inputs and outputs), inside q 64 + k 16 + v 16 + attention output 64
    + gate, up, silu(gate), product 4 · 192 = 928 (accounting.block_saved_values' list). Fails on the old
    planner (34·sbh/t for every shape)."""
    s, b = 128, 2
    got = planner.layer_activations(LLAMA_SMALL, Layout(tp=2, cp=2), Recipe(microbatch=b))
    assert got == 2 * s * b * (256 / 2 + (64 + 16 + 16 + 64 + 4 * 192) / 2) / 2


def test_selective_recomputation_drops_the_scores_and_nothing_with_flash():
    """Korthikanti §4.2: recomputing the attention core leaves s·b·h·34/t (with dropout, SP). With flash
    the kernel keeps no scores: selective changes neither memory nor time. Without flash it costs one
    more forward of the attention core, 4·L·s·a·d FLOPs per token. (The old planner refused "selective".)"""
    model, layout, t = GPTConfig(vocab_size=256, block_size=128, n_layer=2, n_head=8, d_model=64), Layout(tp=4), 4
    old_style = Recipe(flash=False, dropout=True, recompute="selective")
    assert planner.layer_activations(model, layout, old_style) == 128 * 64 * 34 / t
    cluster = planner.Cluster(gpus=4)
    for flash in (True, False):
        none, sel = (planner.predict(model, layout, Recipe(flash=flash, recompute=r), 8, cluster)
                     for r in ("none", "selective"))
        assert sel.reason is None
        extra = 0 if flash else 4 * 2 * 128 * 8 * 8 * 8 * 128 / 4 / (0.5 * 989e12)   # 4·L·s·a·d · B·s / n
        assert sel.time["compute"] == pytest.approx(none.time["compute"] + extra)
        assert (sel.memory["activations"] == none.memory["activations"]) == flash
def test_zero_stages_shard_more_and_more_state():
    by_stage = [sum(v for k, v in planner.memory(SMALL, Layout(dp=8), Recipe(zero=z)).items()
                    if k in ("weights", "gradients", "optimizer")) for z in range(4)]
    params = 2 * 49_984 + 2 * 256 * 64 + 128 * 64 + 2 * 64
    assert by_stage == [16 * params, (4 + 12 / 8) * params, (2 + 14 / 8) * params, 16 / 8 * params]


def test_a_pipeline_stage_holds_its_blocks_and_one_end():
    layout = Layout(tp=2, pp=2)
    assert planner.params_per_gpu(SMALL, layout) == (49_984 + 256 * 64 + 128 * 64) / 2


def test_context_parallel_splits_activations_and_keeps_the_weights():
    """cp ranks hold s/cp tokens of each sequence and the same weights (ZeRO shards over dp·cp)."""
    one, two = (planner.memory(SMALL, Layout(dp=2, cp=cp), Recipe(zero=1)) for cp in (1, 2))
    assert two["activations"] == one["activations"] / 2 and two["logits"] == one["logits"] / 2
    assert two["weights"] == one["weights"] and two["optimizer"] == one["optimizer"] / 2


def test_experts_count_split_over_ep_and_route_top_k():
    h, moe = 64, GPTConfig(vocab_size=256, block_size=128, n_layer=2, n_head=4, d_model=64, n_expert=4, top_k=2)
    expert, attention = 8 * h * h + 5 * h, 4 * h * h + 8 * h
    assert moe.block_params() == (attention + 4 * h, 4 * expert)          # router h·E with the dense part
    assert moe.params == SMALL.params + 2 * (3 * expert + 4 * h)
    assert moe.flops_per_token == SMALL.flops_per_token + 6 * 2 * (8 * h * h + 4 * h)   # a 2nd expert, router
    dense, experts = planner.stage_params(moe, Layout(dp=2, ep=2))
    assert experts == 2 * 4 * expert / 2 and dense == 2 * (attention + 4 * h) + 2 * 256 * h + 128 * h + 2 * h
    kept = planner.memory(moe, Layout(), Recipe())["activations"]
    assert kept == 2 * 2 * 128 * (4 * h + 4 * h + 2 * 8 * h)             # the MLP's 2·4h values per expert visited
    split = planner.memory(moe, Layout(dp=4, ep=2), Recipe(zero=1))["optimizer"]
    assert split == 12 * (dense / 4 + experts / 2)                         # experts' replicas: dp / ep


def test_new_dimensions_cost_time_only_when_used():
    cluster = planner.Cluster(gpus=4)
    moe = GPTConfig(vocab_size=256, block_size=128, n_layer=2, n_head=4, d_model=64, n_expert=4)
    plain = planner.step_time(moe, Layout(dp=4), Recipe(), 8, cluster, 0.5)
    assert plain["context parallel"] == plain["expert parallel"] == 0
    both = planner.step_time(moe, Layout(dp=2, cp=2, ep=2), Recipe(), 8, cluster, 0.5)
    assert both["context parallel"] > 0 and both["expert parallel"] > 0


def test_zero3_gathers_the_weights_for_every_microbatch():
    cluster = planner.Cluster(gpus=2)
    by_m = [planner.step_time(SMALL, Layout(dp=2), Recipe(zero=z), 2 * m, cluster, 0.5)["data parallel"]
            for z, m in ((1, 1), (3, 1), (3, 4))]
    assert by_m[1] == pytest.approx(1.5 * by_m[0]) and by_m[2] == pytest.approx(4.5 * by_m[0])


def test_a_long_sequence_needs_its_tokens_split():
    """128k tokens of a 7B GPT on 64 H100s: without recomputation a GPU holds a sequence's
    activations only when tp · cp >= 8 splits them; the fastest layout uses context parallelism."""
    long = GPTConfig(vocab_size=32_000, block_size=131_072, n_layer=32, n_head=32, d_model=4096)
    fits = [r for r in planner.plan(long, 64, planner.Cluster(gpus=64, **planner.H100)) if r.reason is None]
    kept = [r for r in fits if r.recipe.recompute == "none"]
    assert kept and all(r.layout.tp * r.layout.cp >= 8 for r in kept)
    assert fits[0].layout.cp > 1 and fits[0].recipe.recompute == "none"


def test_one_gpu_is_all_compute_and_the_bubble_follows_the_formula():
    cluster = planner.Cluster(gpus=1)
    time = planner.step_time(SMALL, Layout(), Recipe(), 8, cluster, efficiency=0.5)
    flops = accounting.train_flops_per_token(256, 2, 64, 128) * 8 * 128
    assert time["compute"] == pytest.approx(flops / (0.5 * 989e12))
    assert time["bubble"] == time["tensor parallel"] == time["data parallel"] == time["pipeline"] == 0
    piped = planner.step_time(SMALL, Layout(pp=2), Recipe(), 8, planner.Cluster(gpus=2), efficiency=0.5)
    assert piped["bubble"] == pytest.approx(piped["compute"] * (2 - 1) / 8)   # (p - 1)/m, m = 8


@pytest.mark.parametrize("layout, recipe, reason", [
    (Layout(dp=3), Recipe(), "not the cluster's 8 GPUs"),
    (Layout(tp=8), Recipe(), "4 heads do not split over tp=8"),
    (Layout(dp=4, pp=2), Recipe(microbatch=1), None),
    (Layout(pp=8), Recipe(), "6 layers cannot fill pp=8 stages"),
    (Layout(dp=2, pp=4), Recipe(), None),                # uneven: 2, 2, 1, 1 layers (priced as 2 each)
    (Layout(dp=4, pp=2), Recipe(microbatch=4), "microbatches cannot fill pp=2"),
    (Layout(dp=2, cp=2, pp=2), Recipe(), None),
    (Layout(dp=4, cp=4), Recipe(), "not the cluster's 8 GPUs"),
    (Layout(dp=8, ep=2), Recipe(), "needs experts"),
    (Layout(dp=8, replicate=2), Recipe(), "does not model HSDP"),
    (Layout(dp=8), Recipe(zero=4), "zero one of 0-3"),
])
def test_impossible_layouts_say_why(layout, recipe, reason):
    model = GPTConfig(vocab_size=256, block_size=128, n_layer=6, n_head=4, d_model=64)
    got = planner.predict(model, layout, recipe, 16, planner.Cluster(gpus=8))
    assert got.reason is None if reason is None else reason in got.reason


def test_a_70b_model_fits_no_layout_of_eight_gpus_and_some_of_thirty_two():
    """16 bytes per parameter: 70B parameters need 1.1 TB of model state, more than 8 × 80 GB."""
    llama70 = GPTConfig(vocab_size=32_000, block_size=4096, n_layer=80, n_head=64, d_model=8192)
    eight = planner.plan(llama70, 64, planner.Cluster(gpus=8, **planner.H100))
    assert eight and all(r.reason for r in eight)
    assert all(r.reason.startswith("needs ") for r in eight if r.layout.tp * r.layout.pp == 8)
    best = planner.plan(llama70, 64, planner.Cluster(gpus=32, **planner.H100))[0]
    assert best.reason is None and best.memory_gb <= 80 and 0.2 < best.mfu < 0.5


def test_one_layout_and_one_shape_serve_the_planner_and_the_model():
    """The planner takes composed's Layout and gpt's GPTConfig themselves: no second vocabulary."""
    from course_utils import gpt, layout

    assert planner.Layout is layout.Layout and planner.GPTConfig is gpt.GPTConfig
    ranked = planner.plan(SMALL, 16, planner.Cluster(gpus=4))
    assert {type(r.layout) for r in ranked} == {Layout} and {type(r.recipe) for r in ranked} == {Recipe}
    # every (layout, recipe) once: 4 GPUs give 10 (dp, tp, pp, cp) factorisations, × 4 ZeRO × 2 × 4 sizes
    assert len({(r.layout, r.recipe) for r in ranked}) == len(ranked) == 10 * 4 * 2 * 4


def test_the_planner_and_the_shapes_import_no_torch():
    """Pure arithmetic: a planner question must not pay for (or need) PyTorch."""
    import subprocess
    import sys

    code = ("import sys; from course_utils import layout, planner, shape; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- the traffic of context parallelism, tensor parallelism without SP -------------------------------

def test_context_parallel_passes_the_kv_heads_in_3c_minus_2_messages_per_layer():
    """K and V of g·d (not h) per token: Llama-small's 2 K/V heads of 8 → kv = 2·s·b·16·2 bytes per
    sequence, sent in chunks of kv/c; per layer and microbatch c − 1 forward, 2(c − 1) + 1 backward (dK,
    dV one hop more home, as chapter 14 counts): 4 at c = 2, 5 with full recomputation; 3(c−1)+1 = 22 at
    c = 8. The old planner charged 2 (3) all-gathers of 2·s·b·h·2 bytes, then 3 (4) all-gathers."""
    assert [planner.cp_ring_messages(c) for c in (1, 2, 8)] == [0, 4, 22]
    assert planner.cp_ring_messages(8, "full") == 29
    cluster = planner.Cluster(gpus=2)
    one = cluster.alpha_s + 2 * 128 * 1 * 2 * 8 * 2 / 2 / (cluster.nvlink_gbps * 1e9)    # α + (kv/c)·β
    layer_passes = 2 * 4                                                  # L = 2 layers × m = 4 microbatches
    for recompute, count in (("none", 4), ("full", 5)):
        got = planner.step_time(LLAMA_SMALL, Layout(cp=2), Recipe(recompute=recompute), 4, cluster, 0.5)
        assert got["context parallel"] == pytest.approx(layer_passes * count * one)
    # multi-head attention (g = a): the same count, K and V of h per token
    mha = planner.step_time(SMALL, Layout(cp=2), Recipe(), 4, cluster, 0.5)["context parallel"]
    assert mha == pytest.approx(layer_passes * 4 * (cluster.alpha_s + 2 * 128 * 64 * 2 / 2 / (450e9)))


def test_tensor_parallel_time_is_the_same_with_and_without_sequence_parallelism():
    """Without SP, 2 all-reduces forward and 2 backward per layer; with SP, 4 all-gather/reduce-scatter
    pairs of the same bytes and messages: the same seconds (a planted SP = all-gathers only would halve it)."""
    cluster = planner.Cluster(gpus=2)
    one = costmodel.collective_time("all_reduce", 2 * (2 - 1) / 2 * 128 * 64 * 2, 2, cluster.alpha_s, 1 / 450e9)
    for sp in (True, False):
        got = planner.step_time(SMALL, Layout(tp=2), Recipe(sequence_parallel=sp), 4, cluster, 0.5)
        assert got["tensor parallel"] == pytest.approx(2 * 4 * 4 * one)


# -- memory per pipeline stage, pipeline × ZeRO-3, reserved vs live ----------------------------------

def test_every_stage_is_counted_and_the_logits_live_on_the_last():
    """pp = 2, 1F1B: the first stage holds 2 microbatches of its layer and the embeddings; the last one
    microbatch, the head, the final norm and the loss's fp32 logits and their gradient. With a large
    vocabulary the last stage is the busiest. (The old planner put the logits on the first stage.)"""
    model = GPTConfig(vocab_size=8192, block_size=128, n_layer=2, n_head=4, d_model=64)
    layout, recipe = Layout(pp=2), Recipe(zero=0, microbatch=1)
    first, last = (planner.stage_memory(model, layout, recipe, i) for i in (0, 1))
    layer = 2 * 128 * 16 * 64                                              # 2 bytes · s · 16h
    assert first["activations"] == 2 * layer and last["activations"] == layer
    assert first["logits"] == first["logits gradient"] == 0
    assert last["logits"] == last["logits gradient"] / 2 == 4 * 128 * 8192
    assert planner.stage_params(model, layout, 0) == (49_984 + 8192 * 64 + 128 * 64, 0)
    assert planner.stage_params(model, layout, 1) == (49_984 + 8192 * 64 + 2 * 64, 0)
    busiest = planner.memory(model, layout, recipe)
    assert busiest == last and sum(last.values()) > sum(first.values())


def test_stages_add_up_to_the_model():
    """Every parameter on exactly one stage: the stages' parameters × tp add up to GPTConfig.params."""
    for model in (SMALL, LLAMA_SMALL, GPTConfig(vocab_size=256, block_size=128, n_layer=4, n_head=4, d_model=64)):
        for pp in (1, 2):
            if model.n_layer % pp == 0:
                layout = Layout(pp=pp, tp=2)
                assert sum(sum(planner.stage_params(model, layout, i)) for i in range(pp)) * 2 == model.params


def test_zero3_under_a_pipeline_keeps_the_stage_whole():
    """FSDP under a pipeline: the stage is gathered for the whole schedule and its gradients accumulate
    unsharded, in FSDP2's fp32 reduce dtype: bf16 weights and fp32 gradients whole, the optimizer state
    ÷ dp; one all-gather per step."""
    model = GPTConfig(vocab_size=256, block_size=128, n_layer=4, n_head=4, d_model=64)
    layout = Layout(dp=2, pp=2)
    stage = sum(planner.stage_params(model, layout, 0))
    got = planner.stage_memory(model, layout, Recipe(zero=3), 0)
    assert got["weights"] == 2 * stage and got["gradients"] == 4 * stage and got["optimizer"] == 12 * stage / 2
    flat = planner.stage_memory(model, Layout(dp=4), Recipe(zero=3), 0)      # pp = 1: sharded as before
    assert flat["weights"] == 2 * sum(planner.stage_params(model, Layout(dp=4))) / 4
    cluster = planner.Cluster(gpus=4)
    times = {z: planner.step_time(model, layout, Recipe(zero=z), 16, cluster, 0.5)["data parallel"] for z in (1, 3)}
    assert times[3] == pytest.approx(times[1])       # one reduce-scatter + one all-gather = one all-reduce


def test_allocator_overhead_adds_the_reserved_bytes_as_a_part():
    live = planner.memory(SMALL, Layout(dp=2), Recipe())
    reserved = planner.memory(SMALL, Layout(dp=2), Recipe(), allocator_overhead=1.25)
    assert reserved["allocator"] == pytest.approx(0.25 * sum(live.values()))
    assert sum(reserved.values()) == pytest.approx(1.25 * sum(live.values()))
    with pytest.raises(ValueError, match="reserved ÷ live"):
        planner.memory(SMALL, Layout(), Recipe(), allocator_overhead=0.9)


# -- overlap ---------------------------------------------------------------------------------------

OVERLAP_MODEL = GPTConfig(vocab_size=256, block_size=128, n_layer=4, n_head=4, d_model=64)


def test_without_overlap_every_transfer_is_charged_as_before():
    """overlap=False: dp, tp, pp exactly as the planner charged them before the overlap model (the
    formulas written out here), on dp 2 × tp 2 × pp 2; with overlap no part grows, compute and tp stay."""
    cluster = planner.Cluster(gpus=8)
    recipe = Recipe(zero=1, microbatch=1)
    got = planner.step_time(OVERLAP_MODEL, Layout(dp=2, tp=2, pp=2), recipe, 8, cluster, 0.5)
    m, s, h, alpha = 4, 128, 64, cluster.alpha_s
    ring = lambda nbytes, n, gbps: costmodel.collective_time(  # noqa: E731
        "all_reduce", 2 * (n - 1) / n * nbytes, n, alpha, 1 / (gbps * 1e9))
    dense = sum(planner.stage_params(OVERLAP_MODEL, Layout(dp=2, tp=2, pp=2)))
    assert got["tensor parallel"] == pytest.approx(2 * m * 4 * ring(s * h * 2, 2, 450))
    assert got["data parallel"] == pytest.approx(ring(2 * dense, 2, 450))
    assert got["pipeline"] == pytest.approx(2 * m * (alpha + s * h * 2 / 2 / 50e9))
    assert got["compute"] == pytest.approx(OVERLAP_MODEL.flops_per_token * 8 * s / 8 / (0.5 * 989e12))
    hidden = planner.step_time(OVERLAP_MODEL, Layout(dp=2, tp=2, pp=2), replace(recipe, overlap=True), 8, cluster, 0.5)
    assert all(hidden[k] <= got[k] for k in got)
    assert all(hidden[k] == got[k] for k in ("compute", "bubble", "tensor parallel", "expert parallel"))


def test_a_transfer_shorter_than_its_compute_hides():
    """Fast links: the CP ring's step transfers are shorter than the attention step → 0 exposed; the
    gradient all-reduce hides except its last bucket (one layer's share); the pipeline's sends except
    the first forward and the last backward one."""
    cluster = planner.Cluster(gpus=8, alpha_s=0.0, nvlink_gbps=1e6, ib_gbps=1e6)
    layout, recipe = Layout(dp=2, cp=2, pp=2), Recipe(zero=1, overlap=True)
    plain = planner.step_time(OVERLAP_MODEL, layout, replace(recipe, overlap=False), 8, cluster, 0.5)
    got = planner.step_time(OVERLAP_MODEL, layout, recipe, 8, cluster, 0.5)
    # every ring message hides behind a step's attention but dK, dV's last hop home: 1 of 4 at c = 2
    assert plain["context parallel"] > 0 and got["context parallel"] == pytest.approx(plain["context parallel"] / 4)
    assert got["data parallel"] == pytest.approx(plain["data parallel"] / 2)     # 2 layers per stage: 1 bucket of 2
    assert got["pipeline"] == pytest.approx(plain["pipeline"] / 4)               # m = 4: 2 of 8 sends


def test_a_transfer_longer_than_its_compute_exposes_the_difference():
    """Each ring step's transfer τ exceeds the step's attention compute a: exactly τ − a is exposed, for
    each of (c − 1) steps × 3 all-gather equivalents × layers × microbatches. Slow links: the gradient
    all-reduce X exposes X − (ℓ − 1)·B (ℓ = 2 layers per stage, B a layer's backward); the pipeline's
    sends τ' each beyond the stage's compute of a microbatch, and the first and last whole."""
    layout, recipe = Layout(dp=2, cp=2, pp=2), Recipe(zero=1, overlap=True)
    ring_link = planner.Cluster(gpus=8, alpha_s=0.0, nvlink_gbps=2700)        # τ ≈ 3a: the difference shows
    got = planner.step_time(OVERLAP_MODEL, layout, recipe, 8, ring_link, 0.5)
    tau = 2 * 64 * 64 * 2 / 2.7e12              # one ring step: K and V of half a sequence, 2·64·64·2 bytes
    # its attention compute: scores and weighted v of 64 queries × 64 keys × 16 dims, 4 heads, 2 FLOPs each
    a = 2 * 2 * 64 * 64 * 16 * 4 / (0.5 * 989e12)
    assert 2 * a < tau < 4 * a
    # 2 layers × m = 4 × (3 hidden messages' excess + the last hop home)
    assert got["context parallel"] == pytest.approx(2 * 4 * (3 * (tau - a) + tau))
    layer = planner.layer_seconds(OVERLAP_MODEL, layout, recipe, ring_link, 0.5)
    assert layer["attention step"] == pytest.approx(a)
    slow = planner.Cluster(gpus=8, alpha_s=0.0, nvlink_gbps=1e-3, ib_gbps=1e-3)
    plain = planner.step_time(OVERLAP_MODEL, layout, replace(recipe, overlap=False), 8, slow, 0.5)
    got = planner.step_time(OVERLAP_MODEL, layout, recipe, 8, slow, 0.5)
    assert got["data parallel"] == pytest.approx(plain["data parallel"] - 1 * layer["backward"])
    send = 128 * 64 * 2 / 2 / 1e6              # one microbatch's activations, s/c tokens, at 1 MB/s
    assert got["pipeline"] == pytest.approx(2 * send + 3 * (send - 2 * layer["forward"] + send - 2 * layer["backward"]))


def test_zero3_gathers_are_prefetched_behind_the_previous_layer():
    """ZeRO-3, pp = 1, overlap: per pass the first layer's gather G is exposed, and each other layer's by
    max(0, G − its compute); slow links: G − F forward, G − B backward, per microbatch."""
    cluster = planner.Cluster(gpus=2, alpha_s=0.0, nvlink_gbps=1e-3, ib_gbps=1e-3)
    recipe = Recipe(zero=3, overlap=True)
    plain = planner.step_time(OVERLAP_MODEL, Layout(dp=2), replace(recipe, overlap=False), 4, cluster, 0.5)
    got = planner.step_time(OVERLAP_MODEL, Layout(dp=2), recipe, 4, cluster, 0.5)
    layer = planner.layer_seconds(OVERLAP_MODEL, Layout(dp=2), recipe, cluster, 0.5)
    m, ell = 2, 4
    one_reduce = plain["data parallel"] / (0.5 + m)           # ZeRO-3 without overlap: 0.5 + m all-reduces
    rs, g = 0.5 * one_reduce, 0.5 * one_reduce / ell
    expected = (rs - (ell - 1) * layer["backward"]) + m * (g + (ell - 1) * (g - layer["forward"])
                                                          + g + (ell - 1) * (g - layer["backward"]))
    assert got["data parallel"] == pytest.approx(expected)


# -- GEMM efficiency by size --------------------------------------------------------------------------

def test_a_constant_gemm_efficiency_prices_like_the_constant():
    constant = GemmEfficiency(peak_tflops=989.0, eta_max=0.5)
    for model, layout in ((SMALL, Layout(tp=2, cp=2)), (LLAMA_SMALL, Layout(tp=2, pp=2)),
                          (GPTConfig(vocab_size=256, block_size=128, n_layer=2, n_head=4, d_model=64, n_expert=4),
                           Layout(dp=2, ep=2))):
        for recompute in ("none", "full"):
            cluster, recipe = planner.Cluster(gpus=layout.world_size), Recipe(recompute=recompute)
            by_float = planner.step_time(model, layout, recipe, 8, cluster, 0.5)["compute"]
            by_gemm = planner.step_time(model, layout, recipe, 8, cluster, constant)["compute"]
            assert by_gemm == pytest.approx(by_float)


def test_the_gemms_of_a_layer_under_a_layout():
    """Llama-small at tp 2, cp 2, b 2: T = 2·128/2 = 128 tokens; q 64/2 wide, k and v one K/V head of 8,
    the SwiGLU's 192/2; the attention core per head (4) and sequence (2), per ring step (2)."""
    got = {name: (m, n, k, count) for name, m, n, k, count in
           planner.layer_gemms(LLAMA_SMALL, Layout(tp=2, cp=2), Recipe(microbatch=2))}
    assert got == {"q": (128, 32, 64, 1), "k": (128, 8, 64, 1), "v": (128, 8, 64, 1), "proj": (128, 64, 32, 1),
                   "scores": (64, 64, 8, 16), "weighted v": (64, 8, 64, 16),
                   "mlp gate": (128, 96, 64, 1), "mlp up": (128, 96, 64, 1), "mlp down": (128, 64, 96, 1)}


def test_the_planner_pays_a_fixed_cost_per_gemm_call():
    """η from a model with a fixed cost t₀ per call and no other loss: the compute is the FLOPs at peak
    plus t₀ × the calls, 3 per GEMM (forward, two backward): per layer q, k, v, proj, fc, proj and
    2·a = 8 attention GEMMs = 14, × 2 layers, + the head, per sequence of a batch of 4."""
    t0 = 1e-6
    cluster = planner.Cluster(gpus=1)
    gemm = GemmEfficiency(peak_tflops=989.0, eta_max=1.0, overhead_s=t0)
    got = planner.step_time(SMALL, Layout(), Recipe(), 4, cluster, gemm)["compute"]
    at_peak = planner.step_time(SMALL, Layout(), Recipe(), 4, cluster, 1.0)["compute"]
    assert got == pytest.approx(at_peak + t0 * 4 * 3 * (2 * 14 + 1))


def test_kv_heads_must_split_over_tp_or_be_copied():
    """3 K/V heads over tp = 2 split neither way (each rank needs whole K/V heads); 2 over tp = 4 are copied."""
    odd = GPTConfig(vocab_size=256, block_size=128, n_layer=2, n_head=6, d_model=48, n_kv_head=3)
    got = planner.predict(odd, Layout(tp=2), Recipe(), 4, planner.Cluster(gpus=2))
    assert "3 K/V heads over tp=2" in got.reason
    assert planner.predict(LLAMA_SMALL, Layout(tp=4), Recipe(), 4, planner.Cluster(gpus=4)).reason is None


# -- torchtitan's per-op selective checkpointing (recompute="op") --------------------------------------
# torchtitan (9dec370, torchtitan/parallelisms/parallelize_llama.py): every aten.mm, flash-attention and
# reduce-scatter output is saved except every second mm, the mm count kept in a `meta` dict that
# `selective_checkpointing_context_fn` creates afresh for every checkpointed call, i.e. for every block's
# forward: in each block the 1st, 3rd, 5th (, 7th) matmul outputs are saved, the 2nd, 4th, 6th recomputed,
# on every step. Only aten.mm counts: a Linear with a bias runs aten.addmm, so the shapes below have no biases.

GPT2_NOBIAS = replace(SMALL, bias=False)      # h 64, 4 heads of 16, GELU MLP 256 wide


def test_block_matmuls_run_in_the_models_order():
    """q, k, v, proj, then fc, proj (GELU) or gate, up, down (SwiGLU; torchtitan: w2(silu(w1(x)) · w3(x))
    calls w1, w3, w2); column-parallel outputs ÷ t, row-parallel ones h partial sums. Llama-small at t = 2:
    q 64/2 = 32 values, 2·64·32 FLOPs per token; k, v one K/V head of 8; proj h = 64 from 32; SwiGLU 192/2."""
    got = planner.block_matmuls(LLAMA_SMALL, Layout(tp=2))
    assert got == [("q", 32, 2 * 64 * 32), ("k", 8, 2 * 64 * 8), ("v", 8, 2 * 64 * 8), ("proj", 64, 2 * 32 * 64),
                   ("gate", 96, 2 * 64 * 96), ("up", 96, 2 * 64 * 96), ("down", 64, 2 * 96 * 64)]
    assert [name for name, *_ in planner.block_matmuls(GPT2_NOBIAS, Layout())] == [
        "q", "k", "v", "proj", "fc", "mlp proj"]


def test_op_checkpointing_of_a_gpt2_block_keeps_the_odd_matmuls_and_recomputes_the_even_ones():
    """6 matmuls (an even count): saved q, v, fc (1st, 3rd, 5th), recomputed k, proj, mlp proj.
    t = 1, values per token: the block's input h = 64, q 64 + v 64 + fc 256 = 384, the attention kernel's
    output a·d = 64 and its fp32 log-sum-exp (a = 4 values, 2 in 16-bit units each) 8: 520. Recomputed
    forward FLOPs per token: k 2·64·64 + proj 2·64·64 + mlp proj 2·256·64 = 49,152.
    t = 2 with SP: input 64/2 = 32, q 32 + v 32 + fc 128 = 192, attention 32 + 2·4/2 = 36, the two
    reduce-scatters' outputs 2·64/2 = 64: 324; recomputed 4,096 + 4,096 + 16,384 = 24,576 per rank.
    Fails if the even set is kept (k, proj, mlp proj: 384 → 64 + 64 + 64 = 192) or if the log-sum-exp or
    the reduce-scatters are left out. (In a GELU block both sets have the same FLOPs, q = proj, k = v,
    fc = mlp proj: half of all, 49,152, is the even set's too.)"""
    assert planner.op_checkpointing(GPT2_NOBIAS, Layout(), Recipe(recompute="op")) == (520, 49_152)
    assert planner.op_checkpointing(GPT2_NOBIAS, Layout(tp=2), Recipe(recompute="op")) == (324, 24_576)
    # without SP the input is whole on every rank and nothing is reduce-scattered: 64 + 192 + 36
    no_sp = Recipe(recompute="op", sequence_parallel=False)
    assert planner.op_checkpointing(GPT2_NOBIAS, Layout(tp=2), no_sp) == (292, 24_576)


def test_op_checkpointing_of_a_llama_block_keeps_the_odd_matmuls():
    """7 matmuls (SwiGLU, GQA): saved q, v, gate, down (1st, 3rd, 5th, 7th), the larger set (it exceeds
    k + proj + up by q's a·d/t values). t = 1: input 64, q 64 + v 16 + gate 192 + down 64 = 336, attention
    a·d = 64 + log-sum-exp 2·8 = 16: 480 values per token. t = 2 with SP: input 32, q 32 + v 8 + gate 96
    + down 64 = 200, attention 32 + 8, reduce-scatters 2·64/2 = 64: 336. Without SP: 64 + 200 + 40 = 304.
    Fails on the smaller (even) set (272 at t = 1) or without the log-sum-exp or the reduce-scatters."""
    op = Recipe(recompute="op")
    assert planner.op_checkpointing(LLAMA_SMALL, Layout(), op)[0] == 480
    assert planner.op_checkpointing(LLAMA_SMALL, Layout(tp=2), op)[0] == 336
    assert planner.op_checkpointing(LLAMA_SMALL, Layout(tp=2), replace(op, sequence_parallel=False))[0] == 304
    # the layer keeps those values in 16 bits for its s·b/cp tokens: at tp 2, cp 2, b 2
    s, b = 128, 2
    got = planner.layer_activations(LLAMA_SMALL, Layout(tp=2, cp=2), replace(op, microbatch=b))
    assert got == 2 * s * b * 336 / 2
    assert planner.memory(LLAMA_SMALL, Layout(tp=2, cp=2), replace(op, microbatch=b))["activations"] == 2 * got


def test_op_checkpointing_of_a_llama_block_recomputes_k_proj_and_up():
    """Recomputed forward FLOPs per token: t = 1, k 2·64·16 + proj 2·64·64 + up 2·64·192 = 34,816 (half of
    all seven, 47,104, is what the planner charges); t = 2, 1,024 + 4,096 + 12,288 = 17,408 per rank.
    The step's compute with a constant efficiency grows by L·t·(that)·B·s/n FLOPs at η·peak."""
    op = Recipe(recompute="op")
    assert planner.op_checkpointing(LLAMA_SMALL, Layout(), op)[1] == 34_816
    assert planner.op_checkpointing(LLAMA_SMALL, Layout(tp=2), op)[1] == 17_408
    cluster = planner.Cluster(gpus=2)
    none, redo = (planner.step_time(LLAMA_SMALL, Layout(tp=2), Recipe(recompute=r), 4, cluster, 0.5)["compute"]
                  for r in ("none", "op"))
    assert redo - none == pytest.approx(2 * 2 * 17_408 * 4 * 128 / 2 / (0.5 * 989e12))


def test_op_checkpointing_adds_the_recomputed_matmuls_to_the_compute():
    """GPT-2 shape (no biases), one GPU, a batch of 4: the constant-efficiency compute grows by
    L·t·49,152 FLOPs per token (k, proj, mlp proj again) × B·s / n at 0.5 × 989 TFLOP/s; at t = 2 each
    rank recomputes 24,576 per token, the same total. Fails if the recomputation is not charged, or is
    charged per rank only (÷ t)."""
    for layout in (Layout(), Layout(tp=2)):
        cluster = planner.Cluster(gpus=layout.world_size)
        none, redo = (planner.step_time(GPT2_NOBIAS, layout, Recipe(recompute=r), 4, cluster, 0.5)["compute"]
                      for r in ("none", "op"))
        assert redo - none == pytest.approx(2 * 49_152 * 4 * 128 / layout.world_size / (0.5 * 989e12))
    # the recomputation is not model FLOPs: MFU counts the model's FLOPs only, so it drops
    none, redo = (planner.predict(GPT2_NOBIAS, Layout(), Recipe(recompute=r), 4, planner.Cluster(gpus=1))
                  for r in ("none", "op"))
    assert redo.mfu == pytest.approx(none.mfu * none.step_s / redo.step_s) and redo.mfu < none.mfu


@pytest.mark.parametrize("model, layout, recipe", [
    (LLAMA_SMALL, Layout(tp=2), Recipe(recompute="op")),
    (GPTConfig(vocab_size=256, block_size=128, n_layer=6, n_head=4, d_model=64), Layout(pp=4), Recipe()),
])
def test_a_constant_gemm_efficiency_prices_the_new_recipes_like_the_constant(model, layout, recipe):
    """As test_a_constant_gemm_efficiency_prices_like_the_constant, for the recipes added since."""
    constant = GemmEfficiency(peak_tflops=989.0, eta_max=0.5)
    cluster = planner.Cluster(gpus=layout.world_size)
    by_float = planner.step_time(model, layout, recipe, 8, cluster, 0.5)["compute"]
    by_gemm = planner.step_time(model, layout, recipe, 8, cluster, constant)["compute"]
    assert by_gemm == pytest.approx(by_float)


# -- an uneven pipeline split, interleaved 1F1B ------------------------------------------------------------

SIX = GPTConfig(vocab_size=256, block_size=128, n_layer=6, n_head=4, d_model=64)   # blocks of 49,984
EIGHT = replace(SIX, n_layer=8)
LAYER = 2 * 128 * 16 * 64          # one GPT-2 layer's activations, one sequence: 2 bytes · s · 16h (flash)


def test_an_uneven_split_is_priced_as_its_fullest_stage():
    """6 layers on pp = 4: ⌊6/4⌋ = 1 each and the 2 extra on the middle stages, 1, 2, 2, 1 (torchtitan's
    generate_split_points; Llama 3's 126 layers on 16 stages: 7, 8 × 14, 7, §3.3.2); parameters and
    memory stage by stage; the compute at the fullest stage's share: the blocks' FLOPs × ⌈L/p⌉·p/L = 8/6.
    Fails on a floor (L // p = 1 block) or without the 8/6, or with the extra layers on the first stage."""
    layout = Layout(pp=4)
    assert planner.stage_layers(SIX, layout) == [1, 2, 2, 1] and planner.stage_layers(EIGHT, layout) == [2] * 4
    assert planner.stage_layers(replace(SIX, n_layer=126), Layout(pp=16)) == [7] + [8] * 14 + [7]
    assert planner.stage_layers(replace(SIX, n_layer=126), Layout(pp=8)) == [15] + [16] * 6 + [15]
    assert planner.stage_blocks(SIX, layout) == planner.stage_blocks(EIGHT, layout) == 2
    assert planner.stage_blocks(SIX, Layout()) == 6 and planner.stage_blocks(SIX, Layout(pp=5)) == 2
    # first: 1 block, token embedding 256·64, positions 128·64; middle: 2 blocks; last: 1 block, head, LayerNorm
    assert planner.stage_params(SIX, layout, 0) == (49_984 + 256 * 64 + 128 * 64, 0)
    assert planner.stage_params(SIX, layout, 1) == planner.stage_params(SIX, layout, 2) == (2 * 49_984, 0)
    assert planner.stage_params(SIX, layout, 3) == (49_984 + 256 * 64 + 2 * 64, 0)
    recipe = Recipe(zero=0, microbatch=1)
    # 1F1B: stage i holds p − i microbatches of its layers: 4·1, 3·2, 2·2, 1·1
    assert [planner.stage_memory(SIX, layout, recipe, i)["activations"] for i in range(4)] == [
        4 * LAYER, 6 * LAYER, 4 * LAYER, LAYER]
    cluster = planner.Cluster(gpus=4)
    per_gpu = 8 * 128 / 4 / (0.5 * 989e12)                  # B·s / n tokens, at 0.5 × peak
    six, eight = (planner.step_time(m, layout, recipe, 8, cluster, 0.5) for m in (SIX, EIGHT))
    head = 6 * 64 * 256                                        # the head's FLOPs per token, not scaled
    assert six["compute"] == pytest.approx(((SIX.flops_per_token - head) * 8 / 6 + head) * per_gpu)
    assert eight["compute"] == pytest.approx(EIGHT.flops_per_token * per_gpu)
    # the transfers follow the blocks on the busiest stage: tp's per-layer all-reduces as for 8 layers
    tp = {m.n_layer: planner.step_time(m, Layout(tp=2, pp=4), recipe, 8, planner.Cluster(gpus=8), 0.5)
          for m in (SIX, EIGHT)}
    assert tp[6]["tensor parallel"] == pytest.approx(tp[8]["tensor parallel"]) and tp[8]["tensor parallel"] > 0


def test_interleaving_halves_the_bubble_doubles_the_sends_and_keeps_more_in_flight():
    """8 layers on pp = 4 stages (2 each) in v = 2 chunks of one layer, m = 8 microbatches: the bubble
    (p − 1)/(v·m) = 3/16 of the compute, half of 1F1B's 3/8; twice the sends, 2·m·v one-way sends of one
    microbatch's activations, s·h·2 bytes, at α + bytes/IB. Memory (Megatron's interleaved warm-up): stage i
    holds 2(p − i − 1) + (v − 1)·p + 1 chunks of 1/v of its layers: 11, 9, 7, 5 layers' activations,
    against 1F1B's (p − i)·2 = 8, 6, 4, 2; on the first stage p + (p − 1)/v = 5.5 stages' worth
    (Korthikanti et al. 2022 §4.2.3's factor 1 + (p − 1)/(p·v)). Fails without v in any of the three."""
    layout, cluster = Layout(pp=4), planner.Cluster(gpus=4)
    plain, interleaved = Recipe(zero=0), Recipe(zero=0, virtual_stages=2)
    one, two = (planner.step_time(EIGHT, layout, r, 8, cluster, 0.5) for r in (plain, interleaved))
    assert two["compute"] == one["compute"]
    assert one["bubble"] == pytest.approx(one["compute"] * 3 / 8)
    assert two["bubble"] == pytest.approx(one["compute"] * 3 / 16)
    send = cluster.alpha_s + 128 * 64 * 2 / (cluster.ib_gbps * 1e9)
    assert one["pipeline"] == pytest.approx(2 * 8 * send) and two["pipeline"] == pytest.approx(2 * 8 * 2 * send)
    kept = {r.virtual_stages: [planner.stage_memory(EIGHT, layout, r, i)["activations"] for i in range(4)]
            for r in (plain, interleaved)}
    assert kept[1] == [8 * LAYER, 6 * LAYER, 4 * LAYER, 2 * LAYER]
    assert kept[2] == [11 * LAYER, 9 * LAYER, 7 * LAYER, 5 * LAYER]
    assert kept[2][0] == (4 + 3 / 2) * 2 * LAYER
    # at m = p = 4 microbatches the warm-up holds all m·v = 8 chunks: stage 0 as much as plain 1F1B (Megatron
    # caps the warm-up at the microbatches there are; fails without the cap)
    capped = [planner.stage_memory(EIGHT, layout, interleaved, i, global_batch=4)["activations"] for i in range(4)]
    assert capped[0] == 8 * LAYER and capped[1] == 8 * LAYER and capped[3] == 5 * LAYER


@pytest.mark.parametrize("model, batch, virtual, reason", [
    (EIGHT, 8, 2, None),
    (EIGHT, 10, 2, "the microbatches must be a multiple of pp=4"),      # m = 10 fills 4 stages, not in rounds
    (EIGHT, 6, 2, "the microbatches must be a multiple of pp=4"),       # m = 6
    (EIGHT, 6, 1, None),                                                # plain 1F1B: any m ≥ p
    (SIX, 8, 2, "6 layers cannot fill pp=4 stages × 2 virtual stages"),
    (EIGHT, 8, 0, "a positive integer"),
])
def test_interleaving_needs_whole_rounds_of_microbatches_and_a_layer_per_chunk(model, batch, virtual, reason):
    got = planner.predict(model, Layout(pp=4), Recipe(virtual_stages=virtual), batch, planner.Cluster(gpus=4))
    assert got.reason is None if reason is None else reason in got.reason


# -- the loss's peak and a recomputed layer, stage by stage; FSDP's gathered unit ---------------------------

WIDE = GPTConfig(vocab_size=8192, block_size=128, n_layer=2, n_head=4, d_model=64)   # V·h = 524,288 > a block


def test_under_full_recomputation_only_the_last_stage_weighs_the_loss_against_a_layer():
    """pp = 2, one layer per stage, full recomputation: each stage keeps its layers' inputs, 2·s·h = 16,384
    bytes per layer and microbatch in flight (2 on the first stage, 1 on the last), plus, at its peak, one
    layer recomputed (LAYER = 262,144 bytes) — or, on the last stage only, the loss's backward if larger:
    12·s·V = 12,582,912 bytes with V = 8192 (then no layer is added), 12·s·8 = 12,288 with V = 8 (the layer
    is). The first stage has no loss: its layer is always added. Fails if the loss is weighed on every
    stage (the first stage would drop its layer) or never."""
    layout, recipe = Layout(pp=2), Recipe(zero=0, recompute="full")
    narrow = replace(WIDE, vocab_size=8)
    for model in (WIDE, narrow):
        first = planner.stage_memory(model, layout, recipe, 0)
        assert first["activations"] == 2 * 2 * 128 * 64 + LAYER and first["logits"] == 0
    last = planner.stage_memory(WIDE, layout, recipe, 1)
    assert last["activations"] == 2 * 128 * 64
    assert last["logits"] == last["logits gradient"] / 2 == 4 * 128 * 8192
    last = planner.stage_memory(narrow, layout, recipe, 1)
    assert last["activations"] == 2 * 128 * 64 + LAYER and last["logits"] == last["logits gradient"] == 0


def test_zero3_without_a_pipeline_gathers_two_of_its_largest_unit():
    """FSDP gathers one unit at a time and prefetches the next: two of the largest unit in bf16,
    2 · 2 bytes · max(a block's parameters, V·h) / t. SMALL: a block (49,984) beats V·h = 16,384;
    WIDE: V·h = 524,288 beats the block. Absent for ZeRO 0–2 (nothing gathered) and under a pipeline
    (the stage's weights are charged whole instead). Fails with one unit instead of two, without ÷ t,
    with the block alone or with pp > 1 included."""
    assert planner.memory(SMALL, Layout(dp=2), Recipe(zero=3))["gathered"] == 2 * 2 * 49_984
    assert planner.memory(SMALL, Layout(dp=2, tp=2), Recipe(zero=3))["gathered"] == 2 * 2 * 49_984 / 2
    assert planner.memory(WIDE, Layout(dp=2), Recipe(zero=3))["gathered"] == 2 * 2 * 8192 * 64
    assert planner.memory(WIDE, Layout(dp=2, tp=2), Recipe(zero=3))["gathered"] == 2 * 2 * 8192 * 64 / 2
    for zero in (0, 1, 2):
        assert "gathered" not in planner.memory(WIDE, Layout(dp=2), Recipe(zero=zero))
    for stage in (0, 1):
        assert "gathered" not in planner.stage_memory(WIDE, Layout(dp=2, pp=2), Recipe(zero=3), stage)


def test_zero3_gathers_a_moe_block_with_its_own_experts_only():
    """E = 4 experts over ep = 2: the block's dense part 17,152 whole, its experts 4·(8h² + 5h) = 132,352
    ÷ 2: a unit of 83,328 parameters, two of them in bf16 (the planner says 2·2·149,504/2 = 299,008)."""
    moe = GPTConfig(vocab_size=256, block_size=128, n_layer=2, n_head=4, d_model=64, n_expert=4)
    assert moe.block_params() == (17_152, 132_352)
    assert planner.memory(moe, Layout(dp=2, ep=2), Recipe(zero=3))["gathered"] == 2 * 2 * (17_152 + 132_352 / 2)


def test_op_checkpointing_runs_the_unsaved_tensor_parallel_collectives_again():
    """torchtitan's per-op policy saves reduce-scatters, not all-gathers or all-reduces: the backward's
    recomputation issues SP's 2 all-gathers again (one all-reduce's worth: 5 instead of 4 per layer and
    microbatch) or, without SP, the 2 all-reduces (6). Fails if "op" is charged like "none"."""
    cluster = planner.Cluster(gpus=2)
    for sp, count in ((True, 5), (False, 6)):
        none, op = (planner.step_time(LLAMA_SMALL, Layout(tp=2), Recipe(recompute=r, sequence_parallel=sp), 4,
                                      cluster, 0.5)["tensor parallel"] for r in ("none", "op"))
        assert op == pytest.approx(none * count / 4)


def test_gradients_reduced_in_fp32_move_twice_the_bytes():
    """torchtitan reduces gradients in fp32 (grad_reduce_bytes=4): the all-reduce (ZeRO 1) or the
    reduce-scatter (ZeRO 3) moves 4 bytes per parameter; ZeRO-3's weight all-gathers stay bf16. With α = 0
    the times are exactly proportional to the bytes. Fails if the gradient bytes are ignored, or if the
    weight gathers follow them."""
    cluster = planner.Cluster(gpus=4, alpha_s=0.0)
    dp = {rb: {z: planner.step_time(SMALL, Layout(dp=4), Recipe(zero=z, grad_reduce_bytes=rb), 8, cluster, 0.5)
               ["data parallel"] for z in (1, 3)} for rb in (2, 4)}
    assert dp[4][1] == pytest.approx(2 * dp[2][1])
    m = 8 // 4                                      # ZeRO-3: 0.5 reduce-scatter + 2·m gathers of 0.5 all-reduce
    assert dp[2][3] == pytest.approx(dp[2][1] * (0.5 + m))
    assert dp[4][3] == pytest.approx(dp[2][1] * (0.5 * 2 + m))
    bad = planner.predict(SMALL, Layout(dp=4), Recipe(grad_reduce_bytes=3), 8, cluster)
    assert "grad_reduce_bytes must be 2" in bad.reason
