"""Exercises 07: MXNet's kvstore arithmetic, its successors, and a real ``dist_sync`` step.

- q1: ``server_update(worker_grads, lr, n)`` and ``effective_lr(lr, n, global_batch)``, checked
  against NumPy; a wrong value is matched against the classic mistakes (averaging instead of
  summing, the wrong n, the sign, integer division...) to say which one it is.
- q2: the ``successor`` table, checked against the grader's own ``OPTIONS`` (a student's edited list
  does not count), with what each MXNet construct did.
- q3: the student's ``sync_sgd_step(kv, weight, grad, n_local, lr)`` in a ``%%writefile`` file runs
  on a real parameter-server job — a scheduler, a server and 2 or 3 workers on 127.0.0.1
  (:mod:`course_utils.mxcluster`) — in the MXNet environment ``.venv-mxnet``. Workers get
  **unequal** numbers of examples per step (sometimes none), so only the summed gradient divided by
  the summed count is right. Every kvstore call is recorded; the check looks at which keys each
  worker pushed and pulled, in which order, then at every step's new weights against NumPy.

This module imports neither MXNet nor PyTorch: the grading side runs in the course's main
environment, which has no MXNet. Run as ``python -m grading.mxnet_kvstore FOLDER`` (in
``.venv-mxnet``, by the check) it is one process of the job: the worker harness.
"""
from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .mutant import Mutant
from .student import load_student, student_function

ROOT = Path(__file__).resolve().parents[1]
MXNET_PYTHON = ROOT / ".venv-mxnet" / "bin" / "python"
GRAD, COUNT = "grad", "count"          # the q3 keys the harness initialises (zeros) on the server
STEP_TIMEOUT_S = 15.0                  # a worker stuck this long in one step is reported (steps take ms)


# ------------------------------------------------------------------------------------------------
# small helpers
# ------------------------------------------------------------------------------------------------
def _call(fn: Callable, label: str, *args: Any) -> Any:
    """``fn(*args)``; an exception the student's code raises becomes feedback naming the call."""
    try:
        return fn(*args)
    except Exception as error:   # noqa: BLE001 - whatever the student's function raises, said plainly
        raise AssertionError(f"{label} raised {type(error).__name__}: {error}") from None


def _unanswered(value: Any, label: str) -> None:
    if value is None or value is Ellipsis:
        raise AssertionError(f"{label} returned {value!r}: replace the `...` with your answer.")


def _matching(got: np.ndarray, want: np.ndarray, candidates: Sequence[tuple[Any, str]],
              rtol: float = 1e-6, atol: float = 1e-12) -> str | None:
    """The hint of the first candidate wrong answer ``got`` equals (and the right one does not)."""
    for value, hint in candidates:
        value = np.asarray(value, dtype=float)
        if (value.shape == got.shape and np.all(np.isfinite(value)) and np.allclose(got, value, rtol=rtol, atol=atol)
                and not np.allclose(value, want, rtol=rtol, atol=atol)):
            return hint
    return None


# ------------------------------------------------------------------------------------------------
# q1: the server's update and the learning rate it amounts to
# ------------------------------------------------------------------------------------------------
def check_server_update(server_update: Callable, worker_grads: Sequence[Any], lr: float, n: int) -> None:
    """Check ``server_update(worker_grads, lr, n) == -lr * sum(worker_grads) / n`` (the change of the
    weights, one entry per weight); fail naming the mistake when the value is a classic wrong one."""
    grads = [np.array(g, dtype=float) for g in worker_grads]
    label = f"server_update(<{len(grads)} gradients of shape {grads[0].shape}>, lr={lr}, n={n})"
    before = [g.copy() for g in grads]
    got = _call(server_update, label, grads, lr, n)
    if not all(np.array_equal(g, b) for g, b in zip(grads, before)):
        raise AssertionError(f"{label} changed the workers' gradient arrays in place (`+=` on one of them): "
                             "the caller's gradients are not yours to change. Build a new array, e.g. "
                             "np.sum(worker_grads, axis=0).")
    _unanswered(got, label)
    try:
        got = np.asarray(got, dtype=float)
    except (TypeError, ValueError):
        raise AssertionError(f"{label} returned {type(got).__name__} {got!r:.80}: return a NumPy array, the change "
                             "of the weights (one entry per weight).") from None
    total = np.sum(grads, axis=0)
    want = -lr * total / n
    if got.shape != want.shape:
        raise AssertionError(f"{label} has shape {got.shape}, expected {want.shape}: add the workers' gradients "
                             "element by element (over the list, axis 0), so that every weight keeps its own "
                             "entry; np.sum without axis adds everything into one number.")
    if np.allclose(got, want, rtol=1e-6, atol=1e-12):
        return
    workers = len(grads)
    hint = _matching(got, want, [
        (-lr * total / (n * workers), "you averaged the workers' gradients (or divided by the number of workers "
                                      "as well as by n): the server SUMS them, and trainer.step(n) divides that sum "
                                      "by n only."),
        (-lr * total / workers, "you divided by the number of workers instead of by n: trainer.step(n) divides the "
                                "server's sum by n, the number of examples the step covers."),
        (lr * total / n, "your change points uphill: SGD moves against the gradient, so the change is "
                         "-lr * sum / n (the new weights are the old ones plus it)."),
        (-total / n, "you left out the learning rate: the change is -lr * sum / n."),
        (-lr * total, "you did not divide by n: trainer.step(n) divides the summed gradient by n."),
        (-lr * grads[0] / n, "you used only the first worker's gradient: the server adds the gradients of "
                             "every worker."),
    ])
    worst = float(np.max(np.abs(got - want)))
    raise AssertionError(f"{label} is off by up to {worst:.3g}. " + (
        hint or "The change is -lr * (the workers' gradients added element by element) / n."))


