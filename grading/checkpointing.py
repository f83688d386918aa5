"""Exercises 11: the newest complete checkpoint, Young's checkpoint interval, DCP save and bitwise resume.

- q1 ``latest_complete(ckpt_dir)``: :func:`check_latest_complete` builds checkpoint folders (complete
  or not, step numbers with and without leading zeros, names that only look like steps, stray
  files, modification times in another order than the steps) and compares the answer with
  :func:`reference_latest_complete`, naming the classic slips (string order, no ``.metadata`` test).
- q2 ``checkpoint_interval_s(save_s, gpu_mtbf_h, n_gpus)``: :func:`check_interval` compares it with
  Young's τ = √(2 · save_s · mtbf_s) and recognises the usual slips by the ratio they give.
- q3 ``save(model, optimizer, step, folder)`` and ``load(model, optimizer, folder) -> step`` with
  ``torch.distributed.checkpoint``: :func:`check_checkpoint` trains a DDP model with Adam on gloo
  ranks, saves after ``save_at`` steps and trains on; then a fresh model and optimizer (other
  initial weights, no Adam state) load the checkpoint and train the remaining steps. The folder
  must be a DCP checkpoint (``.metadata`` and a shard file from every rank), the loaded weights,
  Adam's moments and step counts must be the saved ones, ``load`` must return the step, and the
  resumed weights must equal the uninterrupted run's bit for bit.
"""
from __future__ import annotations

import gc
import math
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from course_utils.data import linear_regression, shard
from course_utils.models import mlp

from .mutant import Mutant
from .ranks import run_ranks
from .sharded_data_parallel import call_student
from .student import load_student, student_function

# --------------------------------------------------------------------------------------------------
# q1: latest_complete
# --------------------------------------------------------------------------------------------------

STEP = re.compile(r"step_([0-9]+)")


def reference_latest_complete(ckpt_dir: str | os.PathLike) -> Path | None:
    """The folder ``step_<digits>`` with ``.metadata`` and the highest step number, or None."""
    found = [(int(STEP.fullmatch(p.name)[1]), p) for p in Path(ckpt_dir).iterdir()
             if STEP.fullmatch(p.name) and p.is_dir() and (p / ".metadata").is_file()]
    return max(found, key=lambda f: f[0])[1] if found else None


def make_checkpoints(root: str | os.PathLike, entries: Sequence[tuple[str, bool | None]]) -> None:
    """Create ``entries`` in ``root``, in order, each modified one second after the previous.

    An entry is ``(name, complete)``: a checkpoint folder with a shard file, and ``.metadata`` when
    ``complete``; ``complete=None`` makes a plain file ``name`` instead.
    """
    for i, (name, complete) in enumerate(entries):
        path = Path(root) / name
        if complete is None:
            path.write_text("not a checkpoint")
        else:
            path.mkdir()
            (path / "__0_0.distcp").write_bytes(b"shard")
            if complete:
                (path / ".metadata").write_bytes(b"index")
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))


def _latest_hint(got: Path, root: Path, want: Path | None) -> str:
    """The likely mistake behind picking ``got`` instead of ``want``."""
    if not got.is_dir() or not STEP.fullmatch(got.name):
        return (f"{got.name} is not a folder named step_<number>: match the whole name (re.fullmatch, or check "
                "that everything after 'step_' is digits) and ignore anything else.")
    if not (got / ".metadata").is_file():
        return f"{got.name} has no .metadata: its save never finished, so it is not a complete checkpoint."
    complete = [p for p in root.iterdir() if STEP.fullmatch(p.name) and (p / ".metadata").is_file()]
    if got == max(complete, key=lambda p: p.stat().st_mtime):
        return ("that is the most recently modified folder: pick by step number, not by modification time "
                "(a restarted job may rewrite an older step).")
    if got == max(complete, key=lambda p: p.name):
        return ("you compared names as strings, where 'step_9' sorts after 'step_10': compare the step numbers "
                "as integers.")
    if got == max(complete, key=lambda p: (len(p.name), p.name)):
        return ("sorting by length, then name, breaks with leading zeros: step_0008 is step 8. Compare the step "
                "numbers as integers.")
    return "compare the step numbers as integers and keep the highest complete one."


