"""Exercises 06: Keras 3 on many devices — migrating multi_gpu_model, LayoutMap shards, dtype policies,
and a per-replica input pipeline for ``fit``.

Q1 ``make_parallel(build, devices)`` and ``migrated_batch_size`` (:func:`check_make_parallel`,
:func:`check_migrated_batch_size`): the strategy, its devices, mirrored variables, the compiled
optimizer and loss, and one epoch of training equal to one device's. Q2 ``shard_shape``
(:func:`check_shard_shape`) and Q3 ``choose_policy`` (:func:`check_choose_policy`): plain Python,
matched against the classic mistakes. Q4 ``fit_parallel(model, X, y, global_batch, epochs)``
(:func:`check_fit_parallel`): the student feeds ``fit`` from ``distribute_datasets_from_function``;
a layer in the model records each replica's batch size, and the weights must equal the same epochs
on one device. TensorFlow and Keras are imported inside the functions that need them.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .mutant import Mutant
from .tf_strategies import _call, _problem, _recorder_layer, _said, _strategy, max_difference, sgd_reference


def _weights(model) -> list[np.ndarray]:
    return [np.asarray(v.numpy()) for v in model.trainable_variables]


# ---------------------------------------------------------------- Q1: migrating multi_gpu_model
def check_make_parallel(make_parallel: Callable, build: Callable, devices: Sequence[str], *, n: int = 128,
                        batch_size: int = 64, epochs: int = 1, seed: int = 0) -> None:
    """``make_parallel(build, devices)`` must return a model compiled with SGD(0.05) and a sparse
    categorical cross-entropy from logits, whose variables a MirroredStrategy over ``devices`` created;
    ``epochs`` of ``fit`` on ``n`` digits (global batches of ``batch_size``) must change its weights as
    on one device (float32 rounding: 1e-5)."""
    import keras

    from course_utils import data

    devices = list(devices)
    model = _call("make_parallel", make_parallel, build, devices)
    if model is None or model is Ellipsis:
        raise AssertionError("make_parallel returned None: return the compiled model.")
    if not isinstance(model, keras.Model):
        raise AssertionError(f"make_parallel must return a keras Model, got {type(model).__name__}.")
    _check_strategy(model, devices)
    if getattr(model, "optimizer", None) is None or not getattr(model, "compiled", True):
        raise AssertionError("the model is not compiled: compile the model before returning it (SGD, learning "
                             "rate 0.05, sparse categorical cross-entropy from logits).")
    optimizer = model.optimizer
    rate = float(np.asarray(optimizer.learning_rate.numpy() if hasattr(optimizer.learning_rate, "numpy")
                            else optimizer.learning_rate))
    if type(optimizer).__name__ != "SGD" or abs(rate - 0.05) > 1e-7:
        raise AssertionError(f"the model is compiled with {type(optimizer).__name__} at learning rate {rate:g}: use "
                             "SGD with learning rate 0.05 (keras.optimizers.SGD(0.05)), as the old script's \"sgd\" "
                             "with the rate the exercise asks.")
    loss = getattr(model, "loss", None)
    if isinstance(loss, str) or getattr(loss, "from_logits", True) is False:
        raise AssertionError("the loss treats build()'s outputs as probabilities: build() has no softmax, so compute "
                             "the loss from logits, keras.losses.SparseCategoricalCrossentropy(from_logits=True).")
    X, y, _, _ = data.digits()
    rows = np.random.default_rng(seed).permutation(len(X))[:n]
    X, y = X[rows], y[rows]
    init = _weights(model)
    try:
        model.fit(X, y, batch_size=batch_size, epochs=epochs, verbose=0, shuffle=False)
    except Exception as error:   # noqa: BLE001
        raise AssertionError(f"model.fit on {len(devices)} devices raised {_said(error)}") from None
    trajectory, _ = sgd_reference(np.tile(X, (epochs, 1)), np.tile(y, epochs), init, global_batch=batch_size, lr=0.05)
    worst = max_difference(_weights(model), trajectory[-1])
    if worst > 1e-5:
        raise AssertionError(f"after {epochs} epoch(s) of fit the weights differ from one device's by up to "
                             f"{worst:.3g}: with SGD(0.05) and the loss from logits, {len(devices)} replicas must "
                             "train exactly as one device on the same global batches.")


def _check_strategy(model, devices: list[str]) -> None:
    strategy = model.distribute_strategy
    kind = type(strategy).__name__
    kernel = model.weights[0].value if model.weights else None
    if kind.startswith("_Default"):
        raise AssertionError("the model's variables were not created by the strategy: build the model inside "
                             "strategy.scope(), where its variables become MirroredVariables (one copy per device).")
    if kind != "MirroredStrategy":
        raise AssertionError(f"the model belongs to a {kind}: use tf.distribute.MirroredStrategy(devices), which "
                             "mirrors over every device in `devices`.")
    used = list(strategy.extended.worker_devices)
    if len(used) != len(devices):
        raise AssertionError(f"the strategy has {len(used)} replica(s), `devices` has {len(devices)}: mirror over "
                             "every device in `devices`, MirroredStrategy(devices).")
    if type(kernel).__name__ != "MirroredVariable":
        raise AssertionError(f"the first kernel is a {type(kernel).__name__}, not a MirroredVariable: build the model "
                             "inside strategy.scope().")


def check_migrated_batch_size(value: Any, *, old_batch: int = 64, gpus: int = 2) -> None:
    """``value`` must be the Keras 3 ``batch_size`` (global) that gives each of ``gpus`` devices what
    ``multi_gpu_model(..., gpus)`` with ``batch_size=old_batch`` gave each GPU."""
    if value is None or value is Ellipsis:
        raise AssertionError("`migrated_batch_size` is still `...`: replace it with the batch_size to pass to fit.")
    if value == old_batch:
        return
    per_device = value / gpus if isinstance(value, (int, float)) else "?"
    raise AssertionError(f"`migrated_batch_size` is {value!r}: in Keras 3 batch_size is the GLOBAL batch, split over "
                         f"the {gpus} replicas, so {value!r} gives each device {per_device} examples; multi_gpu_model "
                         f"also split its batch_size of {old_batch} over the {gpus} GPUs ({old_batch // gpus} each).")


# ---------------------------------------------------------------- Q2: the shard each device holds
def _shard(shape, layout, mesh_shape, axis_names, size_of) -> tuple:
    return tuple(n if axis is None else n // size_of(dim, axis) for dim, (n, axis) in enumerate(zip(shape, layout)))


def check_shard_shape(shard_shape: Callable, cases: Sequence[tuple], uneven: tuple) -> None:
    """``shard_shape(shape, layout, mesh_shape, axis_names)`` must give each case's shard as a tuple and
    raise ValueError for ``uneven`` (the same four arguments)."""
    for shape, layout, mesh_shape, axis_names in cases:
        args = (tuple(shape), tuple(layout), tuple(mesh_shape), tuple(axis_names))
        call = f"shard_shape{args}"
        got = _call("shard_shape", shard_shape, *args)
        if got is None or got is Ellipsis:
            raise AssertionError("shard_shape returned None: return the shape of one device's piece, a tuple.")
        sizes = dict(zip(axis_names, mesh_shape))
        want = _shard(*args, lambda dim, axis: sizes[axis])
        if got == want:
            continue
        if tuple(got) == want if isinstance(got, (list, tuple)) else False:
            raise AssertionError(f"{call} returned a {type(got).__name__} {got}: return a tuple, {want}.")
        raise AssertionError(f"{call} is {got}, expected {want}: {_shard_hint(got, args, sizes)}.")
    try:
        got = shard_shape(*uneven)
    except ValueError:
        return
    except Exception as error:   # noqa: BLE001
        raise AssertionError(f"shard_shape{tuple(uneven)} raised {_said(error)}: a dimension that does not split "
                             "evenly must raise ValueError.") from None
    raise AssertionError(f"shard_shape{tuple(uneven)} returned {got}: a dimension does not split evenly over its axis, "
                         "so it must raise ValueError that names the dimension (Keras cannot shard it either).")


def _shard_hint(got: Any, args: tuple, sizes: dict) -> str:
    shape, layout, mesh_shape, axis_names = args
    swapped = dict(zip(reversed(axis_names), mesh_shape))
    wrong = {
        "look up each axis's size by its name, not by the dimension's position in the mesh":
            lambda dim, axis: mesh_shape[dim],
        "the mesh's sizes go with axis_names in the same order: axis_names[i] has mesh_shape[i] devices":
            lambda dim, axis: swapped[axis],
        "a dimension is split only over its own mesh axis, not over every device of the mesh":
            lambda dim, axis: int(np.prod(mesh_shape)),
        "each device holds 1/size of a split dimension: divide by the axis size": lambda dim, axis: 1 / sizes[axis],
    }
    for hint, size_of in wrong.items():
        try:
            if tuple(got) == tuple(int(v) for v in _shard(*args, size_of)):
                return hint
        except (IndexError, KeyError, TypeError, ZeroDivisionError, ValueError):
            continue
    return "a None dimension is whole; a dimension named by an axis is divided by that axis's size"


# ---------------------------------------------------------------- Q3: the dtype policy
POLICY_CASES = {
    "public": (
        ({"kind": "gpu", "compute_capability": (9, 0)}, "mixed_bfloat16", "Hopper (9.0) has bfloat16 tensor cores"),
        ({"kind": "gpu", "compute_capability": (7, 0)}, "mixed_float16",
         "Volta (7.0) has float16 tensor cores but no bfloat16 ones"),
        ({"kind": "cpu", "flags": {"avx2", "fma"}}, "float32",
         "without avx512_bf16 or amx_bf16 every 16-bit op converts to float32 and back: slower (measured in the "
         "chapter)"),
    ),
    "hidden": (
        ({"kind": "tpu"}, "mixed_bfloat16", "TPUs compute in bfloat16 (their matrix units are bfloat16)"),
        ({"kind": "gpu", "compute_capability": (8, 0)}, "mixed_bfloat16",
         "bfloat16 tensor cores start with Ampere (8.0)"),
        ({"kind": "gpu", "compute_capability": (8, 6)}, "mixed_bfloat16", "an RTX 3090 (8.6) is an Ampere"),
        ({"kind": "gpu", "compute_capability": (7, 5)}, "mixed_float16",
         "Turing (7.5) has float16 tensor cores but no bfloat16 ones"),
        ({"kind": "gpu", "compute_capability": (6, 1)}, "float32",
         "before Volta there are no tensor cores: 16-bit compute does not pay"),
        ({"kind": "cpu", "flags": {"avx512f", "amx_bf16"}}, "mixed_bfloat16", "amx_bf16 is native bfloat16 too"),
        ({"kind": "cpu", "flags": {"avx512f", "avx512_bf16"}}, "mixed_bfloat16", "avx512_bf16 is native bfloat16"),
    ),
}
POLICIES = ("mixed_bfloat16", "mixed_float16", "float32")


def check_choose_policy(choose_policy: Callable, cases: Sequence[tuple] = POLICY_CASES["public"]) -> None:
    """``choose_policy(device)`` must give each case's policy, one of :data:`POLICIES`."""
    for device, want, why in cases:
        got = _call("choose_policy", choose_policy, dict(device))
        if got is None or got is Ellipsis:
            raise AssertionError("choose_policy returned None: return a policy name such as \"float32\".")
        if got == want:
            continue
        if got not in POLICIES:
            raise AssertionError(f"choose_policy({device}) returned {got!r}, not one of {list(POLICIES)}: the mixed "
                                 "policies compute in 16 bits and keep the variables in float32, as the chapter's "
                                 "training needs.")
        raise AssertionError(f"choose_policy({device}) returned {got!r}, expected {want!r}: {why}.")