def check_effective_lr(effective_lr: Callable, lr: float, n: int, global_batch: int) -> None:
    """Check ``effective_lr(lr, n, global_batch) == lr * global_batch / n``; name a classic wrong one."""
    label = f"effective_lr({lr}, {n}, {global_batch})"
    got = _call(effective_lr, label, lr, n, global_batch)
    _unanswered(got, label)
    try:
        got = float(got)
    except (TypeError, ValueError):
        raise AssertionError(f"{label} returned {got!r}: return a number (the learning rate).") from None
    want = lr * global_batch / n
    if np.isclose(got, want, rtol=1e-9, atol=0):
        return
    hint = _matching(np.asarray(got), np.asarray(want), [
        (lr * n / global_batch, "it is upside down: trainer.step(n) on a sum over global_batch examples makes "
                                "every step global_batch / n times the averaged one, so multiply lr by that."),
        (lr, "you returned lr unchanged: dividing a sum over global_batch examples by n (not by global_batch) "
             "makes every step global_batch / n times longer."),
        (lr * (global_batch // n), "you used integer division (//): global_batch / n need not be a whole number "
                                   "(160 examples, trainer.step(64): 2.5 times the learning rate)."),
        (lr * global_batch, "you did not divide by n: the factor is global_batch / n."),
    ], rtol=1e-9)
    raise AssertionError(f"{label} is {got:.6g}, expected {want:.6g}. " + (
        hint or "A step divided by n on a sum over global_batch examples is global_batch / n times the averaged one."))


# ------------------------------------------------------------------------------------------------
# q2: where MXNet's constructs went
# ------------------------------------------------------------------------------------------------
OPTIONS = ["DistributedDataParallel", "torch.compile", "torch.cuda.synchronize()", "torch.device",
           "dividing by the world size", "torch.export"]
SUCCESSORS = {
    "mx.gpu(i) / mx.cpu() contexts": "torch.device",
    "split_and_load + Trainer(kvstore='device')": "DistributedDataParallel",
    "net.hybridize()": "torch.compile",
    "mx.nd.waitall()": "torch.cuda.synchronize()",
    "trainer.step(global batch size)": "dividing by the world size",
}
WHAT_IT_DID = {
    "mx.gpu(i) / mx.cpu() contexts": "a context only names the device an array or a model lives on: pick the "
                                     "PyTorch object that names a device.",
    "split_and_load + Trainer(kvstore='device')": "split_and_load + a Trainer over a kvstore is data parallelism "
                                                  "(a model copy per device, the batch split, the gradients summed): "
                                                  "pick PyTorch's data-parallel wrapper.",
    "net.hybridize()": "hybridize() traces the network into a graph that runs without Python between operators, "
                       "to run faster: pick the one that compiles a model for speed.",
    "mx.nd.waitall()": "mx.nd.waitall() blocks until the asynchronous engine has finished the work queued so far: "
                       "pick the call that waits for queued GPU work.",
    "trainer.step(global batch size)": "trainer.step(n) divides the summed gradient by n: in PyTorch that "
                                       "division is the averaging over the ranks (DDP does it for you), not a "
                                       "wrapper or a device.",
}
CONFUSIONS = {
    ("net.hybridize()", "torch.export"): "torch.export captures a graph to save and deploy it; hybridize()'s point in "
                                         "the chapter is speed: running the traced graph without Python in between.",
    ("trainer.step(global batch size)", "DistributedDataParallel"): "DistributedDataParallel is the successor of "
        "split_and_load + Trainer (the whole data-parallel setup); trainer.step(global batch)'s part is only the "
        "division of the summed gradient.",
}


def check_successors(successor: Any, keys: Sequence[str] | None = None) -> None:
    """Check the ``successor`` table: the five constructs as keys, every value one of the grader's
    :data:`OPTIONS`, and the right successor for each construct in ``keys`` (default: all)."""
    if not isinstance(successor, dict) or set(successor) != set(SUCCESSORS):
        given = sorted(successor) if isinstance(successor, dict) else type(successor).__name__
        raise AssertionError(f"successor must be a dict with exactly the 5 MXNet constructs as keys, unchanged "
                             f"(fill in the values only); it has {given}.")
    for key, value in successor.items():
        if value is None or value is Ellipsis:
            raise AssertionError(f"successor[{key!r}] is still {value!r}: replace each None with one string from "
                                 "OPTIONS.")
        if value not in OPTIONS:
            raise AssertionError(f"successor[{key!r}] is {value!r}, which is not one of OPTIONS: copy the string "
                                 f"exactly, from the list as given ({OPTIONS}).")
    for key in keys or SUCCESSORS:
        value = successor[key]
        if value != SUCCESSORS[key]:
            why = CONFUSIONS.get((key, value), WHAT_IT_DID[key])
            raise AssertionError(f"successor[{key!r}] is {value!r}, not its successor: {why}")
    used = {}
    for key, value in successor.items():
        if value in used:
            raise AssertionError(f"you gave {value!r} for both {used[value]!r} and {key!r}: each construct has its "
                                 "own successor, so one of the two is wrong.")
        used[value] = key


# ------------------------------------------------------------------------------------------------
# q3, grading side (.venv): the job, and what its workers reported
# ------------------------------------------------------------------------------------------------
TRAMPOLINE = '''"""Started by course_utils.mxcluster with the course's Python: become MXNet's Python."""
import os
import sys

os.execv({python!r}, [{python!r}, "-m", "grading.mxnet_kvstore", *sys.argv[1:]])
'''


def mxnet_python(python: str | os.PathLike = MXNET_PYTHON) -> Path:
    """The Python of the MXNet environment, or feedback saying how to create it."""
    python = Path(python)
    if not python.is_file():
        raise AssertionError(f"This check runs your file on a real MXNet job, in the course's second environment "
                             f"{python.parent.parent.name}, which this machine does not have ({python} is missing). "
                             f"Create it: run `make venv` in the course folder {ROOT} (first time ~5 min), then "
                             "run this cell again.")
    return python


def job_data(counts: Sequence[Sequence[int]], dim: int, seed: int) -> dict[str, np.ndarray]:
    """The job's data: initial weights ``w0`` (dim,) and, for step t and worker r, ``X_t_r``
    (counts[t][r], dim) and ``y_t_r`` (counts[t][r],) of a noisy linear regression."""
    rng = np.random.default_rng(seed)
    data = {"w0": rng.standard_normal(dim)}
    truth = rng.standard_normal(dim)
    for t, row in enumerate(counts):
        for r, n in enumerate(row):
            X = rng.standard_normal((n, dim))
            data[f"X_{t}_{r}"], data[f"y_{t}_{r}"] = X, X @ truth + 0.1 * rng.standard_normal(n)
    return data


def check_kvstore_step(student_file: str | os.PathLike, *, counts: Sequence[Sequence[int]] = ((3, 1), (2, 6), (5, 3)),
                       dim: int = 3, lr: float = 0.05, seed: int = 0, timeout_s: float = 120.0,
                       python: str | os.PathLike = MXNET_PYTHON) -> None:
    """Run the student's ``sync_sgd_step`` on an MXNet ``dist_sync`` job; fail with what went wrong.

    ``counts[t][r]``: how many examples worker r holds at step t (one row per step, one column per
    worker: ``len(counts[0])`` workers). Each worker computes the gradient of its summed squared
    error (NumPy), calls the student's step and goes on from the weights it returns. Every step of
    every worker must equal ``w - lr * (sum of all workers' gradients) / (sum of their counts)``.
    """
    from course_utils.mxcluster import run
    from course_utils.subprocesses import CommandError

    python = mxnet_python(python)
    student_file = Path(student_file).resolve()
    load_syntax(student_file)
    workers = len(counts[0])
    with tempfile.TemporaryDirectory(prefix="ex07_kvstore_") as name:
        folder = Path(name)
        np.savez(folder / "data.npz", **job_data(counts, dim, seed))
        (folder / "config.json").write_text(json.dumps(dict(student_file=str(student_file), steps=len(counts),
                                                            dim=dim, lr=lr, step_timeout_s=STEP_TIMEOUT_S)))
        trampoline = folder / "ex07_trampoline.py"
        trampoline.write_text(TRAMPOLINE.format(python=str(python)))
        failure = None
        try:
            run(trampoline, str(folder), workers=workers, timeout_s=timeout_s, env={"PYTHONPATH": str(ROOT)})
        except CommandError as error:
            failure = str(error)
        reports = {r: _read_report(folder / f"worker{r}.json") for r in range(workers)}
    judge(reports, failure, counts, lr)


def load_syntax(student_file: Path) -> None:
    """Feedback, before anything starts, for a missing file or one that is not valid Python."""
    if not student_file.is_file():
        raise AssertionError(f"{student_file} does not exist: run the %%writefile cell that writes it first.")
    try:
        compile(student_file.read_text(), str(student_file), "exec")
    except SyntaxError as error:
        raise AssertionError(f"{student_file.name}, line {error.lineno}: {error.msg}: "
                             f"{(error.text or '').strip()}") from None


def _read_report(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def judge(reports: dict[int, dict | None], failure: str | None, counts: Sequence[Sequence[int]], lr: float) -> None:
    """Turn the workers' reports (and the launcher's failure, if any) into feedback, most telling first:
    the student's exception, a kvstore call missing or out of order, a hang, a wrong step."""
    for report in reports.values():
        if report and report["status"] == "error":
            raise AssertionError(report["message"])
    calls_problem = structure_problem(reports, len(counts))
    if calls_problem:
        raise AssertionError(calls_problem + (" (The job hung: the other workers waited for it until the timeout.)"
                                         if failure else ""))
    stuck = [r for r in reports.values() if r and r["status"] == "stuck"]
    if stuck:
        raise AssertionError(stuck[0]["message"])
    if failure:
        raise AssertionError(_launch_failure(failure))
    missing = [rank for rank, report in reports.items() if not report or report["status"] != "done"]
    if missing:
        raise AssertionError(f"worker {missing[0]} did not finish its steps, and no error was reported.")
    step_problem = wrong_step(reports, counts, lr)
    if step_problem:
        raise AssertionError(step_problem)


def _launch_failure(text: str) -> str:
    """Feedback for a job that timed out or lost a process without any worker reporting why."""
    if any(f"No module named '{name}'" in text for name in ("mxnet", "course_utils", "grading")):
        return ("The MXNet environment .venv-mxnet is incomplete (its Python cannot import MXNet, course_utils or "
                f"grading): run `make venv` in the course folder {ROOT}, then run this cell again.")
    if "timed out" in text:
        return ("The MXNet job timed out and was killed. Under dist_sync the server answers a pull only when every "
                "worker has pushed that key in this step, so one worker that skips a push (or calls kv.barrier() "
                "alone) makes the others wait forever: every worker must make the same kvstore calls in each step. "
                "(A worker whose process exits in the middle, with os._exit, leaves the others waiting too.)")
    code = re.search(r"command (\d+) .*? failed with exit code (-?\d+)", text)
    role = "a process"
    if code:
        index = int(code.group(1))
        role = "the scheduler" if index == 0 else "the server" if index == 1 else f"worker process {index - 2}"
    return (f"{role} of the MXNet job exited ({'exit code ' + code.group(2) if code else 'failed'}) before the "
            "workers reported: did your file exit the process (sys.exit, os._exit) or crash it?")


def _steps_calls(report: dict | None, step: int) -> tuple[list[tuple[str, str]], bool]:
    """``([(operation, key), ...], ended)``: one worker's kvstore calls in ``step`` and whether the step ended."""
    if not report:
        return [], False
    calls = [(op, key) for t, op, key in report["calls"] if t == step]
    ended = step < len(report["steps"])
    return calls, ended


KEY_WORDS = {GRAD: "its gradient", COUNT: "its example count"}
NEVER_PUSHED = {
    GRAD: "the server never saw the gradients, so each worker stepped with its own examples only (local only). "
          "kv.push('grad', grad) sends this worker's gradient; the server adds the pushes of all workers.",
    COUNT: "no worker knows the global batch on its own: workers hold different numbers of examples (n_local * "
           "kv.num_workers is right only when every shard is equal). Push mx.nd.array([n_local]) to 'count' and "
           "pull the sum.",
}


def structure_problem(reports: dict[int, dict | None], steps: int) -> str | None:
    """What is wrong with the kvstore calls the workers made (pushes and pulls of 'grad' and 'count'
    per step), or None. Works on a hung job's partial reports too."""
    for t in range(steps):
        per_rank = {rank: _steps_calls(report, t) for rank, report in reports.items()}
        for key in (GRAD, COUNT):
            pushers = sorted(r for r, (calls, _) in per_rank.items() if ("push", key) in calls)
            for rank, (calls, ended) in per_rank.items():
                pushes = [i for i, call in enumerate(calls) if call == ("push", key)]
                pulls = [i for i, call in enumerate(calls) if call == ("pull", key)]
                if not pushes and ended:
                    if pushers:
                        return (f"worker {rank} did not push {KEY_WORDS[key]} to {key!r} in step {t}, while worker "
                                f"{pushers[0]} did: every worker must push, not only some (no `if kv.rank == 0:` "
                                "around a push). Under dist_sync the server adds a key's pushes only when every "
                                "worker has pushed it; until then the pushing workers wait.")
                    return f"no worker pushed {KEY_WORDS[key]} to {key!r} in step {t}: " + NEVER_PUSHED[key]
                if len(pushes) > 1:
                    return (f"worker {rank} pushed {key!r} {len(pushes)} times in step {t}: the server adds every "
                            "push, so this worker's share counts more than once. Push once per step.")
                if pulls and (not pushes or pulls[0] < pushes[0]):
                    return (f"worker {rank} pulled {key!r} before pushing it in step {t}: a pull made before the "
                            "push returns what the server held before this step (the previous step's sum, zeros "
                            "at the first). Push first, then pull: the pull then waits for the sum of this step.")
                if ended and not pulls:
                    return (f"worker {rank} pushed {key!r} but never pulled it in step {t}: the sum of all "
                            f"workers' pushes comes back only with kv.pull({key!r}, out=...).")
    return None


def wrong_step(reports: dict[int, dict], counts: Sequence[Sequence[int]], lr: float) -> str | None:
    """The first step of a worker whose new weights are not ``w - lr * sum(grads) / sum(counts)``, and the
    classic mistake it matches; None when every step of every worker is right."""
    workers = len(reports)
    for t in range(len(counts)):
        records = {rank: report["steps"][t] for rank, report in reports.items()}
        total = np.sum([np.array(rec["g"]) for rec in records.values()], axis=0)
        examples = sum(rec["n"] for rec in records.values())
        means = [np.array(rec["g"]) / rec["n"] for rec in records.values() if rec["n"]]
        for rank, rec in sorted(records.items()):
            w, g, n, got = np.array(rec["w"]), np.array(rec["g"]), rec["n"], np.array(rec["out"])
            want = w - lr * total / examples
            if np.allclose(got, want, rtol=1e-5, atol=1e-5):
                continue
            where = (f"worker {rank}, step {t} (this worker {n} examples, all {workers} workers {examples}): the new "
                     f"weights are off by up to {float(np.max(np.abs(got - want))):.3g}")
            if not np.all(np.isfinite(got)):
                return (f"{where}; they contain inf or NaN: a division by zero. Worker {rank} held {n} examples in "
                        "this step: divide by the summed count pulled from 'count', which counts every worker's "
                        "examples." if n == 0 else f"{where}; they contain inf or NaN.")
            hint = _matching(got, want, [
                (w - lr * total / n if n else np.inf, "you divided the sum of all workers' gradients by this "
                 "worker's own example count (n_local: MXNet's trainer.step(local batch) bug); divide by the summed "
                 "count pulled from 'count'."),
                (w - lr * total / (n * workers) if n else np.inf, "you multiplied this worker's count by the number "
                 "of workers: workers hold different numbers of examples, so use the summed count pulled from "
                 "'count'."),
                (w - lr * total / examples / workers, "you divided twice: by the summed count and again by the "
                 "number of workers. The server SUMS the pushes; the summed count is the whole division."),
                (w - lr * g / n if n else np.inf, "this worker stepped with its own gradient only (local only): "
                 "use the sum pulled from 'grad', which holds every worker's gradient."),
                (w - lr * np.sum(means, axis=0) / workers, "you averaged the workers' mean gradients: with unequal "
                 "counts that weighs a small worker's examples more. Push the summed gradient and the count, and "
                 "divide the summed gradient by the summed count."),
                (w + lr * total / examples, "your step points uphill: subtract lr * sum / count from the weights."),
                (w - total / examples, "you left out the learning rate lr."),
                (w - lr * total, "you did not divide by the summed count pulled from 'count'."),
                (w, "this worker returned its weights unchanged: every worker applies the step to its own copy "
                    "(the server only adds the pushes)."),
            ], rtol=1e-4, atol=1e-5)
            return f"{where}. " + (hint or "Expected weight - lr * (sum of all workers' gradients) / (sum of their "
                                           "counts).")
    return None


# ------------------------------------------------------------------------------------------------
# q3, worker side (.venv-mxnet): python -m grading.mxnet_kvstore FOLDER
# ------------------------------------------------------------------------------------------------
class StudentMistake(Exception):
    """Feedback the harness reports as it is (the student's function returned something unusable)."""


class Report:
    """One worker's report, ``FOLDER/worker<rank>.json``: its kvstore calls, its steps, its status.
    Rewritten atomically after every step, so a killed or stuck worker leaves what it did."""

    def __init__(self, path: Path, rank: int):
        self.path, self.rank = path, rank
        self.data = dict(rank=rank, status="running", message="", calls=[], steps=[])
        self.lock = threading.Lock()

    def write(self, **changes: Any) -> None:
        with self.lock:
            self.data.update(changes)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.data))
            os.replace(tmp, self.path)


