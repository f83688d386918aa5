"""Does the planner predict published runs? A harness that puts a predictor's numbers beside the
published ones (``course_utils.published_runs``), row by row, with the error of a constant beside it.

A *predictor* is a callable ``run -> (memory, throughput)``: per-GPU memory in GB (10**9 bytes, what
``planner.Prediction.memory_gb`` gives) and TFLOP/s per GPU **in the run's own FLOP convention**
(:data:`CONVENTIONS`), each a number, or None / :class:`Missing` (with its reason) when it predicts
nothing for that quantity; it raises :class:`Inexpressible` when it cannot describe the run at all.
With a ``fit`` (``runs -> float``, one scalar such as the GEMM efficiency), the predictor takes that
scalar as a second argument, and :func:`evaluate` fits it leave-one-source-out: on the other
sources' runs, then predicts this source's.

:func:`evaluate` gives, for each run and quantity, the prediction, the published value, their ratio,
and a constant predictor's value: the median of the *other* runs' published values of that quantity
(leave-one-out, so the constant never sees the row it predicts; throughput as a fraction of each
run's peak, so that A100 and H100 runs share one constant); then the median |error| of each.
Memory is compared in GiB (2**30 bytes, what torch.cuda and torchtitan report): the planner's GB are
converted (:func:`gib_from_gb`). All unit and FLOP conversions live here, in one place.

:func:`to_planner` maps a run to the planner's inputs; :func:`planner_predictor` and
:func:`fit_efficiency` are the planner as a predictor; :func:`starting_point` prints the table.
No torch here.
"""
from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from . import planner
from .published_runs import GIB, RUNS, Run
from .shape import GPTConfig

# -- conversions ------------------------------------------------------------------------------------
CONVENTIONS = {
    "palm": "model FLOPs, PaLM appendix B (Chowdhery et al. 2022): 6N + 12·L·s·a·d per token, N the "
            "weights a token multiplies, every attention score counted, no recomputation "
            "(Korthikanti's MFU; Llama 3's 'BF16 MFU' cites it)",
    "narayanan-2021": "hardware FLOPs of a fully recomputed GPT (Narayanan et al. 2021, §5.1: "
                      "96·B·s·l·h²·(1 + s/6h + V/16lh) per step): 4/3·(6·N_blocks + 12·L·s·a·d) + 6·h·V per "
                      "token, the blocks' forward counted twice, the head once, every score counted",
    "torchtitan": "torchtitan's MFU count (utils.get_num_flop_per_token at 9dec370): 6·(all parameters but "
                  "the token embedding) + 12·L·a·d·s per token: norms counted, every score counted, no "
                  "recomputation",
    "none": "the source states no FLOP count",
}
"""How each source counts the FLOPs behind its TFLOP/s or MFU (``Run.flops`` names one)."""


def flops_per_token(model: GPTConfig, convention: str) -> float:
    """Training FLOPs per token of ``model`` (its ``block_size`` is the sequence) as ``convention``
    (a key of :data:`CONVENTIONS`) counts them."""
    h, V = model.d_model, model.vocab_size
    attention = 12 * model.n_layer * model.block_size * model.n_head * model.head_dim
    if convention == "palm":
        return float(model.train_flops_per_token(causal=False))
    if convention == "narayanan-2021":
        blocks = model.matmul_params - h * V
        return 4 / 3 * (6 * blocks + attention) + 6 * h * V
    if convention == "torchtitan":
        return float(6 * (model.params - V * h) + attention)
    raise ValueError(f"no FLOP count for convention {convention!r}; pick one of "
                     f"{', '.join(c for c in CONVENTIONS if c != 'none')}")


def tflops_from_tokens(tokens_per_s: float, model: GPTConfig, convention: str) -> float:
    """TFLOP/s per GPU of ``tokens_per_s`` tokens per second per GPU, as ``convention`` counts."""
    return tokens_per_s * flops_per_token(model, convention) / 1e12


