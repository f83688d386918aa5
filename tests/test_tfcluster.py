"""course_utils.tfcluster: TF_CONFIG for every task, tasks run as reaped subprocesses (no TF needed)."""
import json
import sys

import pytest

from course_utils import tfcluster
from course_utils.subprocesses import CommandError, descendants

WHOAMI = ("import json, os; t = json.loads(os.environ['TF_CONFIG']); "
          "print(t['task']['type'], t['task']['index'], sorted(t['cluster']))")


def test_cluster_spec_gives_every_task_a_distinct_free_loopback_port():
    cluster = tfcluster.cluster_spec(workers=3, ps=2, chief=1)
    assert sorted(cluster) == ["chief", "ps", "worker"]
    assert [len(cluster[j]) for j in ("chief", "worker", "ps")] == [1, 3, 2]
    addresses = [a for job in cluster.values() for a in job]
    assert all(a.startswith("127.0.0.1:") for a in addresses)
    assert len(set(addresses)) == 6


@pytest.mark.parametrize("kwargs", [dict(workers=-1), dict(workers=1.5), dict(workers=2, chief=2),
                                    dict(workers=0), dict(workers=2, ps=True)])
def test_cluster_spec_rejects_bad_counts(kwargs):
    with pytest.raises(ValueError):
        tfcluster.cluster_spec(**kwargs)


def test_tf_config_names_the_task_and_the_whole_cluster():
    cluster = tfcluster.cluster_spec(workers=2, ps=1)
    config = json.loads(tfcluster.tf_config(cluster, "worker", 1))
    assert config == {"cluster": cluster, "task": {"type": "worker", "index": 1}}
    with pytest.raises(ValueError, match="no job 'chief'"):
        tfcluster.tf_config(cluster, "chief", 0)
    with pytest.raises(ValueError, match="tasks 0..1, not 2"):
        tfcluster.tf_config(cluster, "worker", 2)


def test_tasks_orders_chief_workers_ps_and_rejects_unknown_jobs():
    assert tfcluster.tasks(tfcluster.cluster_spec(workers=2, ps=1, chief=1)) == [
        ("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0)]
    with pytest.raises(ValueError, match="unknown job"):
        tfcluster.tasks({"workers": ["127.0.0.1:1"]})


def test_run_starts_one_process_per_task_with_its_tf_config(tmp_path):
    script = tmp_path / "whoami.py"
    script.write_text(WHOAMI)
    results = tfcluster.run(script, tfcluster.cluster_spec(workers=2, ps=1), timeout_s=60)
    assert [r.stdout.strip() for r in results] == [
        "worker 0 ['ps', 'worker']", "worker 1 ['ps', 'worker']", "ps 0 ['ps', 'worker']"]


def test_run_without_check_lets_every_task_finish_and_reports_exit_codes(tmp_path):
    script = tmp_path / "dies.py"
    script.write_text("import json, os, signal, time\n"
                      "i = json.loads(os.environ['TF_CONFIG'])['task']['index']\n"
                      "if i == 1: os.kill(os.getpid(), signal.SIGKILL)\n"
                      "time.sleep(0.5); print('survivor'); raise SystemExit(7)\n")
    results = tfcluster.run(script, tfcluster.cluster_spec(workers=2), timeout_s=60, check=False)
    assert [r.returncode for r in results] == [7, -9]
    assert results[0].stdout.strip() == "survivor"
    with pytest.raises(CommandError, match="failed with exit code"):
        tfcluster.run(script, tfcluster.cluster_spec(workers=2), timeout_s=60)


def test_run_kills_every_task_on_timeout(tmp_path):
    script = tmp_path / "hangs.py"
    script.write_text("import subprocess, sys, time\n"
                      "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
                      "time.sleep(60)\n")
    with pytest.raises(CommandError, match="timed out after 2 s"):
        tfcluster.run(script, tfcluster.cluster_spec(workers=2), timeout_s=2)
    assert not [c for c in descendants().values() if "hangs.py" in c or "time.sleep(60)" in c]


def test_run_refuses_a_missing_script(tmp_path):
    with pytest.raises(ValueError, match="write it first"):
        tfcluster.run(tmp_path / "nope.py", tfcluster.cluster_spec(workers=1))


def test_run_commands_gives_each_command_its_own_environment():
    from course_utils.subprocesses import run_commands
    code = "import os; print(os.environ['WHO'], os.environ['SHARED'])"
    out = run_commands([[sys.executable, "-c", code]] * 2, env={"SHARED": "s"}, envs=[{"WHO": "a"}, {"WHO": "b"}])
    assert [r.stdout.strip() for r in out] == ["a s", "b s"]
    with pytest.raises(ValueError, match="one per command"):
        run_commands([[sys.executable, "-c", code]] * 2, envs=[{"WHO": "a"}])



def test_tasks_run_as_scripts_without_the_modules_tensorflow_imports_but_never_uses(tmp_path):
    (tmp_path / "helper.py").write_text("NAME = 'helper next to the script'\n")
    script = tmp_path / "probe.py"
    script.write_text("import importlib.util, sys\n"
                      "import helper\n"                                  # the script's folder is on sys.path
                      "try:\n    import jax\nexcept ImportError:\n    jax = None\n"
                      "print(__name__, sys.argv[1:], helper.NAME, jax, importlib.util.find_spec('pandas'))\n")
    (result,) = tfcluster.run(script, tfcluster.cluster_spec(workers=1), "--flag", "2", timeout_s=60)
    assert result.stdout.strip() == "__main__ ['--flag', '2'] helper next to the script None None"
    needs = tmp_path / "needs_pandas.py"
    needs.write_text("import pandas\n")
    with pytest.raises(CommandError, match=r"(?s)import of pandas halted.*hide=\(\) if this task needs pandas"):
        tfcluster.run(needs, tfcluster.cluster_spec(workers=1), timeout_s=60)
    (shown,) = tfcluster.run(needs, tfcluster.cluster_spec(workers=1), timeout_s=60, hide=())
    assert shown.returncode == 0