def _as_list(value: Any) -> Any:
    """An NDArray, a NumPy array or a list of them, as nested lists (summed when a list: the kvstore
    adds the arrays of one push)."""
    if isinstance(value, (list, tuple)):
        value = sum(v.asnumpy() if hasattr(v, "asnumpy") else np.asarray(v) for v in value)
    return np.asarray(value.asnumpy() if hasattr(value, "asnumpy") else value, dtype=float).tolist()


class RecordingKV:
    """The job's kvstore as the student's function sees it: every call is passed on to MXNet and
    recorded as ``[step, operation, key]`` in the report (``pushpull`` is a push, then a pull)."""

    def __init__(self, kv: Any, report: Report):
        self._kv, self._report, self.step = kv, report, -1

    rank = property(lambda self: self._kv.rank)
    num_workers = property(lambda self: self._kv.num_workers)
    type = property(lambda self: self._kv.type)

    def _record(self, op: str, key: Any) -> None:
        for k in key if isinstance(key, (list, tuple)) else [key]:
            self._report.data["calls"].append([self.step, op, str(k)])

    def push(self, key, value, *args, **kwargs):
        self._record("push", key)
        return self._kv.push(key, value, *args, **kwargs)

    def pull(self, key, *args, **kwargs):
        if (args[0] if args else kwargs.get("out")) is None:
            raise StudentMistake("kv.pull(key) returns nothing: it fills the NDArray you pass as out= "
                                 "(kv.pull(key, out=array)), which must exist before the call.")
        self._record("pull", key)
        return self._kv.pull(key, *args, **kwargs)

    def pushpull(self, key, value, *args, **kwargs):
        self._record("push", key)
        self._record("pull", key)
        return self._kv.pushpull(key, value, *args, **kwargs)

    def __getattr__(self, name):   # init, barrier, set_optimizer...: recorded, then MXNet's own
        attr = getattr(self._kv, name)
        if not callable(attr):
            return attr

        def recorded(*args, **kwargs):
            self._record(name, args[0] if args else "")
            return attr(*args, **kwargs)
        return recorded


