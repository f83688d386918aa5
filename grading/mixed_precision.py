"""Exercises 04: mixed precision — a loss scale, the memory of model state, and a float16 training step
with a correct ``GradScaler`` under DDP.

Q1 ``loss_scale_for(max_abs_grad)`` and Q2 ``model_state_gib(n_params, optimizer)``: plain functions,
checked case by case (boundary values and invalid input included) and told which classic mistake a
wrong number comes from (:func:`check_loss_scale_for`, :func:`check_model_state_gib`).

Q3 ``amp_step(ddp_model, optimizer, scaler, x, y)`` in a file: forward and loss under
``torch.autocast`` in float16, backward on the *scaled* loss, ``scaler.step`` (which unscales and skips
a step whose gradients overflowed), ``scaler.update`` (which halves the scale after an overflow and
grows it after a run of good steps), zeroed gradients. The check runs several steps on gloo ranks —
some with targets so large that their float16 gradients overflow — and records, on every rank and
for the same recipe in one process: the dtype of the forward, whether autocast was on during the
backward, every ``optimizer.step`` (how many per step, and the gradients it saw), the scaler's
calls, the loss scale and the weights after each step, and the loss returned.
"""
from __future__ import annotations

import gc
import math
import numbers
from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from course_utils.data import shard
from course_utils.models import mlp

from .model_parallel import call  # a student's plain function called with a time limit, its errors as feedback
from .mutant import Mutant
from .ranks import run_ranks
from .student import load_student, student_function

FP16_MAX = 65504.0   # torch.finfo(torch.float16).max

# ---------------------------------------------------------------------------------------------------
# Q1: the largest power-of-two loss scale that keeps a gradient finite in fp16
# ---------------------------------------------------------------------------------------------------


def _largest_scale(max_abs_grad: float) -> float:
    """The largest power of two ``s`` with ``max_abs_grad * s <= 65504`` (products by 2**k are exact)."""
    scale = 2.0 ** math.floor(math.log2(FP16_MAX / max_abs_grad))
    while max_abs_grad * scale * 2 <= FP16_MAX:
        scale *= 2
    while max_abs_grad * scale > FP16_MAX:
        scale /= 2
    return scale


def _scale_hint(m: float, got: float, want: float) -> str:
    """The classic cause of ``loss_scale_for(m) == got`` instead of ``want``."""
    if got <= 0 or math.frexp(got)[0] != 0.5:
        return "return a power of two (…, 0.5, 1, 2, 4, …): multiplying by it is exact in floating point"
    if want < 1 <= got:
        return ("a scale below 1 is needed: when max_abs_grad alone exceeds 65504, shrink it "
                "(s = 0.5, 0.25, …) instead of stopping at 1")
    if got > want:
        if m * got <= 2.0 ** 16:
            return (f"max_abs_grad * s = {m * got:g} overflows: fp16's largest finite value is 65504 "
                    "(torch.finfo(torch.float16).max), just below 2**16 = 65536")
        if got == 2 * want:
            return f"one power of two too large: max_abs_grad * s = {m * got:g} exceeds fp16's max of 65504"
        return (f"max_abs_grad * s = {m * got:g} is far beyond fp16's max of 65504: that is bfloat16's or "
                "float32's range; use torch.finfo(torch.float16).max")
    if got * 2 == want and m * want == FP16_MAX:
        return (f"max_abs_grad * {want:g} is exactly 65504, and exactly 65504 still fits: compare with <=, "
                "not <")
    return f"one power of two too small: max_abs_grad * {got * 2:g} = {m * got * 2:g} still fits in fp16"