def check_latest_complete(latest_complete: Callable, scenarios: Sequence[Sequence[tuple[str, bool | None]]]) -> None:
    """``latest_complete`` on a fresh folder per scenario (see :func:`make_checkpoints`)."""
    for entries in scenarios:
        with tempfile.TemporaryDirectory(prefix="ex11_ckpts_") as folder:
            root = Path(folder)
            make_checkpoints(root, entries)
            shown = ", ".join(name + ("" if complete else " (no .metadata)" if complete is False else " (a file)")
                              for name, complete in entries) or "nothing"
            call = f"latest_complete(a folder holding {shown})"
            want = reference_latest_complete(root)
            try:
                got = call_student(latest_complete, call, folder)
            except AssertionError as error:
                if "raised ValueError" not in str(error):
                    raise
                hint = ("with no complete checkpoint, return None (max() of nothing raises)." if want is None else
                        "a name like step_latest or step_20.tmp is no checkpoint: skip names whose part after "
                        "'step_' is not all digits, before calling int().")
                raise AssertionError(f"{error}\n{hint}") from None
            if want is None:
                if got is not None:
                    raise AssertionError(f"{call} returned {got!r}, but it holds no complete checkpoint: "
                                         "return None.")
                continue
            if got is None or got is Ellipsis:
                raise AssertionError(f"{call} returned {got!r}, expected the Path of {want.name}: replace the "
                                     "`...` with your answer.")
            if not isinstance(got, Path):
                raise AssertionError(f"{call} returned {got!r} ({type(got).__name__}): return the Path of the "
                                     f"checkpoint folder, {want}.")
            if Path(got).resolve() != want.resolve():
                raise AssertionError(f"{call} returned {got.name}, expected {want.name}: "
                                     + _latest_hint(root / got.name, root, want))


# --------------------------------------------------------------------------------------------------
# q2: checkpoint_interval_s
# --------------------------------------------------------------------------------------------------


def young_interval_s(save_s: float, gpu_mtbf_h: float, n_gpus: int) -> float:
    """Young's interval √(2 · save_s · mtbf_s), the job's MTBF being ``gpu_mtbf_h / n_gpus`` hours."""
    return math.sqrt(2 * save_s * gpu_mtbf_h * 3600 / n_gpus)


def _interval_hint(ratio: float, n_gpus: int) -> str:
    """The slip whose result is ``ratio`` times Young's interval."""
    def near(x: float) -> bool:
        return math.isclose(ratio, x, rel_tol=1e-6)

    if n_gpus > 1 and near(math.sqrt(n_gpus)):
        return ("you used one GPU's MTBF: the job fails when any of its GPUs does, so the job's MTBF is "
                "gpu_mtbf_h / n_gpus.")
    if n_gpus > 1 and near(n_gpus):
        return "you multiplied by the number of GPUs: more GPUs fail more often, divide the MTBF by n_gpus."
    if near(1 / 60):
        return "the MTBF is in hours: convert it to seconds (× 3600) before taking the root."
    if near(1 / math.sqrt(60)):
        return "an hour is 3600 s, not 60: convert the MTBF from hours to seconds with × 3600."
    if near(1 / math.sqrt(2)):
        return "you forgot the factor 2 under the square root: τ = √(2 · save_s · mtbf_s)."
    if near(math.sqrt(2)):
        return "the 2 goes under the square root: τ = √(2 · save_s · mtbf_s), not 2·√(save_s · mtbf_s)."
    return "τ = √(2 · save_s · mtbf_s), with mtbf_s = gpu_mtbf_h · 3600 / n_gpus."