def student_error(error: BaseException, student_file: str, where: str) -> str:
    """The student's exception in their own terms: what it said and the lines of their file it passed."""
    if isinstance(error, StudentMistake):
        return f"{where}: {error}"
    text = str(error)
    if "MXNetError" in text or type(error).__name__ == "MXNetError":
        found = re.findall(r"MXNetError: (.*)", text)    # MXNet's message follows its C++ trace
        text = found[-1] if found else text.splitlines()[-1]
    text = text.split("Stack trace")[0].strip()[:400]
    name = os.path.basename(student_file)
    mine = [f"  {name}, line {f.lineno}, in {f.name}: {(f.line or '').strip()}"
            for f in traceback.extract_tb(error.__traceback__) if f.filename == student_file]
    return (f"{where}: sync_sgd_step raised {type(error).__name__}: {text}"
            + ("\nin your code:\n" + "\n".join(mine) if mine else ""))


def _as_weights(out: Any, dim: int) -> np.ndarray:
    """The weights the student's step returned, as float64 (dim,); a clear mistake otherwise."""
    if out is None or out is Ellipsis:
        raise StudentMistake("sync_sgd_step returned None: it still does nothing. Push this worker's gradient "
                             "to 'grad' and its example count to 'count', pull both sums, and return "
                             "weight - lr * summed gradient / summed count.")
    if not hasattr(out, "asnumpy") and not isinstance(out, np.ndarray):
        raise StudentMistake(f"sync_sgd_step returned a {type(out).__name__}: return the new weights, an "
                             f"NDArray of shape ({dim},).")
    array = np.asarray(out.asnumpy() if hasattr(out, "asnumpy") else out, dtype=float)
    if array.shape != (dim,):
        raise StudentMistake(f"sync_sgd_step returned shape {array.shape}: the new weights have the weights' "
                             f"shape ({dim},). (Dividing by an array of shape (1,) keeps the shape; check what you "
                             "pulled into.)")
    return array


