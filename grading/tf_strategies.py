"""Exercises 05: TF_CONFIG, which examples each replica reads, the loss each replica returns, and a
custom training loop under ``tf.distribute.MirroredStrategy``.

Q1 ``tf_configs(machines, port)`` (:func:`check_tf_configs`), Q2 ``examples_seen(global_batch, W, R,
worker, replica, step)`` (:func:`check_examples_seen`), Q3 ``replica_losses(per_replica)``
(:func:`check_replica_losses`): plain Python, compared with the rule and, when wrong, matched against
the classic mistakes. Q4 ``train_mirrored(strategy, model, optimizer, dataset, global_batch)``
(:func:`check_train_mirrored`): the student's loop trains a model the check built, with a layer that
records on which replica it ran and how many rows it got; the weights must equal the same steps on
one device. TensorFlow is imported inside the functions that need it, never at import time.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .mutant import Mutant


def _said(error: BaseException, limit: int = 300) -> str:
    """An exception in one line: its type and the first line of its message, shortened."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {(text[0] if text else '')[:limit]}"


def _call(name: str, fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``; what it raises becomes an AssertionError in the student's terms."""
    try:
        return fn(*args, **kwargs)
    except AssertionError:
        raise
    except Exception as error:   # noqa: BLE001 - a student's function may raise anything
        args_text = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
        raise AssertionError(f"{name}({args_text}) raised {_said(error)}") from None


# ---------------------------------------------------------------- Q1: TF_CONFIG for every machine
def _want_configs(machines: Sequence[str], port: int) -> list[dict]:
    addresses = [f"{m}:{port}" for m in machines]
    cluster = {"chief": addresses[:1], **({"worker": addresses[1:]} if len(addresses) > 1 else {})}
    tasks = [{"type": "chief", "index": 0}] + [{"type": "worker", "index": i} for i in range(len(machines) - 1)]
    return [{"cluster": cluster, "task": task} for task in tasks]


def check_tf_configs(tf_configs: Callable, machines: Sequence[str] = ("gpu-a", "gpu-b", "gpu-c"),
                     port: int = 2222) -> None:
    """``tf_configs(machines, port)`` must return one TF_CONFIG JSON string per machine, in order."""
    machines = list(machines)
    call = f"tf_configs({machines}, {port})"
    got = _call("tf_configs", tf_configs, list(machines), port)
    if got is None or got is Ellipsis:
        raise AssertionError("tf_configs returned None: return a list with one TF_CONFIG JSON string per machine.")
    if not isinstance(got, (list, tuple)) or len(got) != len(machines):
        raise AssertionError(f"{call} must return a list of {len(machines)} TF_CONFIG strings, one per machine; "
                             f"got {type(got).__name__} {got!r:.200}")
    if not all(isinstance(c, str) for c in got):
        raise AssertionError(f"{call}: each TF_CONFIG is a JSON string (json.dumps), not a "
                             f"{type(next(c for c in got if not isinstance(c, str))).__name__}: "
                             "TensorFlow reads it from the environment variable, which holds text.")
    try:
        parsed = [json.loads(c) for c in got]
    except ValueError as error:
        raise AssertionError(f"{call}: a TF_CONFIG is not valid JSON ({error}): build it with json.dumps.") from None
    want = _want_configs(machines, port)
    for i, (p, w) in enumerate(zip(parsed, want)):
        if not isinstance(p, dict) or set(p) != {"cluster", "task"}:
            raise AssertionError(f"{call}: machine {i}'s TF_CONFIG must hold exactly the keys 'cluster' and 'task'; "
                                 f"got {p!r:.200}")
        _check_cluster(call, i, p["cluster"], w["cluster"], machines, port)
        _check_task(call, i, p["task"], w["task"], [q.get("task") for q in parsed])


def _check_cluster(call: str, i: int, got: Any, want: dict, machines: list[str], port: int) -> None:
    if got == want:
        return
    if not isinstance(got, dict):
        raise AssertionError(f"{call}: machine {i}'s 'cluster' must be a dict of task type -> addresses, got {got!r}")
    addresses = [a for v in got.values() if isinstance(v, list) for a in v]
    if len(machines) == 1 and "worker" in got:
        hint = "one machine: a chief and no 'worker' key at all (TensorFlow rejects an empty job)"
    elif any(not isinstance(a, str) or ":" not in a for a in addresses):
        hint = "every address is 'host:port' (the port is part of each address)"
    elif any(a.rsplit(":", 1)[-1] != str(port) for a in addresses):
        hint = f"every task listens on the same port {port}: do not number the ports"
    elif got.get("chief") == want["chief"] and machines[0] in [a.rsplit(":", 1)[0] for a in got.get("worker", [])]:
        hint = "the chief is not a worker: list only the other machines under 'worker'"
    elif got.get("chief") != want["chief"]:
        hint = "the first machine is the chief: 'chief' holds its address alone"
    else:
        hint = "the workers are the other machines, in machine order"
    raise AssertionError(f"{call}: machine {i}'s cluster is {got}, expected {want}: {hint}.")


def _check_task(call: str, i: int, got: Any, want: dict, tasks: list) -> None:
    if got == want:
        return
    if i > 0 and all(t == tasks[0] for t in tasks):
        hint = "each machine gets its own task: every machine got the same one"
    elif i == 0:
        hint = 'the first machine is the chief: its task is {"type": "chief", "index": 0}'
    elif isinstance(got, dict) and got.get("type") == "worker" and got.get("index") == i:
        hint = f"workers are numbered from 0 after the chief: machine {i} is worker {i - 1}"
    else:
        hint = f"machine {i} is worker {i - 1}: its task is {want}"
    raise AssertionError(f"{call}: machine {i}'s task is {got}, expected {want}: {hint}.")


# ---------------------------------------------------------------- Q2: which examples a replica reads
def _want_examples(G: int, W: int, R: int, worker: int, replica: int, step: int) -> list[int]:
    per = G // (W * R)
    first = (step * R + replica) * per
    return [worker + W * k for k in range(first, first + per)]


def _wrong_examples(G: int, W: int, R: int, worker: int, replica: int, step: int) -> dict[str, list[int]]:
    """What the classic mistakes return, keyed by the feedback that names them."""
    per = G // (W * R)
    first = (step * R + replica) * per
    return {
        f"each replica gets global_batch / (W * R) = {per} examples: you split the global batch over the "
        "R replicas only, split it over all W * R": [worker + W * k for k in range((step * R + replica) * (G // R),
                                                                                 (step * R + replica + 1) * (G // R))],
        f"each replica gets global_batch / (W * R) = {per} examples: you split the global batch over the "
        "W workers only, split it over all W * R": [worker + W * k for k in range((step * R + replica) * (G // W),
                                                                                (step * R + replica + 1) * (G // W))],
        "ds.shard(W, w) keeps every W-th example starting at w: worker w's shard starts at example w, "
        "not at 0": [W * k for k in range(first, first + per)],
        "ds.shard(W, w) keeps every W-th example starting at w, not a contiguous block of the global batch":
            [step * G + worker * (G // W) + replica * per + k for k in range(per)],
        "at each step a worker's replicas take the next R per-replica batches of its stream, in replica "
        "order: the position is (step * R + replica) * per_replica": [
            worker + W * k for k in range((replica * R + step) * per, (replica * R + step + 1) * per)],
        "a worker's replicas take consecutive per-replica batches of its stream, not every R-th example": [
            worker + W * (step * R * per + replica + R * j) for j in range(per)],
        "a step consumes global_batch / W examples of each worker's stream, not global_batch: count positions "
        "in the worker's own stream": [worker + W * k for k in range(step * G + replica * per,
                                                                     step * G + replica * per + per)],
    }


CASES_Q2 = ((128, 1, 4, 0, 1, 0), (128, 2, 1, 1, 0, 0), (128, 2, 2, 1, 1, 2))


def check_examples_seen(examples_seen: Callable, cases: Sequence[tuple] = CASES_Q2,
                        uneven: tuple[int, int, int] = (100, 2, 4)) -> None:
    """``examples_seen`` must give every case's examples, cover each global batch exactly once across
    replicas, and raise ValueError for the ``uneven`` ``(global_batch, W, R)``."""
    for args in cases:
        G, W, R, *_ = args
        got = _call("examples_seen", examples_seen, *args)
        if got is None or got is Ellipsis:
            raise AssertionError("examples_seen returned None: return the list of example indices.")
        want = _want_examples(*args)
        try:
            got = [int(i) for i in got]
        except (TypeError, ValueError):
            raise AssertionError(f"examples_seen{args} must return a list of ints, got {got!r:.200}") from None
        if got == want:
            continue
        hint = next((h for h, wrong in _wrong_examples(*args).items() if got == wrong and wrong != want),
                    "worker w reads examples w, w + W, w + 2W, …; its replicas take its per-replica batches in turn")
        raise AssertionError(f"examples_seen{args} is {_short(got)}, expected {_short(want)}: {hint}.")
    G, W, R = uneven
    try:
        examples_seen(G, W, R, 0, 0, 0)
    except ValueError:
        return
    except Exception as error:   # noqa: BLE001
        raise AssertionError(f"examples_seen({G}, {W}, {R}, 0, 0, 0) raised {_said(error)}: a global batch that "
                             "does not split evenly must raise ValueError.") from None
    raise AssertionError(f"a global batch of {G} does not split over {W * R} replicas: examples_seen({G}, {W}, {R}, "
                         "0, 0, 0) must raise ValueError, it returned.")


def _short(values: list[int]) -> str:
    return str(values) if len(values) <= 8 else f"[{', '.join(map(str, values[:6]))}, … {values[-1]}] ({len(values)})"


# ---------------------------------------------------------------- Q3: the loss each replica returns
def check_replica_losses(replica_losses: Callable, sizes: Sequence[int] = (32, 32, 32, 32), seed: int = 0) -> None:
    """``replica_losses(per_replica)`` on slices of ``sizes`` examples: one number per replica, each
    replica's sum divided by the number of examples in all slices together."""
    rng = np.random.default_rng(seed)
    parts = [rng.random(n) + 0.5 for n in sizes]
    got = _call("replica_losses", replica_losses, [p.copy() for p in parts])
    if got is None or got is Ellipsis:
        raise AssertionError("replica_losses returned None: return one number per replica.")
    try:
        got = [float(v) for v in got]
    except TypeError:
        raise AssertionError(f"replica_losses must return one number per replica (a list of {len(sizes)}), "
                             f"got {got!r:.200}") from None
    if len(got) != len(sizes):
        raise AssertionError(f"replica_losses must return one number per replica: {len(sizes)} replicas, "
                             f"got {len(got)} numbers.")
    total = sum(len(p) for p in parts)
    want = [float(np.sum(p)) / total for p in parts]
    if np.allclose(got, want, rtol=1e-9, atol=0):
        return
    wrong = {
        "you divided each replica's sum by its own batch size (np.mean): divide by the GLOBAL batch size, "
        "the number of examples in all slices together": [float(np.mean(p)) for p in parts],
        "you returned each replica's sum: divide it by the global batch size": [float(np.sum(p)) for p in parts],
        "right only when every replica has the same number of examples: dividing each replica's mean by the "
        "number of replicas; divide each replica's SUM by the global batch size":
            [float(np.mean(p)) / len(parts) for p in parts],
        "the global batch is the number of examples actually present in all slices together, not the number "
        "of replicas times the first slice's size": [float(np.sum(p)) / (len(parts) * len(parts[0])) for p in parts],
        "divide by the number of examples in the global batch, not by the number of replicas":
            [float(np.sum(p)) / len(parts) for p in parts],
    }
    hint = next((h for h, w in wrong.items() if np.allclose(got, w, rtol=1e-9)),
                "their sum must be the mean over every example of the global batch")
    raise AssertionError(f"replica_losses for slices of {list(sizes)} examples: the sum of what you return is "
                         f"{sum(got):.6g}, the global mean is {sum(want):.6g}: {hint}.")


# ---------------------------------------------------------------- Q4: a custom loop under MirroredStrategy
def _recorder_layer(log: list):
    """A Keras layer that passes its input through and appends ``(replica id or None, replicas, rows)``
    to ``log`` each time Python runs it (every call in eager mode, every trace in a tf.function)."""
    import keras
    import tensorflow as tf

    class Recorder(keras.layers.Layer):
        def call(self, x):
            context = tf.distribute.get_replica_context()
            if context is None:   # cross-replica context: inside strategy.scope() but outside strategy.run
                log.append((None, None, x.shape[0]))
            else:
                replica = tf.get_static_value(context.replica_id_in_sync_group)
                log.append((None if replica is None else int(replica), context.num_replicas_in_sync, x.shape[0]))
            return x

    return Recorder()


def _problem(n: int, features: int, classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, features)).astype("float32"), rng.integers(0, classes, n).astype("int64")


def sgd_reference(X: np.ndarray, y: np.ndarray, init: Sequence[np.ndarray], *, global_batch: int, lr: float,
                  replicas: int = 1, loss: str = "global") -> tuple[list[list[np.ndarray]], list[float]]:
    """Plain SGD on one device (float64, by hand) of a ReLU MLP ``init = [w1 (d, h), b1 (h,), w2 (h, c),
    b2 (c,)]`` with sparse categorical cross-entropy from logits, over ``X`` in order, batches of
    ``global_batch``: the weights after each step and each step's mean loss.

    ``loss`` names what each of ``replicas`` replicas minimises, to recognise mistakes: "global" (the
    right one: its sum / the global batch), "replica_mean" (its own mean: gradients x replicas), "sum"
    (no division), "mean_over_replicas" (its own mean / replicas: right only for equal slices).
    """
    w1, b1, w2, b2 = (np.asarray(v, dtype=np.float64) for v in init)
    steps, losses = [], []
    for start in range(0, len(X), global_batch):
        xb, yb = X[start:start + global_batch].astype(np.float64), y[start:start + global_batch]
        weight = np.empty(len(xb))
        for s in np.array_split(np.arange(len(xb)), replicas):
            weight[s] = {"global": 1 / len(xb), "replica_mean": 1 / len(s), "sum": 1.0,
                         "mean_over_replicas": 1 / (len(s) * replicas)}[loss]
        h = xb @ w1 + b1
        a = np.maximum(h, 0)
        logits = a @ w2 + b2
        logits -= logits.max(1, keepdims=True)
        p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
        losses.append(float(-np.log(p[np.arange(len(yb)), yb]).mean()))
        d = p.copy()
        d[np.arange(len(yb)), yb] -= 1
        d *= weight[:, None]
        da = d @ w2.T * (h > 0)
        w1, b1, w2, b2 = w1 - lr * xb.T @ da, b1 - lr * da.sum(0), w2 - lr * a.T @ d, b2 - lr * d.sum(0)
        steps.append([w1, b1, w2, b2])
    return steps, losses


def max_difference(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> float:
    """The largest ``|got - want|`` over lists of arrays (infinite when their shapes differ)."""
    if len(got) != len(want) or any(np.shape(g) != np.shape(w) for g, w in zip(got, want)):
        return float("inf")
    return max(float(np.abs(np.asarray(g, dtype=np.float64) - w).max()) for g, w in zip(got, want))


LOSS_MISTAKES = {
    "replica_mean": "each replica averaged the loss over its OWN batch, so the gradients summed over the "
                    "replicas are {R} times too large: divide the per-example losses by the GLOBAL batch, "
                    "tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)",
    "sum": "you summed the per-example losses without dividing: the update is global_batch times too large; "
           "use tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)",
    "mean_over_replicas": "right only when every replica has the same number of examples: here the replicas "
                          "got {split} examples of {G}, and a replica's mean divided by the number of replicas "
                          "weighs their examples unequally; pass global_batch_size=global_batch to "
                          "tf.nn.compute_average_loss",
}


def check_train_mirrored(train_mirrored: Callable, devices: Sequence[str], *, global_batch: int = 8,
                         steps: int = 3, lr: float = 0.1, sizes: tuple[int, int, int] = (6, 8, 3),
                         seed: int = 0) -> None:
    """``train_mirrored(strategy, model, optimizer, dataset, global_batch)`` must train ``model`` for one
    pass over ``dataset`` (``steps`` batches of ``global_batch`` examples) on every replica of a
    ``MirroredStrategy(devices)`` and return the mean loss of each step; the weights must equal the
    same SGD steps on one device (float32 rounding: 1e-5)."""
    import keras
    import tensorflow as tf

    devices = list(devices)
    R = len(devices)
    X, y = _problem(steps * global_batch, sizes[0], sizes[-1], seed)
    log: list = []
    strategy = _strategy(devices)
    with strategy.scope():
        keras.utils.set_random_seed(seed)
        model = keras.Sequential([keras.Input((sizes[0],)), _recorder_layer(log),
                                  keras.layers.Dense(sizes[1], activation="relu"), keras.layers.Dense(sizes[2])])
        optimizer = keras.optimizers.SGD(lr)
    init = [v.numpy() for v in model.trainable_variables]
    log.clear()   # building the model ran the recorder once, symbolically
    dataset = tf.data.Dataset.from_tensor_slices((X, y)).batch(global_batch, drop_remainder=True)
    try:
        got = train_mirrored(strategy, model, optimizer, dataset, global_batch)
    except AssertionError:
        raise
    except Exception as error:   # noqa: BLE001
        problem = _replica_problem(log, R, global_batch) if log else None
        raise AssertionError(f"train_mirrored raised {_said(error)}{_explain_tf_error(error)}"
                             + (f"\nBefore that, {problem}" if problem else "")) from None
    if got is None and not log:
        raise AssertionError("train_mirrored still does nothing: it returned None and never ran the model. "
                             "Distribute the dataset, run a step on every replica with strategy.run, and return "
                             "the loss of each step.")
    problem = _replica_problem(log, R, global_batch)
    if problem:
        raise AssertionError(problem)
    iterations = int(optimizer.iterations.numpy())
    if iterations != steps:
        raise AssertionError(f"the optimizer stepped {iterations} times for {steps} batches: apply the gradients "
                             "once per step, inside the step that strategy.run runs on every replica.")
    weights = [v.numpy() for v in model.trainable_variables]
    trajectory, want_losses = sgd_reference(X, y, init, global_batch=global_batch, lr=lr, replicas=R)
    worst = max_difference(weights, trajectory[-1])
    if worst > 1e-5:
        split = [len(s) for s in np.array_split(np.arange(global_batch), R)]
        hint = "the weights must change as the same SGD steps on one device would change them"
        for kind, text in LOSS_MISTAKES.items():
            other, _ = sgd_reference(X, y, init, global_batch=global_batch, lr=lr, replicas=R, loss=kind)
            if max_difference(weights, other[-1]) <= 1e-5:
                hint = text.format(R=R, split=" and ".join(map(str, split)), G=global_batch)
                break
        raise AssertionError(f"after {steps} steps on {R} replicas the weights differ from one device's by up to "
                             f"{worst:.3g}: {hint}.")
    _check_losses(got, want_losses, R)


def _strategy(devices: Sequence[str]):
    """A MirroredStrategy over ``devices`` that sums across replicas by copying to one device.

    The default (collective all-reduce) numbers its collectives from the same keys in every strategy of a
    process, and TensorFlow remembers each key's tensor shape: a later strategy whose model has other
    shapes then fails ("Shape mismatch in the collective instance 100"). The student's own strategies
    (Q1 of chapter 06) keep the default; the checks' strategies stay out of their way.
    """
    import tensorflow as tf

    return tf.distribute.MirroredStrategy(list(devices), cross_device_ops=tf.distribute.ReductionToOneDevice())


def _explain_tf_error(error: BaseException) -> str:
    text = str(error)
    if "PerReplica" in text:
        return (". A batch of a distributed dataset is a PerReplica value (one piece per replica): pass it to "
                "strategy.run(step, args=(x, y)), which calls step on each replica with that replica's piece.")
    return ""


def _replica_problem(log: list, R: int, global_batch: int) -> str | None:
    """What went wrong in where the model ran (inside strategy.run, on every replica, each on its share of the
    global batch), or None."""
    split = [len(s) for s in np.array_split(np.arange(global_batch), R)]
    if not log:
        return "the model never ran: call it inside the step that strategy.run runs on every replica."
    outside = [entry for entry in log if entry[1] != R]
    if outside:
        return (f"the model ran outside strategy.run, on one replica with batches of {outside[0][2]} rows: the other "
                f"{R - 1} replica(s) did nothing. Call the step through strategy.run(step, args=(x, y)) on the "
                "batches of strategy.experimental_distribute_dataset(dataset).")
    seen = sorted({entry[0] for entry in log if entry[0] is not None})
    if seen and seen != list(range(R)):
        return (f"the model ran on replicas {seen} of {R}: every replica must run the step.")
    for replica, _, rows in log:
        if rows is None or replica is None:
            continue
        if rows == global_batch and R > 1:
            return (f"every replica got the whole batch of {global_batch} examples: distribute the "
                                 "dataset with strategy.experimental_distribute_dataset(dataset), which splits each "
                                 "global batch over the replicas.")
        if rows != split[replica]:
            return (f"replica {replica} got batches of {rows} examples, expected {split[replica]} "
                                 f"(the global batch of {global_batch} split over {R} replicas).")
    return None


def _kind_of(value: Any) -> str:
    """What ``value`` is, in a few words ("a list of PerReplica"), without its long repr."""
    if isinstance(value, (list, tuple)) and value:
        return f"a {type(value).__name__} of {type(value[0]).__name__}"
    return f"a {type(value).__name__}"


def _check_losses(got: Any, want: list[float], R: int) -> None:
    try:
        got = [float(v) for v in got]
    except (TypeError, ValueError):
        raise AssertionError(f"return one float per step (the mean loss over the global batch): combine the "
                             f"replicas' losses with strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None) "
                             f"and float() it; got {_kind_of(got)}") from None
    if len(got) != len(want):
        raise AssertionError(f"return one loss per step: {len(want)} steps, {len(got)} losses.")
    if np.allclose(got, want, rtol=1e-5, atol=1e-6):
        return
    if np.allclose(np.asarray(got) * R, want, rtol=1e-5, atol=1e-6):
        raise AssertionError(f"the losses you return are 1/{R} of the mean loss: you combined the replicas' losses "
                             "with ReduceOp.MEAN; each replica's loss is already divided by the global batch, so "
                             "combine them with strategy.reduce(tf.distribute.ReduceOp.SUM, ...).")
    raise AssertionError(f"the losses you return are {[round(v, 5) for v in got]}, the mean loss of each step on one "
                         f"device is {[round(v, 5) for v in want]}: return the SUM over replicas of each replica's "
                         "loss (already divided by the global batch).")


MUTANTS = {
    "q1": (
        Mutant("workers numbered from 1", "workers are numbered from 0 after the chief",
               edits=(('{"type": "worker", "index": i}', '{"type": "worker", "index": i + 1}'),)),
        Mutant("chief listed among the workers", "the chief is not a worker",
               edits=(('cluster["worker"] = addresses[1:]', 'cluster["worker"] = addresses'),)),
        Mutant("addresses without the port", "every address is 'host:port'",
               edits=(('addresses = [f"{m}:{port}" for m in machines]', 'addresses = list(machines)'),)),
        Mutant("one port per machine", "every task listens on the same port",
               edits=(('addresses = [f"{m}:{port}" for m in machines]',
                       'addresses = [f"{m}:{port + i}" for i, m in enumerate(machines)]'),)),
        Mutant("dicts instead of JSON strings", "each TF_CONFIG is a JSON string (json.dumps)",
               edits=(('return [json.dumps({"cluster": cluster, "task": task}) for task in tasks]',
                       'return [{"cluster": cluster, "task": task} for task in tasks]'),)),
        Mutant("empty worker job for one machine", "no 'worker' key at all",
               edits=(("if len(addresses) > 1:", "if True:"),)),
        Mutant("every machine is a worker", "the first machine is the chief: its task is",
               edits=(('tasks = [{"type": "chief", "index": 0}] + [{"type": "worker", "index": i} for i in '
                       'range(len(addresses) - 1)]',
                       'tasks = [{"type": "worker", "index": i} for i in range(len(addresses))]'),)),
        Mutant("the chief's task for everyone", "each machine gets its own task",
               edits=(('for task in tasks]', 'for task in tasks[:1] * len(tasks)]'),)),
    ),
    "q2": (
        Mutant("split over the replicas only", "you split the global batch over the R replicas only",
               edits=(("per_replica = global_batch // (W * R)", "per_replica = global_batch // R"),)),
        Mutant("split over the workers only", "you split the global batch over the W workers only",
               edits=(("per_replica = global_batch // (W * R)", "per_replica = global_batch // W"),)),
        Mutant("shard without the worker offset", "worker w's shard starts at example w",
               edits=(("return [worker + W * k for k", "return [W * k for k"),)),
        Mutant("replica and step swapped", "the position is (step * R + replica) * per_replica",
               edits=(("first = (step * R + replica) * per_replica", "first = (replica * R + step) * per_replica"),)),
        Mutant("replicas interleave examples", "not every R-th example",
               edits=(("first = (step * R + replica) * per_replica      # position in this worker's stream\n"
                       "    return [worker + W * k for k in range(first, first + per_replica)]",
                       "first = step * R * per_replica\n"
                       "    return [worker + W * (first + replica + R * j) for j in range(per_replica)]"),)),
        Mutant("a step strides the whole global batch", "a step consumes global_batch / W examples",
               edits=(("first = (step * R + replica) * per_replica",
                       "first = step * global_batch + replica * per_replica"),)),
        Mutant("contiguous shards", "not a contiguous block",
               edits=(("return [worker + W * k for k in range(first, first + per_replica)]",
                       "return [step * global_batch + worker * (global_batch // W) + replica * per_replica + k "
                       "for k in range(per_replica)]"),)),
        Mutant("no error for an uneven batch", "must raise ValueError, it returned",
               edits=(("if global_batch % (W * R):", "if False:"),)),
    ),
    "q3": (
        Mutant("each replica's own mean", "you divided each replica's sum by its own batch size",
               edits=(("float(np.sum(p)) / global_batch", "float(np.mean(p))"),)),
        Mutant("sums, not divided", "you returned each replica's sum",
               edits=(("float(np.sum(p)) / global_batch", "float(np.sum(p))"),)),
        Mutant("mean over replicas", "right only when every replica has the same number of examples",
               edits=(("float(np.sum(p)) / global_batch", "float(np.mean(p)) / len(per_replica)"),)),
        Mutant("global batch from the first slice", "not the number of replicas times the first slice's size",
               edits=(("global_batch = sum(len(p) for p in per_replica)",
                       "global_batch = len(per_replica) * len(per_replica[0])"),)),
        Mutant("divided by the number of replicas", "not by the number of replicas",
               edits=(("global_batch = sum(len(p) for p in per_replica)", "global_batch = len(per_replica)"),)),
        Mutant("one total instead of one per replica", "return one number per replica",
               edits=(("return [float(np.sum(p)) / global_batch for p in per_replica]",
                       "return sum(float(np.sum(p)) / global_batch for p in per_replica)"),)),
    ),
    "q4": (
        Mutant("mean over the replica's own batch", "averaged the loss over its OWN batch",
               edits=(("tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)",
                       "tf.reduce_mean(per_example)"),)),
        Mutant("summed without dividing", "you summed the per-example losses without dividing",
               edits=(("tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)",
                       "tf.reduce_sum(per_example)"),)),
        Mutant("average loss without the global batch size", "right only when every replica has the same number",
               edits=(("tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)",
                       "tf.nn.compute_average_loss(per_example)"),)),
        Mutant("replica mean divided by the replicas", "right only when every replica has the same number",
               edits=(("tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)",
                       "tf.reduce_mean(per_example) / strategy.num_replicas_in_sync"),)),
        Mutant("losses reduced with MEAN", "you combined the replicas' losses with ReduceOp.MEAN",
               edits=(("tf.distribute.ReduceOp.SUM", "tf.distribute.ReduceOp.MEAN"),)),
        Mutant("no strategy.run: one replica does everything", "the model ran outside strategy.run",
               edits=(("for x, y in strategy.experimental_distribute_dataset(dataset):", "for x, y in dataset:"),
                      ("strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(step, args=(x, y)), axis=None)",
                       "step(x, y)"))),
        Mutant("step called on PerReplica values", "pass it to strategy.run(step, args=(x, y))",
               edits=(("strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(step, args=(x, y)), axis=None)",
                       "step(x, y)"),)),
        Mutant("dataset not distributed", "every replica got the whole batch",
               edits=(("for x, y in strategy.experimental_distribute_dataset(dataset):", "for x, y in dataset:"),)),
        Mutant("per-replica losses returned unreduced", "return one float per step",
               edits=(("strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(step, args=(x, y)), axis=None)",
                       "strategy.run(step, args=(x, y))"),
                      ("losses.append(float(loss))", "losses.append(loss)"))),
    ),
}