def check_loss_scale_for(fn: Callable, values: Sequence[float], invalid: Sequence[float] = ()) -> None:
    """``fn(m)`` must be the largest power of two ``s`` with ``m * s <= 65504`` for every ``m`` in
    ``values``, and raise ValueError for every ``m`` in ``invalid`` (zero, negative, NaN)."""
    for m in values:
        want = _largest_scale(m)
        got = call(fn, m, name="loss_scale_for")
        if not isinstance(got, numbers.Real) or isinstance(got, bool):
            raise AssertionError(f"loss_scale_for({m!r}) returned {got!r}: return the scale as a number.")
        if got != want:
            raise AssertionError(f"loss_scale_for({m!r}) = {got!r}, expected {want:g}: {_scale_hint(m, got, want)}.")
    for m in invalid:
        call(fn, m, name="loss_scale_for",
             expect_error="a max_abs_grad that is not positive (zero, negative or NaN) has no loss scale")


# ---------------------------------------------------------------------------------------------------
# Q2: GiB of weights, gradients and optimizer state
# ---------------------------------------------------------------------------------------------------

STATE_BUFFERS = {"sgd": 0, "momentum": 1, "adam": 2}


def _bytes_hint(got: list[tuple[float, str, float]]) -> str:
    """The classic mistake behind the answers ``got`` (n_params, optimizer, GiB), all cases together:
    one case alone can fit two mistakes (SGD without gradients is also SGD in 2-byte values)."""
    per_param = [(opt, gib * 2**30 / n, gib * 1e9 / n, STATE_BUFFERS[opt]) for n, opt, gib in got]

    def every(rule) -> bool:
        return all(math.isclose(b, rule(k), rel_tol=1e-6) for _, b, _, k in per_param)

    if all(math.isclose(gb, 4 * (2 + k), rel_tol=1e-6) for _, _, gb, k in per_param):
        return "that is GB (10**9 bytes): a GiB is 2**30 bytes"
    if every(lambda k: 4 * (1 + k)):
        return "you forgot the gradients: one fp32 gradient per parameter, 4 more bytes"
    if every(lambda k: 2 * (2 + k)):
        return "autocast keeps weights, gradients and optimizer state in fp32: 4 bytes each, not 2"
    for opt, b, _, k in per_param:
        if math.isclose(b, 4 * (2 + k), rel_tol=1e-6):
            continue
        for other, buffers in STATE_BUFFERS.items():
            if math.isclose(b, 4 * (2 + buffers), rel_tol=1e-6):
                return (f"{opt!r} keeps {k} fp32 buffer(s) per parameter (you counted {buffers}, as for "
                        f"{other!r}): sgd none, momentum one, adam two (first and second moments)")
        return f"{opt!r}: 4 B weight + 4 B gradient + 4 B per optimizer buffer ({k}) per parameter"
    return "4 B weight + 4 B gradient + 4 B per optimizer buffer per parameter"


def check_model_state_gib(fn: Callable, cases: Sequence[tuple[float, str]], unknown: Sequence[str] = ()) -> None:
    """``fn(n_params, optimizer)`` for every case: GiB of fp32 weights, gradients and optimizer buffers; a
    ValueError naming the known optimizers for every name in ``unknown``."""
    got = []
    for n, optimizer in cases:
        gib = call(fn, n, optimizer, name="model_state_gib")
        if not isinstance(gib, numbers.Real) or isinstance(gib, bool):
            raise AssertionError(f"model_state_gib({n!r}, {optimizer!r}) returned {gib!r}: return a number of GiB.")
        got.append((n, optimizer, gib))
    for n, optimizer, gib in got:
        want = n * 4 * (2 + STATE_BUFFERS[optimizer]) / 2**30
        if not math.isclose(gib, want, rel_tol=1e-6):
            raise AssertionError(f"model_state_gib({n!r}, {optimizer!r}) = {gib:.6g}, expected {want:.6g} GiB: "
                                 f"{_bytes_hint(got)}.")
    for name in unknown:
        error = call(fn, 10, name, name="model_state_gib",
                     expect_error="an unknown optimizer has no known state size")
        if not all(known.lower() in str(error).lower() for known in STATE_BUFFERS):
            raise AssertionError(f"model_state_gib(10, {name!r}) raised ValueError({str(error)!r}): the message "
                                 f"should name the known optimizers {sorted(STATE_BUFFERS)}, so the caller "
                                 "can fix the call.")