def _watchdog(report: Report, step: int, seconds: float) -> threading.Timer:
    def stuck():
        report.write(status="stuck", message=(
            f"worker {report.rank} waited more than {seconds:g} s in step {step} (a step takes milliseconds): a pull "
            "waits until every worker has pushed that key in this step, and a barrier until every worker calls "
            "it. Every worker must make the same kvstore calls in each step (no `if kv.rank == 0:`)."))
        os._exit(4)
    timer = threading.Timer(seconds, stuck)
    timer.daemon = True
    timer.start()
    return timer


def worker(folder: Path) -> None:
    """One process of the q3 job: a scheduler or server serves inside ``import mxnet``; a worker runs
    the student's step on its data for every step and reports to ``folder/worker<rank>.json``."""
    import mxnet as mx  # a scheduler or server process runs its loop inside this import and exits

    if os.environ.get("DMLC_ROLE", "worker") != "worker":
        return
    config = json.loads((folder / "config.json").read_text())
    kv = mx.kv.create("dist_sync")
    rank, dim = kv.rank, config["dim"]
    report = Report(folder / f"worker{rank}.json", rank)
    report.write()
    try:
        step_fn = student_function(load_student(config["student_file"]), "sync_sgd_step")
    except AssertionError as error:
        report.write(status="error", message=str(error))
        os._exit(3)
    kv.init(GRAD, mx.nd.zeros((dim,)))
    kv.init(COUNT, mx.nd.zeros((1,)))
    data = np.load(folder / "data.npz")
    recording = RecordingKV(kv, report)
    w = data["w0"].astype(np.float32)
    for t in range(config["steps"]):
        X, y = data[f"X_{t}_{rank}"], data[f"y_{t}_{rank}"]
        g = (X.T @ (X @ w - y)).astype(np.float32)     # gradient of this worker's summed squared error / 2
        recording.step = t
        timer = _watchdog(report, t, config["step_timeout_s"])
        try:
            out = step_fn(recording, mx.nd.array(w), mx.nd.array(g), int(len(X)), config["lr"])
            new = _as_weights(out, dim)
        except BaseException as error:   # noqa: BLE001 - the student's code may raise anything, SystemExit too
            timer.cancel()
            report.write(status="error", message=student_error(error, config["student_file"],
                                                                f"worker {rank}, step {t}"))
            os._exit(3)
        timer.cancel()
        report.data["steps"].append(dict(w=w.tolist(), g=g.tolist(), n=int(len(X)), out=new.tolist()))
        report.write()
        w = new.astype(np.float32)
    report.write(status="done")


