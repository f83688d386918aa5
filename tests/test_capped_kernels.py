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
