"""course_utils.mxcluster: MXNet's ps-lite roles as reaped subprocesses (no MXNet needed to test it)."""
import pytest

from course_utils import mxcluster


def test_mxcluster_roles_and_environment(tmp_path):
    assert mxcluster.roles(2) == ["scheduler", "server", "worker", "worker"]
    with pytest.raises(ValueError, match="workers must be an integer >= 1"):
        mxcluster.roles(0)
    script = tmp_path / "role.py"
    script.write_text("import os; print(os.environ['DMLC_ROLE'], os.environ['DMLC_PS_ROOT_URI'], "
                      "os.environ['DMLC_NUM_WORKER'], os.environ['DMLC_NUM_SERVER'], os.environ['DMLC_NODE_HOST'])")
    out = mxcluster.run(script, workers=2, timeout_s=60)
    assert [r.stdout.split()[0] for r in out] == ["scheduler", "server", "worker", "worker"]
    assert all(r.stdout.split()[1:] == ["127.0.0.1", "2", "1", "127.0.0.1"] for r in out)
    with pytest.raises(ValueError, match="write it first"):
        mxcluster.run(tmp_path / "missing.py")