def tokens_from_tflops(tflops: float, model: GPTConfig, convention: str) -> float:
    """Tokens per second per GPU at ``tflops`` TFLOP/s per GPU (the inverse of :func:`tflops_from_tokens`)."""
    return tflops * 1e12 / flops_per_token(model, convention)


def gib_from_gb(gb: float) -> float:
    """GB (10**9 bytes, the planner's unit) to GiB (2**30 bytes, torch.cuda's)."""
    return gb * 1e9 / GIB


def gb_from_gib(gib: float) -> float:
    """GiB (2**30 bytes) to GB (10**9 bytes)."""
    return gib * GIB / 1e9


def published_tflops(run: Run) -> float | None:
    """The run's published throughput as TFLOP/s per GPU in its own convention: the TFLOP/s it
    prints, else its tokens/s converted, else MFU × the peak it divides by; None if none of them."""
    if run.tflops is not None:
        return run.tflops
    if run.tokens_per_s is not None and run.model is not None and run.flops in CONVENTIONS and run.flops != "none":
        return tflops_from_tokens(run.tokens_per_s, run.model, run.flops)
    if run.mfu is not None and run.peak_tflops is not None:
        return run.mfu * run.peak_tflops
    return None


QUANTITIES = {"memory": "GiB per GPU", "throughput": "TFLOP/s per GPU (the source's convention)"}


def published(run: Run) -> dict[str, float | None]:
    """``{"memory": GiB or None, "throughput": TFLOP/s or None}`` as the source reports them."""
    return {"memory": run.memory_gib, "throughput": published_tflops(run)}


# -- the planner as a predictor ----------------------------------------------------------------------
GPU_PRESETS: dict[str, dict] = {
    "A100-SXM4-80GB": planner.A100,
    "H100-SXM5-80GB": planner.H100,
    # torchtitan's Grand Teton H100s: 96GB HBM2e, 500 W; their real peak is unknown (the doc says between
    # SXM and NVL), so the peak stays the 989 TFLOP/s their MFU divides by
    "H100-96GB-HBM2e-500W": {**planner.H100, "hbm_gb": 96.0},
    "H200-SXM-141GB": planner.H200,
}
"""The planner's ``Cluster`` fields for each GPU a run names (dense bf16 peaks: A100 312, H100/H200 989)."""


class Inexpressible(Exception):
    """A run the predictor cannot describe; the message says what is missing."""


@dataclass(frozen=True)
class Missing:
    """No prediction of one quantity, and why (a predictor may return it in place of a number)."""

    reason: str