def check_interval(checkpoint_interval_s: Callable, cases: Sequence[tuple[float, float, int]],
                   invalid: Sequence[tuple[float, float, int]] = ()) -> None:
    """``checkpoint_interval_s`` on ``cases`` (to 1e-9 relative) and ValueError on each of ``invalid``."""
    for args in cases:
        call = f"checkpoint_interval_s{args}"
        got = call_student(checkpoint_interval_s, call, *args)
        want = young_interval_s(*args)
        if got is None or got is Ellipsis:
            raise AssertionError(f"{call} returned {got!r}: replace the `...` with your answer.")
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            raise AssertionError(f"{call} returned {got!r}: return τ in seconds, a number.")
        if not math.isclose(got, want, rel_tol=1e-9):
            if got > 0 and math.isclose(got, want * want, rel_tol=1e-9):
                hint = "that is τ²: take the square root."
            else:
                hint = _interval_hint(got / want, args[2]) if want else ""
            raise AssertionError(f"{call} is {got:.6g} s, expected {want:.6g} s: {hint}")
    for args in invalid:
        call = f"checkpoint_interval_s{args}"
        try:
            got = call_student(checkpoint_interval_s, call, *args, expect=ValueError)
        except ValueError:
            continue
        names = [name for name, value in zip(("save_s", "gpu_mtbf_h", "n_gpus"), args) if not value > 0]
        raise AssertionError(f"{call} returned {got!r}, but {', '.join(names)} is not positive: raise ValueError "
                             "(zero counts as not positive).")


# --------------------------------------------------------------------------------------------------
# q3: save/load with Distributed Checkpoint
# --------------------------------------------------------------------------------------------------


