"""Split the CPU into N logical TensorFlow devices, so strategies see N "GPUs" on a laptop.

TensorFlow fixes its device list when it first runs an op; after that the split cannot change.
:func:`logical_cpus` is therefore safe to call again with the same N (a notebook re-run) and
raises a clear error for a different N. :func:`replica_devices` is what chapters call: the real
GPUs where TensorFlow has two or more, else N logical CPUs; pass its list to the strategy
(``MirroredStrategy(devices)``). ``MirroredStrategy()`` with no devices takes something else on a
one-GPU machine: :func:`default_mirrored_devices` says what, and :func:`on_machine` says both for
a machine with any number of GPUs. Those two and :func:`choose_replica_devices` are small
functions of device names (no TensorFlow needed, unit-tested with faked device lists).
TensorFlow is imported only when the others are called (without the log lines it prints on some
CPUs: :func:`course_utils.quiet.import_quietly`).
"""
from __future__ import annotations

from collections.abc import Sequence

from . import quiet


def logical_cpus(n: int) -> list[str]:
    """Make ``n`` logical CPU devices and return their names ("/device:CPU:0", ...).

    Call it before any other TensorFlow code. (TensorFlow's C++ log lines are silenced by
    ``import course_utils``: see :mod:`course_utils.quiet`.)
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    tf = quiet.import_quietly("tensorflow")   # without the log lines some CPUs get

    cpu = tf.config.list_physical_devices("CPU")[0]
    current = tf.config.get_logical_device_configuration(cpu)
    if current is None or len(current) != n:
        try:
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(n)])
        except RuntimeError as exc:  # TF already initialised its devices
            have = len(tf.config.list_logical_devices("CPU"))
            if have == n:
                return [d.name for d in tf.config.list_logical_devices("CPU")]
            raise ValueError(
                f"TensorFlow already runs with {have} logical CPU device(s), so it cannot be split "
                f"into {n} now (devices are fixed at the first TF op). Restart the kernel and call "
                f"logical_cpus({n}) before any other TensorFlow code."
            ) from exc
    return [d.name for d in tf.config.list_logical_devices("CPU")]


def gpu_count() -> int:
    """GPUs TensorFlow itself can use: 0 with tensorflow-cpu, the build the course installs, whatever
    PyTorch sees. Listing them does not start TensorFlow's devices: :func:`logical_cpus` still works after."""
    tf = quiet.import_quietly("tensorflow")   # without the log lines some CPUs get

    return len(tf.config.list_physical_devices("GPU"))


def cpu_names(n: int) -> list[str]:
    """The names TensorFlow gives ``n`` logical CPU devices: ["/device:CPU:0", ...]."""
    return [f"/device:CPU:{i}" for i in range(n)]


def gpu_names(n: int) -> list[str]:
    """The names TensorFlow gives ``n`` logical GPU devices: ["/device:GPU:0", ...]."""
    return [f"/device:GPU:{i}" for i in range(n)]


def choose_replica_devices(gpus: Sequence[str], n_cpu: int) -> list[str]:
    """One replica per device of the returned list: ``gpus`` (TensorFlow's logical GPU names) when
    there are two or more, else ``n_cpu`` logical CPUs — one GPU has nothing to mirror over, and
    the chapters' checks need at least two replicas."""
    if not isinstance(n_cpu, int) or isinstance(n_cpu, bool) or n_cpu < 2:
        raise ValueError(f"n_cpu must be an integer >= 2 (replicas to compare), got {n_cpu!r}")
    return list(gpus) if len(gpus) >= 2 else cpu_names(n_cpu)


def default_mirrored_devices(gpus: Sequence[str], cpus: Sequence[str]) -> list[str]:
    """The devices ``tf.distribute.MirroredStrategy()`` takes when given none: every logical GPU
    (``gpus``), or, with none, every logical CPU (``cpus``). This is TensorFlow's own rule
    (``all_local_devices`` in tensorflow/python/distribute/mirrored_strategy.py; a test compares)."""
    return list(gpus) or list(cpus)


def on_machine(n_gpus: int, n_cpu: int) -> dict[str, list[str]]:
    """On a machine where TensorFlow sees ``n_gpus`` GPUs, after ``replica_devices(n_cpu)``:
    ``{"replica_devices": what it returns, "no_argument": what MirroredStrategy() takes}``.
    (With two or more GPUs the CPU is not split: one logical CPU remains.)"""
    gpus = gpu_names(n_gpus)
    devices = choose_replica_devices(gpus, n_cpu)
    cpus = cpu_names(1) if devices == gpus else cpu_names(n_cpu)
    return {"replica_devices": devices, "no_argument": default_mirrored_devices(gpus, cpus)}


def logical_devices() -> tuple[list[str], list[str]]:
    """(logical GPU names, logical CPU names) of this process's TensorFlow. Starts its devices:
    call it after :func:`replica_devices`."""
    tf = quiet.import_quietly("tensorflow")   # without the log lines some CPUs get

    return ([d.name for d in tf.config.list_logical_devices("GPU")],
            [d.name for d in tf.config.list_logical_devices("CPU")])


def replica_devices(n_cpu: int) -> list[str]:
    """The devices a strategy should put one replica on (:func:`choose_replica_devices` of the GPUs
    TensorFlow can use): every GPU when it sees two or more (with memory growth on), else ``n_cpu``
    logical CPUs (see :func:`logical_cpus`; same rules: call it before any other TensorFlow code).
    Pass the list to the strategy: ``MirroredStrategy()`` alone would take the one GPU of a
    one-GPU machine (:func:`default_mirrored_devices`).
    """
    tf = quiet.import_quietly("tensorflow")   # without the log lines some CPUs get

    gpus = tf.config.list_physical_devices("GPU")
    on_gpus = choose_replica_devices(gpu_names(len(gpus)), n_cpu) == gpu_names(len(gpus))
    if on_gpus:
        for gpu in gpus:   # allocate as needed, so worker processes and other frameworks fit beside us
            try:
                tf.config.experimental.set_memory_growth(gpu, True)
            except RuntimeError:   # TF already started (a re-run): the setting stays as it was
                pass
        return [d.name for d in tf.config.list_logical_devices("GPU")]
    return logical_cpus(n_cpu)