@functools.cache
def to_planner(run: Run, overlap: bool = False) -> tuple[GPTConfig, planner.Layout, planner.Recipe, int,
                                                          planner.Cluster]:
    """``(model, layout, recipe, global_batch, cluster)`` for ``planner.predict``; raises
    :class:`Inexpressible` with what is missing. Where the source is silent the defaults are
    :func:`assumptions`'s: the whole local batch as one microbatch without pipelining (one sequence
    with it), a fused attention, sequence parallelism with tp > 1, no dropout."""
    gaps = list(run.unsupported)
    fields = (("model shape", run.model), ("layout", run.layout), ("GPU count", run.gpus),
              ("ZeRO/FSDP stage", run.zero), ("recomputation", run.recompute), ("global batch", run.global_batch))
    gaps += [f"the source gives no {name}" for name, value in fields if value is None]
    if run.gpu not in GPU_PRESETS:
        gaps.append(f"no Cluster preset for {run.gpu}")
    if gaps:
        raise Inexpressible("; ".join(gaps))
    layout = run.layout
    microbatch = run.microbatch or (1 if layout.pp > 1 else run.global_batch // layout.dp)
    recipe = planner.Recipe(
        zero=run.zero, recompute=run.recompute, microbatch=microbatch, virtual_stages=run.virtual_stages or 1,
        grad_reduce_bytes=run.grad_reduce_bytes,
        flash=True if run.flash is None else run.flash,
        sequence_parallel=(layout.tp > 1) if run.sequence_parallel is None else run.sequence_parallel,
        overlap=overlap, dropout=bool(run.dropout))
    model = replace(run.model, block_size=run.seq_len)
    return model, layout, recipe, run.global_batch, planner.Cluster(gpus=run.gpus, **GPU_PRESETS[run.gpu])


def assumptions(run: Run) -> list[str]:
    """What :func:`to_planner` fills in or prices differently from the run."""
    out = []
    if run.microbatch is None and run.layout is not None:
        out.append("microbatch not given: " + ("1 sequence" if run.layout.pp > 1 else "the whole local batch"))
    if run.flash is None:
        out.append("attention kernel not given: fused (flash)")
    if run.sequence_parallel is None and (run.tp or 1) > 1:
        out.append("sequence parallelism not given: on")
    if run.virtual_stages is None and (run.pp or 1) > 1:
        out.append("virtual stages not given: priced as plain 1F1B")
    if run.model is not None and run.pp and run.model.n_layer % run.pp:
        out.append(f"{run.model.n_layer} layers over {run.pp} stages: priced as ⌈L/pp⌉ on every stage")
    if run.model is not None and run.tp and run.cp > 1 and run.source.startswith("torchtitan"):
        out.append("torchtitan repeats K/V to every head before attention: its ring carries a/t heads, "
                   "the planner g/t")
    if run.async_tp:
        out.append("async TP's overlap of TP transfers with matmuls")
    if run.float8:
        out.append("float8 matmuls: throughput not predicted, memory priced as bf16 training")
    if run.memory_gib is not None:
        out.append(f"published memory is the {run.memory_kind}; the planner counts live bytes")
    return out


@functools.cache
def _priced(run: Run) -> tuple[float, float, float, float]:
    """The planner's view of ``run``, priced once at efficiency 1: (live memory in GB, seconds of
    compute and bubble per step, seconds of everything else, tokens per GPU per step). Without overlap
    the compute and the bubble scale as 1/efficiency and the transfers do not depend on it, so any
    efficiency's step time follows without pricing the run again."""
    model, layout, recipe, batch, cluster = to_planner(run)
    result = planner.predict(model, layout, recipe, batch, cluster, 1.0)
    if not result.time:
        raise Inexpressible(f"the planner: {result.reason}")
    scaled = result.time["compute"] + result.time["bubble"]
    return result.memory_gb, scaled, result.step_s - scaled, batch * model.block_size / cluster.gpus


def planner_predictor(run: Run, efficiency: float, allocator_overhead: float = 1.0,
                      overlap: bool = False) -> tuple[float | Missing, float | Missing]:
    """The planner (``planner.predict`` at ``efficiency``; ``overlap``: its overlap rules on, else every
    transfer exposed) as a predictor: memory in GB (live bytes × ``allocator_overhead``: the published
    figures are the allocator's reserved peak) and TFLOP/s per GPU in the run's convention (tokens/s
    from the step time, converted by :func:`tflops_from_tokens`). A layout the planner rejects is
    :class:`Inexpressible` with its reason (one it predicts not to fit is still predicted: see
    :func:`unfit`); float8 runs get no throughput."""
    if allocator_overhead < 1:
        raise ValueError(f"allocator_overhead is reserved ÷ live, at least 1, got {allocator_overhead!r}")
    memory_gb, scaled, fixed, tokens = _priced(run)
    if overlap:           # the overlap rules depend on the efficiency: price the run at this one
        model, layout, recipe, batch, cluster = to_planner(run, overlap=True)
        step = planner.predict(model, layout, recipe, batch, cluster, efficiency).step_s
    else:
        step = scaled / efficiency + fixed
    if run.float8:
        throughput: float | Missing = Missing("float8 matmuls: the planner prices bf16 only")
    elif run.flops not in CONVENTIONS or run.flops == "none":
        throughput = Missing("the source states no FLOP count")
    else:
        throughput = tflops_from_tokens(tokens / step, run.model, run.flops)
    return memory_gb * allocator_overhead, throughput


def fit_efficiency(runs: Sequence[Run], predictor: Callable = planner_predictor,
                   bounds: tuple[float, float] = (0.01, 1.0)) -> float:
    """The one GEMM efficiency at which ``predictor``'s throughput matches the published one on the
    median of ``runs`` it can predict (bisection on the median ratio, which rises with the
    efficiency); ValueError when none of them has a throughput to fit on."""
    usable = []
    for run in runs:
        if published_tflops(run) is None:
            continue
        try:
            _, throughput = predictor(run, sum(bounds) / 2)
        except Inexpressible:
            continue
        if isinstance(throughput, (int, float)):
            usable.append(run)
    if not usable:
        raise ValueError("none of these runs has a published throughput the predictor can predict: "
                         "fit on other sources")
    low, high = bounds
    for _ in range(30):                      # to 2⁻³⁰ of the bounds' width
        middle = (low + high) / 2
        ratio = statistics.median(predictor(run, middle)[1] / published_tflops(run) for run in usable)
        low, high = (middle, high) if ratio < 1 else (low, middle)
    return (low + high) / 2


def unfit(run: Run) -> str | None:
    """Why the planner predicts that ``run`` does not fit its GPUs (the published run did), or None."""
    model, layout, recipe, batch, cluster = to_planner(run)
    reason = planner.predict(model, layout, recipe, batch, cluster, 0.5).reason
    return reason if reason and reason.startswith("needs ") else None


def fit_allocator(runs: Sequence[Run]) -> float:
    """Reserved ÷ live: the median of published ÷ predicted live memory over ``runs`` with a published
    memory the planner can price, at least 1 (a caching allocator never reserves less than it hands
    out: a median below 1 means the live count is too high, which no factor should hide); ValueError
    when there is none."""
    ratios = []
    for run in runs:
        if run.memory_gib is None:
            continue
        try:
            live_gb = planner_predictor(run, 0.5)[0]
        except Inexpressible:
            continue
        ratios.append(run.memory_gib / gib_from_gb(live_gb))
    if not ratios:
        raise ValueError("none of these runs has a published memory the planner can price")
    return max(1.0, statistics.median(ratios))


def fit_planner(runs: Sequence[Run], overlap: bool = False) -> tuple[float, float, bool]:
    """The planner's two fitted scalars on ``runs`` — (GEMM efficiency, allocator overhead) — and
    ``overlap`` passed through to :func:`planner_predictor`."""
    predictor = functools.partial(planner_predictor, overlap=overlap)
    return fit_efficiency(runs, predictor), fit_allocator(runs), overlap


# -- the harness ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Comparison:
    """One run, one quantity: the prediction, the published value and the leave-one-out constant."""

    run: Run
    quantity: str
    predicted: float
    published: float
    constant: float | None
    param: object = None            # the fitted scalar (or tuple of them) used for this run's prediction

    @property
    def ratio(self) -> float:
        return self.predicted / self.published

    @property
    def error(self) -> float:
        """|predicted / published − 1|."""
        return abs(self.ratio - 1)

    @property
    def constant_error(self) -> float | None:
        return None if self.constant is None else abs(self.constant / self.published - 1)


@dataclass
class Evaluation:
    """What :func:`evaluate` found: comparisons, runs skipped whole (with why), quantities not
    predicted (with why), and the fitted scalar per held-out source."""

    comparisons: list[Comparison] = field(default_factory=list)
    skipped: list[tuple[Run, str]] = field(default_factory=list)
    missing: list[tuple[Run, str, str]] = field(default_factory=list)
    params: dict[str, object] = field(default_factory=dict)

    def of(self, quantity: str) -> list[Comparison]:
        return [c for c in self.comparisons if c.quantity == quantity]

    def median_error(self, quantity: str) -> float | None:
        """Median |predicted / published − 1| over the runs predicted; None if none."""
        errors = [c.error for c in self.of(quantity)]
        return statistics.median(errors) if errors else None

    def by_source(self, quantity: str) -> dict[str, tuple[float, float | None, int]]:
        """Per source: (the predictor's median |error|, the constant's, runs compared)."""
        out = {}
        for source in dict.fromkeys(c.run.source for c in self.of(quantity)):
            rows = [c for c in self.of(quantity) if c.run.source == source]
            constants = [c.constant_error for c in rows if c.constant_error is not None]
            out[source] = (statistics.median(c.error for c in rows),
                           statistics.median(constants) if constants else None, len(rows))
        return out

    def constant_median_error(self, quantity: str) -> float | None:
        """The leave-one-out constant's median |error| over the same runs."""
        errors = [c.constant_error for c in self.of(quantity) if c.constant_error is not None]
        return statistics.median(errors) if errors else None

    def report(self) -> str:
        """The table (run, predicted, published, ratio, constant) per quantity, the medians, and what
        was not predicted and why."""
        lines = []
        for quantity, unit in QUANTITIES.items():
            rows = self.of(quantity)
            lines.append(f"{quantity} ({unit}): {len(rows)} runs")
            lines.append(f"  {'run':44s} {'predicted':>10s} {'published':>10s} {'ratio':>6s} {'constant':>9s}")
            for c in rows:
                constant = "" if c.constant is None else f"{c.constant:9.1f}"
                lines.append(f"  {c.run.name:44s} {c.predicted:10.1f} {c.published:10.1f} {c.ratio:6.2f} {constant}")
            planned, constant = self.median_error(quantity), self.constant_median_error(quantity)
            if planned is not None:
                lines.append(f"  median |error|: predictor {planned:.1%}, leave-one-out constant "
                             + ("n/a" if constant is None else f"{constant:.1%}"))
                for source, (p, k, n) in self.by_source(quantity).items():
                    lines.append(f"    {source:30s} {n:2d} runs: predictor {p:.1%}, constant "
                                 + ("n/a" if k is None else f"{k:.1%}"))
            lines.append("")
        if self.params:
            shown = lambda p: (f"{p:.3f}" if isinstance(p, float) else  # noqa: E731
                               " / ".join(f"{x:.3f}" for x in p if isinstance(x, float)) if isinstance(p, tuple)
                               else f"({p})")
            fitted = [p for p in self.params.values() if isinstance(p, (float, tuple))]
            if len(self.params) > 8 and fitted and all(isinstance(p, tuple) for p in fitted):
                lines.append("fitted with each run held out: " + ", ".join(
                    f"{min(p[i] for p in fitted):.3f}–{max(p[i] for p in fitted):.3f}"
                    for i in range(len(fitted[0])) if isinstance(fitted[0][i], float)))
            else:
                lines.append("fitted with each held out: " + ", ".join(f"{k} {shown(p)}"
                                                                        for k, p in self.params.items()))
        if self.missing:
            lines.append("not predicted:")
            lines += [f"  {run.name} ({quantity}): {why}" for run, quantity, why in self.missing]
        if self.skipped:
            lines.append("runs the predictor cannot express:")
            lines += [f"  {run.name}: {why}" for run, why in self.skipped]
        return "\n".join(lines)


def palm_mfu(run: Run) -> float | None:
    """The run's published throughput as model FLOPs utilisation in PaLM's convention (6N + 12·L·s·a·d
    per token, no recomputation, every attention score): one yardstick across sources whose own FLOP
    counts differ (Megatron's counts the recomputation, torchtitan's leaves out the embedding)."""
    tflops = published_tflops(run)
    if tflops is None or not run.peak_tflops:
        return None
    if run.flops == "palm":
        return tflops / run.peak_tflops
    if run.model is None or run.flops not in CONVENTIONS:
        return None
    return tflops_from_tokens(tokens_from_tflops(tflops, run.model, run.flops), run.model, "palm") / run.peak_tflops


def _loo_constant(runs: Sequence[Run], run: Run, quantity: str, holdout: str = "run") -> float | None:
    """The constant predictor, held out as the planner's fit is: the median of the published ``quantity``
    of every run but ``run`` (``holdout="run"``), or of every other source's runs (``"source"``).
    Memory in GiB as published; throughput as PaLM-convention MFU (:func:`palm_mfu`: A100s
    and H100s differ 3× in peak, and the sources count FLOPs differently), times ``run``'s peak,
    converted to ``run``'s convention."""
    runs = [r for r in runs if r is not run and (holdout == "run" or r.source != run.source)]
    if quantity == "throughput":
        others = [palm_mfu(r) for r in runs]
        others = [v for v in others if v is not None]
        if not others or not run.peak_tflops:
            return None
        palm = statistics.median(others) * run.peak_tflops
        if run.flops == "palm":
            return palm
        if run.model is None or run.flops not in CONVENTIONS:
            return None
        return tflops_from_tokens(tokens_from_tflops(palm, run.model, "palm"), run.model, run.flops)
    others = [published(r)[quantity] for r in runs]
    others = [v for v in others if v is not None]
    return statistics.median(others) if others else None


def evaluate(runs: Sequence[Run], predictor: Callable, fit: Callable[[Sequence[Run]], object] | None = None,
             holdout: str = "run") -> Evaluation:
    """Predict every run and put each quantity beside its published value and the leave-one-out
    constant. Without ``fit``, ``predictor(run)``; with it, ``predictor(run, fit(others))`` (a tuple
    from ``fit`` is spread: ``predictor(run, *params)``), ``others`` being the runs of every *other*
    source (``holdout="source"``) or every other run (``holdout="run"``); the constant is held out the
    same way."""
    if holdout not in ("source", "run"):
        raise ValueError(f"holdout must be 'source' or 'run', got {holdout!r}")
    result = Evaluation()
    params: dict[str, object] = {}
    if fit is not None:
        groups = (dict.fromkeys(r.source for r in runs) if holdout == "source" else [r.name for r in runs])
        for key in groups:
            try:
                params[key] = fit([r for r in runs if (r.source if holdout == "source" else r.name) != key])
                result.params[key] = params[key]
            except ValueError as error:
                params[key] = None
                result.params[key] = f"not fitted: {error}"
    for run in runs:
        param = params.get(run.source if holdout == "source" else run.name)
        if fit is not None and param is None:
            result.skipped.append((run, "no fitted parameter (see above)"))
            continue
        try:
            if fit is None:
                memory_gb, throughput = predictor(run)
            else:
                memory_gb, throughput = predictor(run, *param) if isinstance(param, tuple) else predictor(run, param)
        except Inexpressible as error:
            result.skipped.append((run, str(error)))
            continue
        memory = gib_from_gb(memory_gb) if isinstance(memory_gb, (int, float)) else memory_gb
        for quantity, predicted in (("memory", memory), ("throughput", throughput)):
            value = published(run)[quantity]
            if value is None:
                continue
            if not isinstance(predicted, (int, float)) or math.isnan(predicted):
                why = predicted.reason if isinstance(predicted, Missing) else "the predictor gave none"
                result.missing.append((run, quantity, why))
                continue
            result.comparisons.append(Comparison(run, quantity, float(predicted), value,
                                                 _loo_constant(runs, run, quantity, holdout), param))
    return result


def report(runs: Sequence[Run], predictor: Callable, fit: Callable[[Sequence[Run]], float] | None = None) -> str:
    """:func:`evaluate`'s table as text."""
    return evaluate(runs, predictor, fit).report()


def starting_point(runs: Sequence[Run] = RUNS) -> str:
    """The planner with its two scalars (GEMM efficiency, allocator overhead) fitted on every other run
    (leave-one-run-out, as the constant is), on every published run; then what :func:`to_planner`
    assumed for each run it compared."""
    evaluation = evaluate(runs, planner_predictor, fit=fit_planner, holdout="run")
    compared = dict.fromkeys(c.run.name for c in evaluation.comparisons)
    by_name = {r.name: r for r in runs}
    notes = [f"  {name}: {'; '.join(assumptions(by_name[name]))}" for name in compared if assumptions(by_name[name])]
    return evaluation.report() + ("\nassumed or priced differently:\n" + "\n".join(notes) if notes else "")


if __name__ == "__main__":
    print(starting_point())