# ---------------------------------------------------------------- Q4: a per-replica input pipeline
def check_fit_parallel(fit_parallel: Callable, devices: Sequence[str], *, n: int = 48, global_batch: int = 8,
                       epochs: int = 2, lr: float = 0.05, sizes: tuple[int, int, int] = (6, 8, 3),
                       seed: int = 0) -> None:
    """``fit_parallel(model, X, y, global_batch, epochs)`` must train ``model`` (compiled in the scope of a
    ``MirroredStrategy(devices)``) with ``fit`` on a ``distribute_datasets_from_function`` dataset: every
    replica gets ``global_batch / replicas`` examples a step, and the weights equal ``epochs`` of
    ``fit(X, y, batch_size=global_batch, shuffle=False)`` on one device (float32 rounding: 1e-5)."""
    import keras

    devices = list(devices)
    R = len(devices)
    X, y = _problem(n, sizes[0], sizes[-1], seed)
    log: list = []
    strategy = _strategy(devices)
    with strategy.scope():
        keras.utils.set_random_seed(seed)
        model = keras.Sequential([keras.Input((sizes[0],)), _recorder_layer(log),
                                  keras.layers.Dense(sizes[1], activation="relu"), keras.layers.Dense(sizes[2])])
        model.compile(optimizer=keras.optimizers.SGD(lr),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    init = _weights(model)
    log.clear()
    calls, made = _record_calls(strategy, ("distribute_datasets_from_function", "experimental_distribute_dataset"))
    fed = _record_fit(model)
    try:
        fit_parallel(model, X.copy(), y.copy(), global_batch, epochs)
    except AssertionError:
        raise
    except Exception as error:   # noqa: BLE001
        raise AssertionError(f"fit_parallel raised {_said(error)}") from None
    if not log:
        raise AssertionError("fit_parallel never trained the model: call model.fit on the distributed dataset.")
    _check_rows(log, R, global_batch, calls)
    if not any(x is d for x in fed for d in made):
        raise AssertionError("fit_parallel did not build its input with strategy.distribute_datasets_from_function: "
                             "feed fit from strategy.distribute_datasets_from_function(dataset_fn), where each input "
                             "pipeline batches by the per-replica batch.")
    more = 2 * max(R, 2) * epochs   # enough epochs to recognise a loop that runs too many steps
    trajectory, _ = sgd_reference(np.tile(X, (more, 1)), np.tile(y, more), init, global_batch=global_batch, lr=lr)
    total = epochs * (n // global_batch)
    weights = _weights(model)
    worst = max_difference(weights, trajectory[total - 1])
    if worst <= 1e-5:
        return
    steps = next((k + 1 for k, w in enumerate(trajectory) if max_difference(weights, w) <= 1e-5), None)
    if steps is not None:
        raise AssertionError(f"fit made {steps} SGD steps, one device makes {total} ({epochs} epochs of "
                             f"{n // global_batch}): let fit read the distributed dataset to its end each epoch (no "
                             "steps_per_epoch, which counts global batches), for `epochs` epochs.")
    raise AssertionError(f"after {epochs} epochs the weights differ from one device's by up to {worst:.3g}: the global "
                         "batches must hold the same examples in the same order as fit(X, y, batch_size=global_batch, "
                         "shuffle=False) on one device (no shuffle, no repeat).")


def _record_calls(strategy, names: Sequence[str]) -> tuple[dict[str, int], list]:
    """Count calls of ``strategy``'s methods ``names`` (wrapped on this instance only), and keep what
    they returned (the distributed datasets)."""
    calls, made = dict.fromkeys(names, 0), []
    for name in names:
        real = getattr(strategy, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            made.append(_real(*args, **kwargs))
            return made[-1]

        setattr(strategy, name, counted)
    return calls, made


def _record_fit(model) -> list:
    """The ``x`` of every ``model.fit`` call (``fit`` wrapped on this model only)."""
    fed, real = [], model.fit

    def fit(x=None, *args, **kwargs):
        fed.append(x)
        return real(x, *args, **kwargs)

    model.fit = fit
    return fed


def _check_rows(log: list, R: int, global_batch: int, calls: dict) -> None:
    per = global_batch // R
    log = [entry for entry in log if entry[1] is not None]   # not fit's symbolic build (cross-replica context)
    outside = [entry for entry in log if entry[1] != R]
    if outside:
        raise AssertionError(f"the model ran on one replica with batches of {outside[0][2]}: train it with fit on the "
                             f"dataset of distribute_datasets_from_function, so that fit runs every replica.")
    for replica, _, rows in log:
        if rows is None or rows == per:
            continue
        if rows == global_batch and R > 1:
            raise AssertionError(f"each replica got the whole global batch of {global_batch}: dataset_fn must batch by "
                                 "the per-replica batch, input_context.get_per_replica_batch_size(global_batch).")
        if calls["experimental_distribute_dataset"] and rows * R == per:
            raise AssertionError(f"each replica got {rows} examples: you split the batch twice. "
                                 "experimental_distribute_dataset splits a dataset of GLOBAL batches; batch by the "
                                 "per-replica batch in a dataset_fn for distribute_datasets_from_function instead.")
        raise AssertionError(f"replica {replica} got batches of {rows} examples, expected {per} ({global_batch} over "
                             f"{R} replica(s)): the per-replica batch depends on the number of replicas, use "
                             "input_context.get_per_replica_batch_size(global_batch).")


MUTANTS = {
    "q1": (
        Mutant("model built outside the scope", "build the model inside strategy.scope()",
               edits=(("    with strategy.scope():\n        model = build()\n",
                       "    model = build()\n    with strategy.scope():\n"),)),
        Mutant("loss on probabilities", "compute the loss from logits",
               edits=(("from_logits=True", "from_logits=False"),)),
        Mutant("default learning rate", "use SGD with learning rate 0.05",
               edits=(("keras.optimizers.SGD(0.05)", "keras.optimizers.SGD()"),)),
        Mutant("Adam instead of SGD", "compiled with Adam",
               edits=(("keras.optimizers.SGD(0.05)", "keras.optimizers.Adam(0.05)"),)),
        Mutant("one device only", "mirror over every device in `devices`",
               edits=(("MirroredStrategy(devices)", "MirroredStrategy(devices[:1])"),)),
        Mutant("not compiled", "compile the model before returning it",
               edits=(("        model.compile(optimizer=keras.optimizers.SGD(0.05),\n"
                       "                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))\n",
                       ""),)),
        Mutant("per-device batch size", "so 32 gives each device 16.0 examples",
               edits=(("migrated_batch_size = 64", "migrated_batch_size = 32"),)),
        Mutant("batch size doubled", "so 128 gives each device 64.0 examples",
               edits=(("migrated_batch_size = 64", "migrated_batch_size = 128"),)),
    ),
    "q2": (
        Mutant("axis size by position", "look up each axis's size by its name",
               edits=(("out.append(n // sizes[axis])", "out.append(n // mesh_shape[dim])"),)),
        Mutant("names and sizes reversed", "axis_names[i] has mesh_shape[i] devices",
               edits=(("sizes = dict(zip(axis_names, mesh_shape))",
                       "sizes = dict(zip(reversed(axis_names), mesh_shape))"),)),
        Mutant("split over the whole mesh", "not over every device of the mesh",
               edits=(("out.append(n // sizes[axis])", "out.append(n // math.prod(mesh_shape))"),
                      ("    sizes = dict(zip(axis_names, mesh_shape))\n",
                       "    import math\n\n    sizes = dict(zip(axis_names, mesh_shape))\n"))),
        Mutant("multiplied by the axis size", "divide by the axis size",
               edits=(("out.append(n // sizes[axis])", "out.append(n * sizes[axis])"),)),
        Mutant("a list, not a tuple", "return a tuple",
               edits=(("return tuple(out)", "return out"),)),
        Mutant("no error for an uneven split", "so it must raise ValueError",
               edits=(("if n % sizes[axis]:", "if False:"),)),
        Mutant("rounded up instead of raising", "so it must raise ValueError that names",
               edits=(("if n % sizes[axis]:", "if False:"),
                      ("out.append(n // sizes[axis])", "out.append(-(-n // sizes[axis]))"))),
    ),
    "q3": (
        Mutant("bfloat16 from Volta", "returned 'mixed_bfloat16', expected 'mixed_float16': Volta (7.0)",
               edits=(("cc >= (8, 0)", "cc >= (7, 0)"),)),
        Mutant("float16 only after Volta", "returned 'float32', expected 'mixed_float16': Volta (7.0)",
               edits=(("cc >= (7, 0)", "cc > (7, 0)"),)),
        Mutant("float16 before Volta", "before Volta there are no tensor cores",
               edits=(('if cc >= (7, 0) else "float32"', 'if cc >= (7, 0) else "mixed_float16"'),)),
        Mutant("TPU in float16", "TPUs compute in bfloat16",
               edits=(('        return "mixed_bfloat16"\n    if device["kind"] == "gpu"',
                       '        return "mixed_float16"\n    if device["kind"] == "gpu"'),)),
        Mutant("pure bfloat16 on TPU", "the mixed policies compute in 16 bits and keep the variables in float32",
               edits=(('        return "mixed_bfloat16"\n    if device["kind"] == "gpu"',
                       '        return "bfloat16"\n    if device["kind"] == "gpu"'),)),
        Mutant("every CPU in bfloat16", "without avx512_bf16 or amx_bf16",
               edits=(('return "mixed_bfloat16" if {"avx512_bf16", "amx_bf16"} & set(device["flags"]) else "float32"',
                       'return "mixed_bfloat16"'),)),
        Mutant("AMX not counted", "amx_bf16 is native bfloat16 too",
               edits=(('{"avx512_bf16", "amx_bf16"}', '{"avx512_bf16"}'),)),
    ),
    "q4": (
        Mutant("batched by the global batch", "each replica got the whole global batch",
               edits=(("batch = input_context.get_per_replica_batch_size(global_batch)", "batch = global_batch"),)),
        Mutant("per-replica batch for 2 devices only", "the per-replica batch depends on the number of replicas",
               edits=(("batch = input_context.get_per_replica_batch_size(global_batch)",
                       "batch = global_batch // 2"),)),
        Mutant("shuffled pipeline", "the same examples in the same order",
               edits=(("return ds.batch(batch, drop_remainder=True)",
                       "return ds.shuffle(len(X), seed=0).batch(batch, drop_remainder=True)"),)),
        Mutant("repeated, steps_per_epoch in per-replica batches", "let fit read the distributed dataset to its end",
               edits=(("return ds.batch(batch, drop_remainder=True)",
                       "return ds.repeat().batch(batch, drop_remainder=True)"),
                      ("model.fit(dataset, epochs=epochs, verbose=0)",
                       "model.fit(dataset, epochs=epochs, steps_per_epoch=len(X) // batch_size(), verbose=0)"),
                      ("    dataset = strategy.distribute_datasets_from_function(dataset_fn)\n",
                       "    dataset = strategy.distribute_datasets_from_function(dataset_fn)\n\n"
                       "    def batch_size():\n"
                       "        return global_batch // strategy.num_replicas_in_sync\n\n"))),
        Mutant("one epoch", "SGD steps, one device makes",
               edits=(("model.fit(dataset, epochs=epochs, verbose=0)", "model.fit(dataset, epochs=1, verbose=0)"),)),
        Mutant("fit on the arrays", "feed fit from strategy.distribute_datasets_from_function",
               edits=(("model.fit(dataset, epochs=epochs, verbose=0)",
                       "model.fit(X, y, batch_size=global_batch, epochs=epochs, shuffle=False, verbose=0)"),)),
        Mutant("per-replica batches split again", "you split the batch twice",
               edits=(("dataset = strategy.distribute_datasets_from_function(dataset_fn)",
                       "dataset = strategy.experimental_distribute_dataset(\n"
                       "        dataset_fn(tf.distribute.InputContext(1, 0, strategy.num_replicas_in_sync)))"),)),
    ),
}
