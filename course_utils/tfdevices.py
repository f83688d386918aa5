"""Split the CPU into N logical TensorFlow devices, so strategies see N "GPUs" on a laptop.

TensorFlow fixes its device list when it first runs an op; after that the split cannot change.
:func:`logical_cpus` is therefore safe to call again with the same N (a notebook re-run) and
raises a clear error for a different N. :func:`replica_devices` is what chapters call: the real
GPUs where TensorFlow has any, else N logical CPUs. TensorFlow is imported only when they are called
(without the log lines it prints on some CPUs: :func:`course_utils.quiet.import_quietly`).
"""
from __future__ import annotations

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


def replica_devices(n_cpu: int) -> list[str]:
    """The devices a strategy should put one replica on: every GPU TensorFlow can use when it sees
    two or more (with memory growth on), else ``n_cpu`` logical CPUs — one GPU has nothing to
    mirror over (see :func:`logical_cpus`; same rules: call it before any other TensorFlow code).
    """
    tf = quiet.import_quietly("tensorflow")   # without the log lines some CPUs get

    gpus = tf.config.list_physical_devices("GPU")
    if len(gpus) >= 2:
        for gpu in gpus:   # allocate as needed, so worker processes and other frameworks fit beside us
            try:
                tf.config.experimental.set_memory_growth(gpu, True)
            except RuntimeError:   # TF already started (a re-run): the setting stays as it was
                pass
        return [d.name for d in tf.config.list_logical_devices("GPU")]
    return logical_cpus(n_cpu)
