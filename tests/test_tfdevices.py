import subprocess
import sys


def test_logical_cpus_is_idempotent_and_refuses_a_different_split():
    code = (
        "from course_utils.tfdevices import logical_cpus\n"
        "assert logical_cpus(2) == ['/device:CPU:0', '/device:CPU:1']\n"
        "import tensorflow as tf; tf.constant(1.0) + 1\n"
        "assert len(logical_cpus(2)) == 2\n"
        "try:\n"
        "    logical_cpus(3)\n"
        "except ValueError as e:\n"
        "    assert 'Restart the kernel' in str(e), e\n"
        "    print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]
    try:
        from course_utils.tfdevices import logical_cpus
        logical_cpus(0)
    except ValueError as e:
        assert "integer >= 1" in str(e)
    else:
        raise AssertionError("logical_cpus(0) should raise")


def test_replica_devices_falls_back_to_logical_cpus_without_gpus():
    code = ("from course_utils.tfdevices import replica_devices\n"
            "print(replica_devices(3))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "CUDA_VISIBLE_DEVICES": ""})
    assert out.stdout.strip() == "['/device:CPU:0', '/device:CPU:1', '/device:CPU:2']", out.stderr[-2000:]


# --- issue 38: the device list a strategy gets, from faked device lists (0, 1, 2, 8 GPUs) ---------
import pytest  # noqa: E402

from course_utils import tfdevices  # noqa: E402

GPU_COUNTS = (0, 1, 2, 8)


class FakeTF:
    """Just enough of ``tensorflow`` for tfdevices: ``n_gpus`` physical GPUs, one physical CPU that
    can be split into logical CPUs until the devices start (listing logical devices starts them)."""

    def __init__(self, n_gpus: int):
        from types import SimpleNamespace as NS
        self.n_gpus, self.split, self.started, self.growth = n_gpus, None, False, []
        self.config = NS(
            list_physical_devices=lambda kind: [NS(name=f"/physical_device:{kind}:{i}")
                                                for i in range(self.n_gpus if kind == "GPU" else 1)],
            list_logical_devices=self._logical,
            get_logical_device_configuration=lambda dev: self.split,
            set_logical_device_configuration=self._set_split,
            LogicalDeviceConfiguration=lambda: "logical",
            experimental=NS(set_memory_growth=lambda dev, on: self.growth.append(dev.name)))

    def _logical(self, kind):
        from types import SimpleNamespace as NS
        self.started = True
        n = self.n_gpus if kind == "GPU" else len(self.split or [None])
        return [NS(name=f"/device:{kind}:{i}") for i in range(n)]

    def _set_split(self, dev, configs):
        if self.started:
            raise RuntimeError("Virtual devices cannot be modified after being initialized")
        self.split = list(configs)


@pytest.fixture
def fake_tf(monkeypatch):
    def make(n_gpus: int) -> FakeTF:
        tf = FakeTF(n_gpus)
        monkeypatch.setattr(tfdevices.quiet, "import_quietly", lambda name: tf)
        return tf
    return make


@pytest.mark.parametrize("n_gpus", GPU_COUNTS)
def test_replica_devices_and_the_no_argument_strategy_on_faked_machines(fake_tf, n_gpus):
    """What a chapter passes to MirroredStrategy, and what MirroredStrategy() alone would take."""
    fake = fake_tf(n_gpus)
    devices = tfdevices.replica_devices(4)
    gpus, cpus = tfdevices.logical_devices()
    if n_gpus >= 2:
        assert devices == [f"/device:GPU:{i}" for i in range(n_gpus)] and cpus == ["/device:CPU:0"]
        assert len(fake.growth) == n_gpus          # memory growth on every GPU
    else:
        assert devices == ["/device:CPU:0", "/device:CPU:1", "/device:CPU:2", "/device:CPU:3"] == cpus
        assert fake.growth == []
    assert tfdevices.on_machine(n_gpus, 4) == {
        "replica_devices": devices, "no_argument": tfdevices.default_mirrored_devices(gpus, cpus)}


def test_no_argument_strategy_takes_the_single_gpu_of_a_one_gpu_machine():
    """The bug of issue 38: on a 1-GPU machine (Colab) MirroredStrategy() has 1 replica, not 4."""
    expected = {0: 4, 1: 1, 2: 2, 8: 8}
    for n_gpus, replicas in expected.items():
        machine = tfdevices.on_machine(n_gpus, 4)
        assert len(machine["no_argument"]) == replicas, (n_gpus, machine)
        assert len(machine["replica_devices"]) == max(4 if n_gpus < 2 else n_gpus, 2)
    assert tfdevices.on_machine(1, 4)["no_argument"] == ["/device:GPU:0"]


def test_choose_replica_devices_refuses_fewer_than_two_cpus():
    with pytest.raises(ValueError, match="n_cpu"):
        tfdevices.choose_replica_devices([], 1)
    assert tfdevices.choose_replica_devices(["/device:GPU:0"], 2) == ["/device:CPU:0", "/device:CPU:1"]


def test_default_mirrored_devices_is_tensorflows_own_rule():
    """Compared with TensorFlow's all_local_devices (what MirroredStrategy() calls) on this machine."""
    code = ("from course_utils.tfdevices import logical_cpus, logical_devices, default_mirrored_devices\n"
            "logical_cpus(3)\n"
            "from tensorflow.python.distribute import mirrored_strategy\n"
            "import tensorflow as tf\n"
            "theirs = [d.name for d in mirrored_strategy.all_local_devices()]\n"
            "chosen = tf.distribute.MirroredStrategy().extended.worker_devices\n"
            "print(theirs == default_mirrored_devices(*logical_devices()), len(chosen))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "CUDA_VISIBLE_DEVICES": ""})
    assert out.stdout.strip().splitlines()[-1] == "True 3", out.stderr[-2000:]