# ------------------------------------------------------------------------------------------------
# the planted wrong answers (tools/mutants.py, tests/test_mutants.py)
# ------------------------------------------------------------------------------------------------
_UPDATE = "return -lr * np.sum(worker_grads, axis=0) / n"
_STEP = "return weight - lr * total / count"
_PUSHES = "    kv.push(GRAD, grad)\n    kv.push(COUNT, mx.nd.array([n_local]))\n"
_PULLS = ("    total, count = mx.nd.zeros_like(grad), mx.nd.zeros((1,))\n"
          "    kv.pull(GRAD, out=total)\n    kv.pull(COUNT, out=count)\n")

MUTANTS = {
    "q1": (
        Mutant("averaged", "you averaged the workers' gradients",
               edits=((_UPDATE, "return -lr * np.mean(worker_grads, axis=0) / n"),)),
        Mutant("divided_by_workers", "divided by the number of workers instead of by n",
               edits=((_UPDATE, "return -lr * np.sum(worker_grads, axis=0) / len(worker_grads)"),)),
        Mutant("sign", "your change points uphill", edits=((_UPDATE, "return lr * np.sum(worker_grads, axis=0) / n"),)),
        Mutant("no_axis", "np.sum without axis adds everything into one number",
               edits=((_UPDATE, "return -lr * np.sum(worker_grads) / n"),)),
        Mutant("first_worker_only", "you used only the first worker's gradient",
               edits=((_UPDATE, "return -lr * worker_grads[0] / n"),)),
        Mutant("summed_in_place", "changed the workers' gradient arrays in place",
               edits=((_UPDATE, "total = worker_grads[0]\n    for g in worker_grads[1:]:\n        total += g\n"
                                "    return -lr * total / n"),)),
        Mutant("lr_upside_down", "it is upside down",
               edits=(("return lr * global_batch / n", "return lr * n / global_batch"),)),
        Mutant("lr_integer_division", "you used integer division",
               edits=(("return lr * global_batch / n", "return lr * (global_batch // n)"),)),
        Mutant("lr_unchanged", "you returned lr unchanged", edits=(("return lr * global_batch / n", "return lr"),)),
    ),
    "q2": (
        Mutant("hybridize_export", "torch.export captures a graph to save and deploy it",
               edits=(('"net.hybridize()": "torch.compile",', '"net.hybridize()": "torch.export",'),)),
        Mutant("step_is_ddp", "trainer.step(global batch)'s part is only the division",
               edits=(('"trainer.step(global batch size)": "dividing by the world size",',
                       '"trainer.step(global batch size)": "DistributedDataParallel",'),)),
        Mutant("contexts_and_waitall_swapped", "a context only names the device",
               edits=(('"mx.gpu(i) / mx.cpu() contexts": "torch.device",',
                       '"mx.gpu(i) / mx.cpu() contexts": "torch.cuda.synchronize()",'),
                      ('"mx.nd.waitall()": "torch.cuda.synchronize()",', '"mx.nd.waitall()": "torch.device",'))),
        Mutant("split_and_load_is_division", "split_and_load + a Trainer over a kvstore is data parallelism",
               edits=(("\"split_and_load + Trainer(kvstore='device')\": \"DistributedDataParallel\",",
                       "\"split_and_load + Trainer(kvstore='device')\": \"dividing by the world size\","),)),
        Mutant("not_copied_exactly", "which is not one of OPTIONS: copy the string exactly",
               edits=(('"mx.nd.waitall()": "torch.cuda.synchronize()",',
                       '"mx.nd.waitall()": "torch.cuda.synchronize",'),)),
        Mutant("own_option", "which is not one of OPTIONS",
               edits=(('"mx.nd.waitall()": "torch.cuda.synchronize()",', '"mx.nd.waitall()": "cuda sync",'),
                      ("successor.update({", 'OPTIONS.append("cuda sync")\nsuccessor.update({'))),
        Mutant("one_left_none", "is still None",
               edits=(('"trainer.step(global batch size)": "dividing by the world size",',
                       '"trainer.step(global batch size)": None,'),)),
    ),
    "q3": (
        Mutant("local_batch", "divided the sum of all workers' gradients by this worker's own example count",
               edits=((_STEP, "return weight - lr * total / n_local"),)),
        Mutant("equal_work", "you multiplied this worker's count by the number of workers",
               edits=((_STEP, "return weight - lr * total / (n_local * kv.num_workers)"),)),
        Mutant("divided_twice", "you divided twice", edits=((_STEP, _STEP + " / kv.num_workers"),)),
        Mutant("pull_before_push", "pulled 'grad' before pushing it", edits=((_PUSHES + _PULLS, _PULLS + _PUSHES),)),
        Mutant("local_only", "no worker pushed its gradient",
               edits=((_PUSHES + _PULLS + "    " + _STEP, "    return weight - lr * grad / n_local"),)),
        Mutant("worker0_only", "every worker must push, not only some",
               edits=((_PUSHES, "    if kv.rank == 0:\n" + _PUSHES.replace("    kv.", "        kv.")),)),
        Mutant("mean_of_means", "you averaged the workers' mean gradients",
               edits=(("    kv.push(GRAD, grad)\n", "    kv.push(GRAD, grad / n_local)\n"),
                      (_STEP, "return weight - lr * total / kv.num_workers"))),
        Mutant("pull_returns", "it fills the NDArray you pass as out=",
               edits=(("    kv.pull(GRAD, out=total)\n", "    total = kv.pull(GRAD)\n"),)),
    ),
}


if __name__ == "__main__":
    worker(Path(sys.argv[1]))