# ---------------------------------------------------------------------------------------------------
# Q3: a float16 training step with a GradScaler, under DDP
# ---------------------------------------------------------------------------------------------------

# GradScaler's own errors, and what they mean for the step the student wrote
MISUSE_HINTS = {
    "No inf checks were recorded prior to update": (
        "scaler.update() found no scaler.step(optimizer) before it. Step through the scaler: it unscales "
        "the gradients and skips a step whose gradients overflowed; optimizer.step() alone applies "
        "gradients still multiplied by the scale."),
    "step() has already been called since the last update()": (
        "call scaler.update() after every scaler.step(optimizer): it halves the scale after an overflow "
        "and grows it after a run of good steps."),
    "unscale_() has already been called on this optimizer since the last update()": (
        "call scaler.unscale_(optimizer) at most once per step, and only when you need the true gradients "
        "before the step (to clip them): scaler.step(optimizer) unscales them itself."),
    "_scale is None": "Scale the loss before backward: scaler.scale(loss).backward().",
    "No inf checks were recorded for this optimizer": (
        "scaler.step(optimizer) found no gradients to check: run the backward of the scaled loss before it, "
        "and zero the gradients only after the step — you zeroed them before scaler.step."),
}
SCALER = dict(init_scale=2.0**10, growth_interval=2)   # grows within a few steps, so update() shows


def batches(sizes: list[int], batch: int, steps: int, seed: int, overflow: Sequence[int]):
    """``steps`` global batches ``(x, y)``; those at the steps in ``overflow`` have targets x 1e5 (their
    float16 gradients overflow)."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for step in range(steps):
        x = torch.randn(batch, sizes[0], generator=generator)
        y = torch.randn(batch, sizes[-1], generator=generator) * (1e5 if step in overflow else 1.0)
        out.append((x, y))
    return out


def reference_step(model, optimizer, scaler, x, y) -> float:
    """The recipe, in one process: what the student's step must do on every rank."""
    with torch.autocast(device_type=x.device.type, dtype=torch.float16):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    return loss.item()


class Recorder:
    """What one training run did, step by step: set :attr:`step` before each call of the step function.

    ``dtypes``: the first Linear's output dtype per forward; ``autocast_in_backward``/``_in_step``: whether
    autocast was on while the first weight's gradient was computed / while the optimizer stepped;
    ``opt_steps[i]``: the gradients (flattened, one tensor) ``optimizer.step`` saw in step ``i``, one entry
    per call; ``calls[i]``: the scaler's methods called in step ``i``.
    """

    def __init__(self, model: nn.Module, optimizer, scaler, steps: int):
        self.step = 0
        self.dtypes: list[torch.dtype] = []
        self.autocast_in_backward = self.autocast_in_step = False
        self.opt_steps: list[list[torch.Tensor]] = [[] for _ in range(steps)]
        self.calls: list[list[str]] = [[] for _ in range(steps)]
        module = model.module if hasattr(model, "module") else model
        first = next(m for m in module.modules() if isinstance(m, nn.Linear))
        first.register_forward_hook(lambda mod, inputs, output: self.dtypes.append(output.dtype))
        first.weight.register_hook(self._in_backward)
        params = list(module.parameters())
        real_step = optimizer.step

        def step(*args, **kwargs):
            self.autocast_in_step |= torch.is_autocast_enabled("cpu")
            grads = [torch.zeros_like(p) if p.grad is None else p.grad.detach() for p in params]
            self.opt_steps[self.step].append(torch.cat([g.flatten().double() for g in grads]))
            return real_step(*args, **kwargs)

        optimizer.step = step
        for name in ("scale", "unscale_", "step", "update"):
            setattr(scaler, name, self._counting(name, getattr(scaler, name)))

    def _in_backward(self, grad):
        self.autocast_in_backward |= torch.is_autocast_enabled("cpu")
        return grad

    def _counting(self, name: str, method):
        def counted(*args, **kwargs):
            self.calls[self.step].append(name)
            return method(*args, **kwargs)
        return counted


