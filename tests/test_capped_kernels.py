"""The notebook tier's portability check works: under notebooks/capped-kernels.env PyTorch, MKL and
NumPy really run other kernels, so floats differ in their last bits from the machine's own.

If a library stopped honouring its variable, the check would silently compare like with like;
these tests fail instead.
"""
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

ENV_FILE = Path(__file__).resolve().parents[1] / "notebooks" / "capped-kernels.env"
X86 = platform.machine().lower() in ("x86_64", "amd64")
pytestmark = pytest.mark.skipif(not X86, reason="the caps name x86 instruction sets")

PROBE = """
import json, numpy as np, torch
g = torch.Generator().manual_seed(0)
a, b = torch.randn(257, 263, generator=g), torch.randn(263, 251, generator=g)
x = torch.randn(1_000_003, generator=g)
r = np.random.default_rng(0).standard_normal((301, 299))
print(json.dumps({
    "capability": torch.backends.cpu.get_cpu_capability(),
    "threads": torch.get_num_threads(),
    "matmul": (a @ b).double().sum().item(),           # MKL sgemm
    "tanh_sum": torch.tanh(x).double().sum().item(),    # ATen's vectorised elementwise kernel
    "numpy_matmul": float((r @ r.T).sum()),             # NumPy's OpenBLAS dgemm
}))
"""


def capped_env() -> dict[str, str]:
    pairs = [line.split("=", 1) for line in ENV_FILE.read_text().splitlines() if line and not line.startswith("#")]
    return dict(pairs)


def probe(env: dict[str, str]) -> dict:
    import json
    base = {k: v for k, v in os.environ.items() if k not in capped_env()}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**base, **env}, capture_output=True, text=True,
                         check=True, timeout=120)
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def native_and_capped():
    return probe({}), probe(capped_env())


def test_env_file_names_every_library():
    env = capped_env()
    assert {"ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "OPENBLAS_CORETYPE",
            "TF_ENABLE_ONEDNN_OPTS", "OMP_NUM_THREADS"} <= set(env)


def test_pytorch_runs_its_unvectorised_kernels(native_and_capped):
    native, capped = native_and_capped
    assert capped["capability"] == "DEFAULT" != native["capability"]
    assert capped["threads"] == 1


def test_the_last_bits_of_floats_change(native_and_capped):
    native, capped = native_and_capped
    changed = [k for k in ("matmul", "tanh_sum", "numpy_matmul") if native[k] != capped[k]]
    assert len(changed) >= 2, f"capping changed only {changed}: {native} vs {capped}"
    for k in ("matmul", "tanh_sum", "numpy_matmul"):   # ... and only the last bits
        assert abs(native[k] - capped[k]) <= 1e-4 * max(1.0, abs(native[k])), k


TF_BF16 = """
import tensorflow as tf
@tf.function
def f(a, b):
    return tf.nn.relu(tf.matmul(a, b))
a = tf.cast(tf.random.stateless_normal((64, 128), seed=(0, 1)), tf.bfloat16)
b = tf.cast(tf.random.stateless_normal((128, 32), seed=(0, 2)), tf.bfloat16)
print("bf16 matmul ok", float(tf.reduce_sum(tf.cast(f(a, b), tf.float32))) > 0)
"""


def makefile_capped_env() -> dict[str, str]:
    """The environment the notebook tier really runs under (`make capped-kernels` prints it)."""
    out = subprocess.run(["make", "-s", "--no-print-directory", "capped-kernels"], cwd=ENV_FILE.parents[1],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return dict(pair.split("=", 1) for pair in out.split())


def test_the_makefile_compares_under_the_env_file():
    env = makefile_capped_env()
    assert {k: v for k, v in capped_env().items() if k != "TF_ENABLE_ONEDNN_OPTS"}.items() <= env.items()
    assert env["TF_ENABLE_ONEDNN_OPTS"] in ("0", "1")


def test_tensorflow_bf16_runs_under_the_caps():
    """Chapter 06 trains with mixed_bfloat16. On an AVX-512 CPU TensorFlow's oneDNN bf16 kernels,
    capped to SSE4, abort the process ("could not create a primitive descriptor"): the notebook tier
    would hang on a dead kernel. The Makefile turns that path off there; this fails if it stops."""
    base = {k: v for k, v in os.environ.items() if k not in capped_env()}
    proc = subprocess.run([sys.executable, "-c", TF_BF16], env={**base, **makefile_capped_env()},
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0 and "bf16 matmul ok True" in proc.stdout, proc.stderr[-2000:]
