"""Binder: repo2docker reads binder/ and writes the Dockerfile mybinder.org would build (no Docker)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPO2DOCKER = Path(sys.executable).with_name("repo2docker")


def test_repo2docker_accepts_binder_config():
    proc = subprocess.run([str(REPO2DOCKER), "--no-build", "--debug", "--no-run", "."], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "Building conda environment for python=3.11" in out  # binder/runtime.txt
    assert 'pip install --no-cache-dir -r "binder/requirements.txt"' in out  # CPU torch + tensorflow-cpu
    assert "RUN ./binder/postBuild" in out  # course_utils and the MXNet kernel
    assert 'ENV R2D_ENTRYPOINT="${REPO_DIR}/binder/start"' in out  # COURSE_PROFILE=cpu
    # binder/ wins: the root requirements.txt (PyPI torch, a CUDA build on Linux) is not used
    assert "COPY --chown=1000:1000 src/requirements.txt" not in out and "-r \"requirements.txt\"" not in out
