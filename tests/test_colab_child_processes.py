"""Issue 38 item 10: on Colab the course is a folder on the kernel's ``sys.path``, not an installed
package, and the processes course_utils starts must still import *that* course_utils.

Each test copies course_utils to ``tmp/course`` (Colab's ``/content/course``) and runs a parent
Python that, like the Colab set-up cell, only puts that folder on its own ``sys.path``: no
PYTHONPATH, working directory ``tmp/course/notebooks``. On this machine an editable install of
course_utils also exists, so a child that does not get the copy's folder imports the installed one
(on Colab: ModuleNotFoundError); the tests therefore assert *which* course_utils the child imported.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def course(tmp_path: Path) -> Path:
    """A copy of course_utils in ``tmp_path/course``, with an empty ``notebooks/`` to run from."""
    home = tmp_path / "course"
    shutil.copytree(ROOT / "course_utils", home / "course_utils",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (home / "notebooks").mkdir()
    return home


def run_parent(course: Path, body: str, timeout_s: float = 180.0, **values) -> dict:
    """Run ``body`` in a fresh Python whose sys.path (only) has ``course``, with ``values`` as
    variables; return the JSON it prints last."""
    code = (f"import json, sys\nsys.path.insert(0, {str(course)!r})\n"
            + "".join(f"{name} = {value!r}\n" for name, value in values.items()) + textwrap.dedent(body))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=course / "notebooks", env=env,
                          capture_output=True, text=True, timeout=timeout_s)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


CHILD = "import course_utils; print(course_utils.__file__)"


def test_run_command_child_imports_the_parents_course_utils(course):
    """A script run with subprocesses.run_command (as torchrun() runs a %%writefile script) imports the
    course_utils its parent imported, found through the parent's sys.path only."""
    out = run_parent(course, f"""
        from course_utils import subprocesses
        child = subprocesses.run_command([sys.executable, "-c", {CHILD!r}]).stdout.strip()
        print(json.dumps({{"child": child}}))
    """)
    assert out["child"] == str(course / "course_utils" / "__init__.py")


@pytest.mark.parametrize("own_path", [False, True], ids=["env", "env-with-own-PYTHONPATH"])
def test_tfcluster_tasks_import_the_parents_course_utils(course, own_path):
    """tfcluster starts each task as ``python -m course_utils.tfcluster``: that module, and the task
    script's own ``import course_utils``, must be the parent's copy, also when the caller passes
    its own PYTHONPATH (chapters 05 and 06 pass ``env={"PYTHONPATH": str(WORK)}``)."""
    (course / "notebooks" / "task.py").write_text(
        "import json, os\nimport course_utils, course_utils.tfcluster as t\n"
        "print(json.dumps([course_utils.__file__, t.__file__, json.loads(os.environ['TF_CONFIG'])['task']]))\n")
    out = run_parent(course, """
        from course_utils import tfcluster
        env = {"PYTHONPATH": "work"} if own_path else None
        done = tfcluster.run("task.py", tfcluster.cluster_spec(workers=2), timeout_s=60, env=env)
        print(json.dumps({"tasks": [json.loads(r.stdout.strip().splitlines()[-1]) for r in done]}))
    """, own_path=own_path)
    pkg = course / "course_utils"
    assert out["tasks"] == [[str(pkg / "__init__.py"), str(pkg / "tfcluster.py"), {"type": "worker", "index": i}]
                            for i in range(2)]


def test_launch_run_workers_and_their_children_import_the_parents_course_utils(course):
    """launch.run's ranks (forkserver children) import the parent's course_utils, and so does a
    process a rank starts itself (e.g. a checkpoint writer or a ``python script.py``)."""
    (course / "notebooks" / "work").mkdir()
    (course / "notebooks" / "work" / "colab_worker.py").write_text(textwrap.dedent(f"""
        import subprocess, sys
        import course_utils

        def where(rank, world_size):
            child = subprocess.run([sys.executable, "-c", {CHILD!r}], capture_output=True, text=True)
            return course_utils.__file__, child.stdout.strip() or child.stderr.strip()[-300:]
    """))
    out = run_parent(course, """
        from course_utils import launch
        launch.workdir()
        from colab_worker import where
        print(json.dumps({"ranks": launch.run(where, 2, backend=None, timeout_s=120)}))
    """)
    init = str(course / "course_utils" / "__init__.py")
    assert out["ranks"] == [[init, init], [init, init]]


def test_course_path_is_not_added_for_an_installed_package(monkeypatch):
    """When course_utils is installed into site-packages, children find it there already: the
    environment gets no PYTHONPATH entry that would put all of site-packages before the stdlib."""
    import sysconfig

    from course_utils import subprocesses

    monkeypatch.setattr(subprocesses, "COURSE_ROOT", Path(sysconfig.get_paths()["purelib"]))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert "PYTHONPATH" not in subprocesses.safe_env()
    monkeypatch.setattr(subprocesses, "COURSE_ROOT", Path("/content/course"))
    assert subprocesses.safe_env()["PYTHONPATH"] == "/content/course"
    monkeypatch.setenv("PYTHONPATH", "/env/python")          # Colab's own
    assert subprocesses.safe_env()["PYTHONPATH"] == os.pathsep.join(["/env/python", "/content/course"])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/content/course", "/env/python"]))
    assert subprocesses.safe_env()["PYTHONPATH"] == os.pathsep.join(["/content/course", "/env/python"])
