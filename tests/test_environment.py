"""Tier 4: requirements.txt, environment.yml and binder/ name the same packages at the same pins."""
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9_.\-\[\]]+)==([^\s;#]+)")


def pins(lines) -> dict[str, str]:
    out = {}
    for line in lines:
        line = line.strip()
        if not line or line.startswith(("#", "-")):
            continue
        m = PIN.match(line)
        assert m, f"not an exact pin: {line!r} (every package is pinned with ==)"
        out[m.group(1).lower()] = m.group(2)
    return out


def requirements(path: Path) -> dict[str, str]:
    return pins(path.read_text().splitlines())


def conda_pip(path: Path) -> dict[str, str]:
    env = yaml.safe_load(path.read_text())
    (pip,) = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert "python=3.11" in env["dependencies"]
    return pins(pip)


def test_requirements_pin_the_cpu_torch_the_course_needs():
    req = requirements(ROOT / "requirements.txt")
    assert req["torch"] == "2.13.0" and req["tensorflow-cpu"].startswith("2.21")
    assert req["keras"].startswith("3.")
    for needed in ["jax", "jupyterlab", "nbval", "papermill", "matplotlib", "scikit-learn", "otter-grader"]:
        assert needed in req, needed


def test_environment_yml_matches_requirements():
    assert conda_pip(ROOT / "environment.yml") == requirements(ROOT / "requirements.txt")


def test_binder_matches_requirements_with_cpu_torch():
    binder = requirements(ROOT / "binder" / "requirements.txt")
    root = requirements(ROOT / "requirements.txt")
    assert binder.pop("torch") == root.pop("torch") + "+cpu"
    assert binder == root
    text = (ROOT / "binder" / "requirements.txt").read_text()
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in text
    assert (ROOT / "binder" / "runtime.txt").read_text().strip() == "python-3.11"
    assert "COURSE_PROFILE=cpu" in (ROOT / "binder" / "start").read_text()



MXNET_KERNEL = "course-mxnet"


def test_mxnet_environment_is_pinned_to_the_last_release_and_old_numpy():
    req = requirements(ROOT / "requirements-mxnet.txt")
    assert req["mxnet"] == "1.9.1"
    major, minor, *_ = map(int, req["numpy"].split("."))
    assert (major, minor) < (1, 24), "MXNet 1.9.1 uses np.bool, removed in NumPy 1.24"


def test_the_notebooks_that_name_the_mxnet_kernel_are_the_ones_make_runs_with_it():
    import nbformat
    named = sorted(f"notebooks/{p.name}" for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")
                   if nbformat.read(p, as_version=4).metadata["kernelspec"]["name"] == MXNET_KERNEL)
    makefile = (ROOT / "Makefile").read_text()
    listed = re.search(r"^MXNET_NOTEBOOKS := (.*)$", makefile, re.M).group(1).split()
    assert named and named == sorted(listed)
    assert f"MXKERNEL := {MXNET_KERNEL}" in makefile
    postbuild = (ROOT / "binder" / "postBuild").read_text()
    assert "requirements-mxnet.txt" in postbuild and f"--name {MXNET_KERNEL}" in postbuild


def test_course_utils_imports_in_the_mxnet_environment():
    import subprocess
    python = ROOT / ".venv-mxnet" / "bin" / "python"
    if not python.exists():
        import pytest
        pytest.skip("no .venv-mxnet here: `make venv` creates it (make test always does)")
    code = ("import course_utils, course_utils.data, course_utils.plots, course_utils.subprocesses, "
            "course_utils.mxcluster, course_utils.failures, course_utils.hardware as h, mxnet, numpy, sys\n"
            "assert 'torch' not in sys.modules and 'tensorflow' not in sys.modules\n"
            "print(mxnet.__version__, numpy.__version__, h.report().profile)")
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "COURSE_PROFILE": ""})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1.9.1", "1.23.5", "cpu"]


def test_dev_tools_are_pinned_and_the_book_is_version_1():
    dev = requirements(ROOT / "requirements-dev.txt")
    assert set(dev) == {"ruff", "pytest-xdist", "jupyter-book", "jupyter-repo2docker", "playwright",
                        "kubernetes-validate"}
    assert dev["jupyter-book"].startswith("1."), "Jupyter Book 2 downloads its theme: it cannot build offline"
    assert "-r requirements-dev.txt" in (ROOT / "Makefile").read_text()
