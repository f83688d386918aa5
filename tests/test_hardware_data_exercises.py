import subprocess
import sys

import numpy as np
import pytest

from course_utils import data, hardware, measure, models


def test_report_is_readable():
    r = hardware.report()
    text = str(r)
    assert r.cpu_cores >= 1 and "CPU cores" in text and "torch" in text
    with pytest.raises(ValueError):
        hardware.bf16_supported("tpu")


def test_seed_everything_is_reproducible():
    import torch

    hardware.seed_everything(3)
    a = (np.random.rand(), torch.rand(1).item())
    hardware.seed_everything(3)
    assert a == (np.random.rand(), torch.rand(1).item())


def test_importing_course_utils_imports_no_framework():
    code = ("import sys, course_utils, course_utils.launch, course_utils.hardware, "
            "course_utils.costmodel, course_utils.tfdevices, course_utils.data, course_utils.measure, "
            "grading, grading.ranks; "
            "print(sorted(m for m in ('tensorflow', 'keras', 'jax', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_shards_are_disjoint_and_complete():
    parts = [data.shard(10, r, 3) for r in range(3)]
    assert sorted(np.concatenate(parts).tolist()) == list(range(10))
    with pytest.raises(ValueError):
        data.shard(10, 3, 3)


def test_datasets():
    X, y, w = data.linear_regression(32, 4)
    assert X.shape == (32, 4) and y.shape == (32, 1) and w.shape == (4, 1)
    np.testing.assert_array_equal(X, data.linear_regression(32, 4)[0])
    Xtr, ytr, Xte, yte = data.digits()
    assert Xtr.shape[1] == 64 and len(Xtr) + len(Xte) == 1797 and set(ytr) == set(range(10))


def test_digits_read_without_importing_sklearn_equal_load_digits():
    code = ("import sys; from course_utils import data; data.digits(); "
            "assert 'sklearn' not in sys.modules and 'scipy' not in sys.modules, 'imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
    from sklearn.datasets import load_digits

    X, y = data._sklearn_digits()
    X_ref, y_ref = load_digits(return_X_y=True)
    np.testing.assert_array_equal(X, X_ref)
    np.testing.assert_array_equal(y, y_ref)


def test_models_and_diff():
    a, b = models.mlp([4, 8, 2]), models.mlp([4, 8, 2])
    assert models.count_params(a) == 4 * 8 + 8 + 8 * 2 + 2
    assert models.max_param_diff(a, b) == 0
    with pytest.raises(ValueError):
        models.max_param_diff(a, models.mlp([4, 2]))
    moved = [p.detach() + 0.5 for p in b.parameters()]          # parameter lists, as workers return them
    assert models.max_param_diff(moved, a) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        models.max_param_diff(moved[:-1], a)


def test_time_fn():
    t = measure.time_fn(lambda: sum(range(100)), repeats=5)
    assert len(t.samples) == 5 and t.median > 0 and "ms" in str(t)
    assert measure.matmul_gflops(1000, 1.0) == 2.0


def test_heap_bytes_sees_a_tensor_come_and_go():
    import torch

    before = measure.heap_bytes()
    t = torch.empty(4_000_000)                       # 16 MB of float32
    during = measure.heap_bytes()
    del t
    after = measure.heap_bytes()
    assert 0.99 * 16e6 <= during - before <= 1.01 * 16e6
    assert abs(after - before) < 1e6
