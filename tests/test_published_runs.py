"""course_utils.published_runs: every transcribed run is complete and agrees with itself and with its
source's own arithmetic (GPUs = dp·tp·pp·cp, tokens per batch = batch × sequence, % of peak =
TFLOP/s ÷ peak, the doc's MFU sentence), so a mistyped number shows up as a contradiction."""
import pytest

from course_utils import published_runs as P
from course_utils import validation

ALL = P.runs()


def test_every_run_names_a_source_and_is_unique():
    assert {r.source for r in ALL} == set(P.SOURCES), "a source without runs, or a run without a source"
    assert len({r.name for r in ALL}) == len(ALL)
    assert all(s.citation and s.location for s in P.SOURCES.values())
    assert len(P.SOURCES) >= 5
    with pytest.raises(ValueError, match="unknown source"):
        P.runs("megatron-2022")


@pytest.mark.parametrize("run", ALL, ids=lambda r: r.name)
def test_each_run_is_consistent(run):
    if run.layout is not None and run.gpus is not None:
        assert run.layout.world_size == run.gpus, "dp·tp·pp·cp must be the run's GPUs"
    if run.model is not None:
        assert run.model.block_size == run.seq_len
        assert run.gpu in validation.GPU_PRESETS
        # the planner's dense bf16 peak is the one the source divides by (A100 312, H100/H200 989)
        assert validation.GPU_PRESETS[run.gpu]["peak_tflops"] == run.peak_tflops
    assert run.flops in validation.CONVENTIONS
    assert any(v is not None for v in (run.tflops, run.mfu, run.hfu, run.tokens_per_s, run.memory_gib)), \
        "a run with nothing published"
    if run.memory_gib is not None:
        assert run.memory_kind, "say which memory the source reports (reserved or live)"
    if run.mfu is not None and run.hfu is not None:
        assert run.hfu >= run.mfu
    if run.recompute is not None:
        assert run.recompute in ("none", "selective", "op", "full")
    if run.microbatch and run.layout is not None:
        assert run.global_batch % (run.microbatch * run.layout.dp) == 0, "whole microbatches on every dp rank"
        if run.flops == "torchtitan" and run.pp == 1:   # no gradient accumulation there: one microbatch per step
            assert run.global_batch == run.microbatch * run.layout.dp


def test_megatron_2021_is_table_1_with_the_scripts_microbatches():
    """Ten rows; the parameter counts (tied embedding, as the paper counts) round to Table 1's; % of peak
    = TFLOP/s ÷ 312; the interleaved stages divide each pipeline stage's layers."""
    runs = P.runs("megatron-2021")
    assert len(runs) == 10
    for run in runs:
        m = run.model
        assert run.dp * run.tp * run.pp == run.gpus
        assert round((m.params - m.vocab_size * m.d_model) / 1e9, 1) == P.MEGATRON_2021_PARAMS_B[run.name]
        assert abs(100 * run.tflops / 312 - P.MEGATRON_2021_PERCENT[run.name]) <= 0.5
        assert run.global_batch % (run.dp * run.microbatch) == 0
        assert m.n_layer % (run.pp * run.virtual_stages) == 0


def test_llama3_table4_rows_and_the_printed_dp_of_the_128k_row():
    """Tokens/Batch '16M' is 2**24 = global batch × sequence on every row; MFU = TFLOPs ÷ 989 within a
    point (the 16K-GPU 8K row prints 41 % for 400/989 = 40.4 %). The 128k row prints DP 4: its GPUs
    and its tokens both need DP 8."""
    runs = {r.name: r for r in P.runs("llama3-2024")}
    for run in runs.values():
        assert run.tokens_per_step == 16 * 2 ** 20
        assert abs(run.tflops / 989 - run.mfu) <= 0.01
    (name, printed), = P.LLAMA3_TABLE4_PRINTED_DP.items()
    run = runs[name]
    assert run.tp * run.cp * run.pp * printed == run.gpus // 2
    assert printed * (run.global_batch // run.dp) * run.seq_len == 16 * 2 ** 20 // 2
    assert run.dp == 8 and run.tp * run.cp * run.pp * run.dp == run.gpus


def test_torchtitan_throughput_matches_the_docs_own_mfu_sentence():
    """'the 1D Llama 3.1 8B model training on 8 or 128 H100 GPUs without Float8 achieves 33% to 39%
    MFU': Tables 1 and 3's bf16 rows, converted with torchtitan's FLOP count, land there; with the
    recomputation counted (Megatron's convention) or a causal halving they would not."""
    bf16 = [r for r in P.runs("torchtitan-2024-12") if r.model.n_layer == 32 and r.pp == 1 and r.cp == 1
            and not r.float8]
    assert len(bf16) == 4
    mfu = [validation.published_tflops(r) / 989 for r in bf16]
    assert all(0.325 <= x < 0.395 for x in mfu), mfu
    recomputed = [validation.tflops_from_tokens(r.tokens_per_s, r.model, "narayanan-2021") / 989 for r in bf16]
    causal = [r.tokens_per_s * r.model.train_flops_per_token(causal=True) / 989e12 for r in bf16]
    for wrong in (recomputed, causal):
        assert not all(0.325 <= x < 0.395 for x in wrong)


def test_deepseek_v3_is_kept_with_what_the_planner_cannot_express():
    (run,) = P.runs("deepseek-v3-2024")
    assert run.dp * run.pp == run.gpus == 2048 and run.dp % run.ep == 0
    assert run.model is None and len(run.unsupported) >= 4
    assert round(2664e3 / 180e3, 1) == 14.8                          # pre-training tokens, trillions
    assert run.tokens_per_s == pytest.approx(1e12 / (180e3 * 3600))
    with pytest.raises(validation.Inexpressible, match="DualPipe"):
        validation.to_planner(run)


def test_korthikanti_rows_carry_no_invented_layout():
    for run in P.runs("korthikanti-2022"):
        assert run.model is None and run.layout is None
        assert run.mfu is not None and run.unsupported