def train(step_fn, model, sizes: list[int], *, batch: int, steps: int, lr: float, seed: int,
          overflow: Sequence[int], rows=slice(None)) -> dict:
    """Run ``step_fn`` for ``steps`` batches (``rows`` of each: a rank's shard); what happened, per step."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler("cpu", **SCALER)
    record = Recorder(model, optimizer, scaler, steps)
    module = model.module if hasattr(model, "module") else model
    scales, losses, expected_losses, weights = [], [], [], []
    for step, (x, y) in enumerate(batches(sizes, batch, steps, seed, overflow)):
        x, y = x[rows], y[rows]
        with torch.no_grad(), torch.autocast(device_type="cpu", dtype=torch.float16):
            expected_losses.append(nn.functional.mse_loss(module(x), y).item())
        del record.dtypes[-1:]   # that forward was ours
        record.step = step
        loss = step_fn(model, optimizer, scaler, x, y)
        losses.append(loss if isinstance(loss, (float, int, type(None))) else repr(loss)[:60])
        scales.append(scaler._scale.item() if scaler._scale is not None else None)
        weights.append([p.detach().clone() for p in module.parameters()])
    return dict(weights=weights, scales=scales, dtypes=record.dtypes, losses=losses, expected_losses=expected_losses,
                opt_steps=record.opt_steps, calls=record.calls, autocast_in_backward=record.autocast_in_backward,
                autocast_in_step=record.autocast_in_step)


def amp_rank(rank: int, world_size: int, student_file: str, *, sizes: list[int], batch: int, steps: int,
             lr: float, seed: int, overflow: Sequence[int]) -> dict:
    """Harness (one rank): the student's ``amp_step`` on a DDP model and this rank's shards."""
    step_fn = student_function(load_student(student_file), "amp_step")
    model = DistributedDataParallel(mlp(sizes, seed=seed))
    result = train(step_fn, model, sizes, batch=batch, steps=steps, lr=lr, seed=seed, overflow=overflow,
                   rows=torch.from_numpy(shard(batch, rank, world_size)))
    del model
    gc.collect()
    return result


def _check_structure(got: dict, want: dict, overflow: Sequence[int]) -> None:
    """The forward's dtype, autocast around forward only, one optimizer step per good step and none on an
    overflow, and the gradients the optimizer saw (neither still scaled, nor unscaled twice, nor zeroed)."""
    steps = len(want["scales"])
    if not any(got["calls"]) and not any(got["opt_steps"]):
        raise AssertionError("amp_step changed no weight and left the scale alone: it still does nothing. Write "
                             "its body: forward and loss under autocast, scaled backward, scaler.step, "
                             "scaler.update, zero_grad.")
    if torch.float16 not in got["dtypes"]:
        ran = sorted({str(d).replace("torch.", "") for d in got["dtypes"]})
        hint = ("the forward ran in bfloat16: this step is float16's, dtype=torch.float16 (bfloat16 has float32's "
                "range and needs no loss scaling)" if torch.bfloat16 in got["dtypes"] else
                f"the forward ran in {', '.join(ran)}: run the forward and the loss inside "
                "torch.autocast(device_type=x.device.type, dtype=torch.float16)")
        raise AssertionError(hint + ".")
    if got["autocast_in_backward"] or got["autocast_in_step"]:
        where = "backward" if got["autocast_in_backward"] else "optimizer step"
        raise AssertionError(f"the {where} ran inside autocast: only the forward and the loss belong in the "
                             "`with torch.autocast(...)` block; the backward, scaler.step and scaler.update go "
                             "after it (the backward already runs each op in its forward's dtype).")
    for step in range(steps):
        n, n_want = len(got["opt_steps"][step]), len(want["opt_steps"][step])
        if n == n_want:
            continue
        if n > n_want and n_want == 0:
            raise AssertionError(f"step {step}'s float16 gradients overflowed (inf), and the optimizer stepped "
                                 "anyway: step through the scaler, scaler.step(optimizer), which skips such a "
                                 "step — do not call optimizer.step() yourself.")
        if n == 0 and step > min(overflow):
            raise AssertionError(f"the optimizer did not step in step {step}, although its gradients are finite: "
                                 "scaler.step skipped it because the gradients still held the inf of the "
                                 f"overflowing step {min(overflow)} — the inf gradients were never cleared. Zero "
                                 "the gradients after each step (optimizer.zero_grad()).")
        raise AssertionError(f"the optimizer stepped {n} times in step {step}, expected {n_want}: "
                             "scaler.step(optimizer) calls optimizer.step() itself (unless the gradients "
                             "overflowed); call it once per step and never optimizer.step() besides.")
    for step in range(steps):
        for seen, ref in zip(got["opt_steps"][step], want["opt_steps"][step]):
            ratio = float(seen @ ref / (ref @ ref))
            scale = want["scales"][step - 1] if step else SCALER["init_scale"]
            if not seen.isfinite().all() or abs(ratio - 1) < 0.05:
                continue
            if seen.abs().max() == 0:
                raise AssertionError(f"in step {step} the optimizer saw gradients that are all zero: you zeroed "
                                     "them before scaler.step(optimizer). Zero them after the step.")
            if ratio < 0.1:
                if "scale" not in got["calls"][step]:
                    raise AssertionError(f"in step {step} the optimizer saw gradients about {ratio:.2g} times the "
                                         "true ones: scaler.step divided gradients that were never scaled. Scale "
                                         "the loss before backward: scaler.scale(loss).backward().")
                raise AssertionError(f"in step {step} the optimizer saw gradients about {ratio:.2g} times the true "
                                     f"ones (1/{scale:g}): they were unscaled twice — scaler.step(optimizer) "
                                     "unscales them itself; do not divide them by the scale yourself.")
            if ratio > 10:
                raise AssertionError(f"in step {step} the optimizer saw gradients {ratio:.3g} times the true ones: "
                                     "still multiplied by the loss scale. Step through the scaler "
                                     "(scaler.step(optimizer) unscales them first).")
            raise AssertionError(f"in step {step} the optimizer saw gradients {ratio:.3g} times the true ones: "
                                 "backpropagate the scaled mean squared error of this rank's batch, once.")


def _check_rank(rank: int, got: dict, want: dict, names: list[str], overflow: Sequence[int]) -> None:
    """The weights stay finite, the scale follows the reference, the weights match it, the loss returned."""
    if not all(torch.isfinite(w).all() for w in got["weights"][-1]):
        raise AssertionError(f"rank {rank}: the weights became inf/NaN: an overflowing step's gradients were "
                             "applied. Step through the scaler, scaler.step(optimizer): it unscales the "
                             "gradients and skips a step whose gradients are not finite.")
    if got["scales"] != want["scales"]:
        after = got["scales"][min(overflow):]
        kept_halving = len(after) > 2 and all(b == a / 2 for a, b in zip(after, after[1:]))
        raise AssertionError(
            f"rank {rank}: the loss scale after each step was {got['scales']}, expected {want['scales']}. "
            + ("Every step after the overflow overflowed too: the inf gradients were never cleared. Zero the "
               "gradients after each step (optimizer.zero_grad())." if kept_halving else
               "One scaler.step and one scaler.update per step, on the scaled loss's gradients: a step whose "
               "gradients overflow is skipped and halves the scale."))
    for step in range(len(want["scales"])):
        for name, w, r in zip(names, got["weights"][step], want["weights"][step]):
            error = float((w - r).abs().max())
            if error > 2e-3 + 2e-2 * float(r.abs().max()):   # float16 sums in another order: loose on purpose
                raise AssertionError(f"rank {rank}: after step {step}, `{name}` differs from one process by "
                                     f"{error:.3g}. Did you zero the gradients after each step "
                                     "(optimizer.zero_grad())?")
    for step, (loss, expected) in enumerate(zip(got["losses"], got["expected_losses"])):
        if not isinstance(loss, float):
            raise AssertionError(f"rank {rank}: amp_step returned {loss!r} in step {step}: return the loss as a "
                                 "float, loss.item().")
        if not math.isclose(loss, expected, rel_tol=5e-3, abs_tol=1e-4):
            scaled = math.isclose(loss, expected * (want["scales"][step - 1] if step else SCALER["init_scale"]),
                                  rel_tol=5e-3)
            raise AssertionError(f"rank {rank}: amp_step returned {loss:.6g} in step {step}, but this rank's mean "
                                 f"squared error was {expected:.6g}: "
                                 + ("you returned the scaled loss; return the loss itself, loss.item()."
                                    if scaled else "return loss.item() of the loss you backpropagated."))


def check_amp_step(student_file: str, *, world_size: int = 2, sizes: tuple[int, ...] = (8, 16, 4), batch: int = 16,
                   steps: int = 6, lr: float = 0.05, seed: int = 0, overflow: Sequence[int] = (2,)) -> None:
    """Run the student's ``amp_step`` for ``steps`` steps on ``world_size`` ranks (the steps in ``overflow``
    with float16 gradients that overflow); compare what happened with one process; fail with the cause."""
    sizes, overflow = list(sizes), tuple(overflow)
    try:
        results = run_ranks(amp_rank, student_file, world_size, sizes=sizes, batch=batch, steps=steps, lr=lr,
                            seed=seed, overflow=overflow)
    except AssertionError as failure:
        hints = [hint for error, hint in MISUSE_HINTS.items() if error in str(failure)]
        raise AssertionError("\n".join([str(failure), *hints])) from None
    with torch.random.fork_rng():
        model = mlp(sizes, seed=seed)
    names = [n for n, _ in model.named_parameters()]
    want = train(reference_step, model, sizes, batch=batch, steps=steps, lr=lr, seed=seed, overflow=overflow)
    _check_same_gradients(results)   # before comparing with one process: names the cause
    for rank, got in enumerate(results):
        _check_structure(got, want, overflow)
        _check_rank(rank, got, want, names, overflow)


def _check_same_gradients(results: list[dict]) -> None:
    """DDP averages the gradients: every rank's optimizer must see the same ones at every step."""
    for rank, got in enumerate(results[1:], start=1):
        for step, (mine, first) in enumerate(zip(got["opt_steps"], results[0]["opt_steps"])):
            if any(not torch.allclose(a, b, rtol=1e-5, atol=1e-8, equal_nan=True) for a, b in zip(mine, first)):
                raise AssertionError(f"in step {step} ranks 0 and {rank} stepped with different gradients: nothing "
                                     "averaged them. Run the forward through ddp_model itself (not ddp_model.module): "
                                     "DDP all-reduces the gradients during backward.")


