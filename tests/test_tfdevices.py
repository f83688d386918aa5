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
