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