# ---------------------------------------------------------------------------------------------------
# The planted wrong answers (tools/mutants.py, tests/test_mutants.py)
# ---------------------------------------------------------------------------------------------------

MUTANTS = {
    "q1": (
        Mutant("2**16 taken as fp16's max", "fp16's largest finite value is 65504",
               edits=(("fp16_max = torch.finfo(torch.float16).max", "fp16_max = 2.0**16"),)),
        Mutant("bfloat16's range", "that is bfloat16's or float32's range",
               edits=(("torch.finfo(torch.float16).max", "torch.finfo(torch.bfloat16).max"),)),
        Mutant("strict <: exactly 65504 refused", "exactly 65504 still fits",
               edits=(("while max_abs_grad * scale * 2 <= fp16_max:", "while max_abs_grad * scale * 2 < fp16_max:"),)),
        Mutant("never below 1", "a scale below 1 is needed",
               edits=(("    while max_abs_grad * scale > fp16_max:\n        scale /= 2\n", ""),)),
        Mutant("one power of two too large", "one power of two too large",
               edits=(("    return scale\n", "    return scale * 2\n"),)),
        Mutant("zero accepted", "loss_scale_for(0.0) returned",
               edits=(("if not max_abs_grad > 0:", "if max_abs_grad < 0:"),)),
        Mutant("NaN accepted", "loss_scale_for(nan) returned",
               edits=(("if not max_abs_grad > 0:", "if max_abs_grad <= 0:"),)),
    ),
    "q2": (
        Mutant("GB instead of GiB", "a GiB is 2**30 bytes", edits=(("/ 2**30", "/ 1e9"),)),
        Mutant("gradients forgotten", "you forgot the gradients",
               edits=(("(2 + state_buffers[optimizer])", "(1 + state_buffers[optimizer])"),)),
        Mutant("2 bytes per value", "4 bytes each, not 2", edits=(("n_params * 4 *", "n_params * 2 *"),)),
        Mutant("Adam with one buffer", "'adam' keeps 2 fp32 buffer(s)", edits=(('"adam": 2', '"adam": 1'),)),
        Mutant("momentum without a buffer", "'momentum' keeps 1 fp32 buffer(s)",
               edits=(('"momentum": 1', '"momentum": 0'),)),
        Mutant("unknown optimizer: KeyError", "raised KeyError",
               edits=(("if optimizer not in state_buffers:", "if optimizer is None:"),)),
        Mutant("error without the known names", "should name the known optimizers",
               edits=(("; known: {sorted(state_buffers)}", ""),)),
    ),
    "q3": (
        Mutant("loss not scaled", "Scale the loss before backward",
               edits=(("scaler.scale(loss).backward()", "loss.backward()"),)),
        Mutant("optimizer.step instead of scaler.step", "Step through the scaler",
               edits=(("scaler.step(optimizer)", "optimizer.step()"),)),
        Mutant("no scaler.update", "call scaler.update() after every scaler.step",
               edits=(("    scaler.update()  ", "    pass  "),)),
        Mutant("unscale_ called twice", "at most once per step",
               edits=(("    scaler.step(optimizer)", "    scaler.unscale_(optimizer)\n    scaler.unscale_(optimizer)\n"
                       "    scaler.step(optimizer)"),)),
        Mutant("gradients divided by the scale by hand, then scaler.step", "unscaled twice",
               edits=(("    scaler.step(optimizer)", "    for p in ddp_model.parameters():\n"
                       "        p.grad /= scaler.get_scale()\n    scaler.step(optimizer)"),)),
        Mutant("autocast to bfloat16", "the forward ran in bfloat16",
               edits=(("dtype=torch.float16", "dtype=torch.bfloat16"),)),
        Mutant("autocast around the backward", "the backward ran inside autocast",
               edits=(("\n    scaler.scale(loss).backward()", "\n        scaler.scale(loss).backward()"),)),
        Mutant("gradients never zeroed", "the inf gradients were never cleared",
               edits=(("    optimizer.zero_grad()\n", ""),)),
        Mutant("gradients zeroed before the step", "you zeroed them before scaler.step",
               edits=(("    optimizer.zero_grad()\n", ""),
                      ("    scaler.step(optimizer)", "    optimizer.zero_grad()\n    scaler.step(optimizer)"))),
        Mutant("optimizer.step besides scaler.step", "never optimizer.step() besides",
               edits=(("    scaler.step(optimizer)", "    scaler.step(optimizer)\n    optimizer.step()"),)),
        Mutant("DDP bypassed", "nothing averaged them", edits=(("ddp_model(x)", "ddp_model.module(x)"),)),
        Mutant("scaled loss returned", "you returned the scaled loss",
               edits=(("return loss.item()", "return scaler.scale(loss).item()"),)),
        Mutant("update before the step", "found no scaler.step(optimizer) before it",
               edits=(("    scaler.step(optimizer)", "    scaler.update()\n    scaler.step(optimizer)"),
                      ("    scaler.update()  ", "    pass  "))),
    ),
}