def _snapshot(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Copies of the weights and of Adam's per-parameter state (moments, step counts)."""
    return dict(weights=[p.detach().clone() for p in model.parameters()],
                adam=[{k: v.clone() for k, v in optimizer.state[p].items()} for p in model.parameters()])


def _train(model, optimizer, X, y, steps: range) -> None:
    for step in steps:
        rows = slice(4 * step % len(X), 4 * step % len(X) + 4)   # batch `step`: 4 samples of the shard
        nn.functional.mse_loss(model(X[rows]), y[rows]).backward()
        optimizer.step()
        optimizer.zero_grad()


def checkpoint_rank(rank: int, world_size: int, student_file: str, *, folder: str, sizes: list[int], n: int,
                    steps: int, save_at: int, seed: int) -> dict:
    """Harness (one rank): train, save with the student's ``save``, train on; then a fresh model loads
    with the student's ``load`` and finishes. Returns snapshots at each point."""
    student = load_student(student_file)
    save, load = student_function(student, "save"), student_function(student, "load")
    X, y, _ = linear_regression(n, sizes[0], seed=seed)
    rows = shard(n, rank, world_size)
    X, y = torch.from_numpy(X[rows]), torch.from_numpy(y[rows]).expand(-1, sizes[-1])

    def fresh(init_seed):
        model = DistributedDataParallel(mlp(sizes, seed=init_seed))
        return model, torch.optim.Adam(model.parameters(), lr=0.01)

    model, optimizer = fresh(seed)
    _train(model, optimizer, X, y, range(save_at))
    saved = _snapshot(model, optimizer)
    save(model, optimizer, save_at, folder)
    _train(model, optimizer, X, y, range(save_at, steps))
    uninterrupted = _snapshot(model, optimizer)["weights"]

    model, optimizer = fresh(seed + 1)   # other initial weights: loading must replace them
    returned = load(model, optimizer, folder)
    loaded = _snapshot(model, optimizer)
    _train(model, optimizer, X, y, range(save_at, steps))
    result = dict(saved=saved, loaded=loaded, returned=returned, uninterrupted=uninterrupted,
                  resumed=_snapshot(model, optimizer)["weights"])
    del model, optimizer
    gc.collect()
    return result


def reload_rank(rank: int, world_size: int, student_file: str, *, folder: str, sizes: list[int], seed: int) -> dict:
    """Harness (one rank): a fresh DDP model and Adam load ``folder`` with the student's ``load``."""
    load = student_function(load_student(student_file), "load")
    model = DistributedDataParallel(mlp(sizes, seed=seed + 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    returned = load(model, optimizer, folder)
    return dict(loaded=_snapshot(model, optimizer), returned=returned)


def check_checkpoint(student_file: str, *, world_size: int = 2, sizes: tuple[int, ...] = (4, 8, 1), n: int = 32,
                     steps: int = 6, save_at: int = 3, seed: int = 0, resume_world_size: int | None = None) -> None:
    """Run the student's ``save``/``load`` on ``world_size`` ranks; fail with the likely cause.

    With ``resume_world_size``, the checkpoint must also load on that many ranks (DCP reshards).
    """
    with tempfile.TemporaryDirectory(prefix="ex11_checkpoint_") as folder:
        try:
            results = run_ranks(checkpoint_rank, student_file, world_size, folder=folder, sizes=list(sizes), n=n,
                                steps=steps, save_at=save_at, seed=seed)
        except AssertionError as error:
            files = sorted(p.name for p in Path(folder).iterdir())
            if "CheckpointException" in str(error) and files and ".metadata" not in files:
                _check_files(files, world_size)   # load found nothing where save should have written: say where
            raise
        files = sorted(p.name for p in Path(folder).iterdir())
        _check_files(files, world_size)
        _check_resume(results, save_at)
        if resume_world_size is not None:
            _check_reshard(results[0]["saved"], student_file, folder, world_size, resume_world_size, sizes, save_at,
                           seed)


def _check_reshard(saved: dict, student_file: str, folder: str, world_size: int, resume_world_size: int,
                   sizes: tuple[int, ...], save_at: int, seed: int) -> None:
    """The checkpoint of ``world_size`` ranks loads on ``resume_world_size``: the saved state, the step."""
    told = (f"a checkpoint saved on {world_size} ranks must load on {resume_world_size} too (chapter 11: DCP "
            "reshards by the state dict's keys): save and load the same keys on every rank, none that names a rank.")
    try:
        reloaded = run_ranks(reload_rank, student_file, resume_world_size, folder=folder, sizes=list(sizes),
                             seed=seed)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{told}") from None
    for rank, r in enumerate(reloaded):
        same = (all(torch.equal(a, b) for a, b in zip(r["loaded"]["weights"], saved["weights"]))
                and all(got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
                        for got, want in zip(r["loaded"]["adam"], saved["adam"])))
        if not same or r["returned"] != save_at:
            raise AssertionError(f"on {resume_world_size} ranks, rank {rank} loaded other weights, Adam state or step "
                                 f"({r['returned']!r}) than were saved: {told}")


def _check_files(files: list[str], world_size: int) -> None:
    """The checkpoint folder's file names: a DCP checkpoint with a shard from every rank."""
    if not files:
        raise AssertionError("save wrote nothing into the folder: it still does nothing. Use "
                             "torch.distributed.checkpoint.save(state, checkpoint_id=folder) with the model's "
                             "and the optimizer's state (get_state_dict) and the step.")
    if ".metadata" not in files:
        raise AssertionError(f"the folder holds {files} but no .metadata: that is not a Distributed Checkpoint. "
                             "Save with torch.distributed.checkpoint.save(state, checkpoint_id=folder) on every "
                             "rank: each rank writes its shard (__<rank>_0.distcp), then rank 0 writes .metadata"
                             + (" — into `folder` itself, not a subfolder of it (load is given the same folder)."
                                if not any(f.startswith("__") or "." in f for f in files) else "."))
    missing = [rank for rank in range(world_size) if f"__{rank}_0.distcp" not in files]
    if missing:
        raise AssertionError(f"rank(s) {missing} wrote no shard file into the checkpoint ({files}): every rank must "
                             "call dcp.save with its own state, not only rank 0 (DCP writes the shards in "
                             "parallel).")


def _check_resume(results: list[dict], save_at: int) -> None:
    """Each rank's state after load against the saved one, the step load returned, and the resumed run."""
    for rank, r in enumerate(results):
        if not all(torch.equal(a, b) for a, b in zip(r["loaded"]["weights"], r["saved"]["weights"])):
            raise AssertionError(f"rank {rank}: after load, the model does not hold the saved weights. dcp.load "
                                 "fills the state dict you give it, in place; then apply it to the model "
                                 "(set_state_dict, or model.load_state_dict).")
        adam_restored = all(got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
                            for got, want in zip(r["loaded"]["adam"], r["saved"]["adam"]))
        if not adam_restored:
            raise AssertionError(f"rank {rank}: after load, Adam's moments and step counts are not the saved ones, "
                                 "so the resumed run takes different steps. Save and load the optimizer's state "
                                 "with the model's: get_state_dict(model, optimizer).")
        if r["returned"] == 0 and save_at != 0:
            raise AssertionError(f"rank {rank}: load returned 0, but the checkpoint was taken after step {save_at}: "
                                 "dcp.load fills tensors in place but *replaces* other values in the dict you pass "
                                 "it, so read the step from that dict after dcp.load, not from a variable.")
        if r["returned"] != save_at:
            raise AssertionError(f"rank {rank}: load returned {r['returned']!r}, but the checkpoint was taken after "
                                 f"step {save_at}: save the step with the state and return it from load unchanged (the "
                                 "run resumes at that step; one more would skip a batch).")
        if not all(torch.equal(a, b) for a, b in zip(r["resumed"], r["uninterrupted"])):
            worst = max(float((a - b).abs().max()) for a, b in zip(r["resumed"], r["uninterrupted"]))
            raise AssertionError(f"rank {rank}: the resumed run ends {worst:.3g} away from the uninterrupted one; "
                                 "it must be bitwise equal.")


# --------------------------------------------------------------------------------------------------
# Planted wrong answers (tools/mutants.py)
# --------------------------------------------------------------------------------------------------

_PICK = "def latest_complete(ckpt_dir):\n    done = [p for p in Path(ckpt_dir).glob('step_*') " \
        "if p.name[5:].isdigit() and (p / '.metadata').is_file()]\n"
_LOAD_STATE = '    state = {"model": model_state, "optim": optim_state, "step": 0}\n'
_APPLY = '    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])\n'

MUTANTS = {
    "q1": (
        Mutant("names compared as strings", "you compared names as strings",
               source=_PICK + "    return max(done, key=lambda p: p.name) if done else None\n"),
        Mutant("sorted by length, then name", "breaks with leading zeros",
               source=_PICK + "    return max(done, key=lambda p: (len(p.name), p.name)) if done else None\n"),
        Mutant("newest by modification time", "pick by step number, not by modification time",
               source=_PICK + "    return max(done, key=lambda p: p.stat().st_mtime) if done else None\n"),
        Mutant("no .metadata test", "has no .metadata", edits=((' and (p / ".metadata").is_file()', ""),)),
        Mutant("int() of any suffix", "skip names whose part after 'step_' is not all digits",
               edits=(("number.isdigit() and ", ""),)),
        Mutant("a prefix match", "match the whole name", source=(
            "import re\n\n\ndef latest_complete(ckpt_dir):\n    best = None\n"
            "    for p in Path(ckpt_dir).iterdir():\n        m = re.match(r'step_(\\d+)', p.name)\n"
            "        if m and (p / '.metadata').is_file() and (best is None or int(m[1]) > best[0]):\n"
            "            best = (int(m[1]), p)\n    return best[1] if best else None\n")),
        Mutant("max() of nothing", "return None (max() of nothing raises)",
               source=_PICK + "    return max(done, key=lambda p: int(p.name[5:]))\n"),
        Mutant("the name, not the Path", "return the Path of the checkpoint folder",
               edits=(("    return best\n", "    return best.name if best else None\n"),)),
    ),
    "q2": (
        Mutant("one GPU's MTBF", "you used one GPU's MTBF", edits=((" / n_gpus", ""),)),
        Mutant("multiplied by the GPUs", "you multiplied by the number of GPUs",
               edits=((" / n_gpus", " * n_gpus"),)),
        Mutant("MTBF left in hours", "the MTBF is in hours", edits=((" * 3600", ""),)),
        Mutant("60 s in an hour", "an hour is 3600 s, not 60", edits=((" * 3600", " * 60"),)),
        Mutant("no factor 2", "you forgot the factor 2", edits=(("2 * save_s", "save_s"),)),
        Mutant("2 outside the root", "the 2 goes under the square root",
               edits=(("math.sqrt(2 * save_s * job_mtbf_s)", "2 * math.sqrt(save_s * job_mtbf_s)"),)),
        Mutant("no square root", "take the square root",
               edits=(("math.sqrt(2 * save_s * job_mtbf_s)", "2 * save_s * job_mtbf_s"),)),
        Mutant("zero accepted", "zero counts as not positive",
               edits=(("save_s > 0 and gpu_mtbf_h > 0 and n_gpus > 0",
                       "save_s >= 0 and gpu_mtbf_h >= 0 and n_gpus >= 0"),)),
        Mutant("no validation", "raise ValueError", edits=((
            "    if not (save_s > 0 and gpu_mtbf_h > 0 and n_gpus > 0):\n"
            '        raise ValueError("save_s, gpu_mtbf_h and n_gpus must all be positive")\n', ""),)),
    ),
    "q3": (
        Mutant("model only, no optimizer", "Adam's moments and step counts are not the saved ones", edits=(
            ('"optim": optim_state, "step": step}', '"step": step}'),
            (_LOAD_STATE, '    state = {"model": model_state, "step": 0}\n'),
            (_APPLY, _APPLY.replace('state["optim"]', "optim_state")))),
        Mutant("optimizer.state_dict() of a fresh Adam", "Adam's moments and step counts are not the saved ones",
               edits=(
            ("    model_state, optim_state = get_state_dict(model, optimizer)\n    dcp.save",
             "    model_state, optim_state = model.state_dict(), optimizer.state_dict()\n    dcp.save"),
            ("    model_state, optim_state = get_state_dict(model, optimizer)   # the shapes to load into\n",
             "    model_state, optim_state = model.state_dict(), optimizer.state_dict()\n"),
            (_APPLY, '    model.load_state_dict(state["model"])\n    optimizer.load_state_dict(state["optim"])\n'))),
        Mutant("saved into a subfolder", "not a subfolder of it", edits=(
            ('"step": step}, checkpoint_id=folder)', '"step": step}, checkpoint_id=f"{folder}/step_{step}")'),)),
        Mutant("torch.save per rank", "that is not a Distributed Checkpoint", source=(
            "%%writefile work/ex11_checkpoint.py\nimport os\n\nimport torch\nimport torch.distributed as dist\n\n\n"
            "def save(model, optimizer, step, folder):\n    os.makedirs(folder, exist_ok=True)\n"
            "    torch.save({'model': model.state_dict(), 'optim': optimizer.state_dict(), 'step': step},\n"
            "               os.path.join(folder, f'rank{dist.get_rank()}.pt'))\n\n\n"
            "def load(model, optimizer, folder):\n"
            "    state = torch.load(os.path.join(folder, f'rank{dist.get_rank()}.pt'))\n"
            "    model.load_state_dict(state['model'])\n    optimizer.load_state_dict(state['optim'])\n"
            "    return state['step']\n")),
        Mutant("saved on rank 0 only", "not only rank 0", edits=((
            '    dcp.save({"model": model_state, "optim": optim_state, "step": step}, checkpoint_id=folder)\n',
            "    import torch.distributed as dist\n    if dist.get_rank() == 0:\n"
            '        dcp.save({"model": model_state, "optim": optim_state, "step": step}, checkpoint_id=folder,\n'
            "                 no_dist=True)\n"),)),
        Mutant("loaded into copies, never applied", "does not hold the saved weights", edits=(
            (_LOAD_STATE, _LOAD_STATE + '    state["model"] = {k: v.clone() for k, v in model_state.items()}\n'),
            (_APPLY, ""))),
        Mutant("the next step returned", "but the checkpoint was taken after step",
               edits=(('    return state["step"]\n', '    return state["step"] + 1\n'),)),
        Mutant("state keyed by rank", "must load on 4 too", edits=(
            ('    dcp.save({"model": model_state, "optim": optim_state, "step": step}, checkpoint_id=folder)\n',
             "    import torch.distributed as dist\n"
             '    dcp.save({f"rank{dist.get_rank()}": {"model": model_state, "optim": optim_state}, "step": step},\n'
             "             checkpoint_id=folder)\n"),
            (_LOAD_STATE, "    import torch.distributed as dist\n"
                          '    state = {f"rank{dist.get_rank()}": {"model": model_state, "optim": optim_state}, '
                          '"step": 0}\n'),
            (_APPLY, '    mine = state[f"rank{dist.get_rank()}"]\n'
                     '    set_state_dict(model, optimizer, model_state_dict=mine["model"], '
                     'optim_state_dict=mine["optim"])\n'))),
        Mutant("the step read from a variable", "read the step from that dict after dcp.load", edits=(
            (_LOAD_STATE, '    step = 0\n    state = {"model": model_state, "optim": optim_state, "step": step}\n'),
            ('    return state["step"]\n', "    return step\n"))),
    ),
}
