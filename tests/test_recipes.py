"""The multi-node recipes (SLURM, Kubernetes) parse, and launch what notebook 03 runs on localhost."""
import ast
import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes"
SCRIPT = "recipes/train_ddp.py"


def train_ddp():
    spec = importlib.util.spec_from_file_location("train_ddp", RECIPES / "train_ddp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def split_launch(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """torchrun's ``--flag=value`` options (as a dict) and the script's own arguments."""
    i = argv.index(SCRIPT)
    flags = dict(a.removeprefix("--").split("=", 1) for a in argv[:i] if a.startswith("--"))
    return flags, argv[i + 1:]


def slurm_launch() -> tuple[str, dict[str, str], list[str]]:
    text = (RECIPES / "slurm" / "train_ddp.sbatch").read_text()
    joined = text.replace("\\\n", " ")
    line = next(ln for ln in joined.splitlines() if "torchrun" in ln and not ln.lstrip().startswith("#"))
    return text, *split_launch(shlex.split(line))


def kubernetes_docs() -> list[dict]:
    return list(yaml.safe_load_all((RECIPES / "kubernetes" / "train_ddp.yaml").read_text()))


def notebook_train_args() -> list[str]:
    """The ``TRAIN_ARGS = [...]`` list notebook 03 passes to train_ddp.py."""
    nb = nbformat.read(ROOT / "notebooks" / "03_pytorch_ddp.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and "TRAIN_ARGS =" in cell.source:
            for node in ast.walk(ast.parse("\n".join(ln for ln in cell.source.splitlines()
                                                     if not ln.startswith(("%", "!"))))):
                if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "TRAIN_ARGS":
                    return ast.literal_eval(node.value)
    raise AssertionError("notebook 03 has no TRAIN_ARGS = [...] cell")


def without_save(args: list[str]) -> list[str]:
    i = args.index("--save") if "--save" in args else len(args)
    return args[:i] + args[i + 2:]


def test_sbatch_is_valid_bash_and_asks_for_what_torchrun_uses():
    subprocess.run(["bash", "-n", str(RECIPES / "slurm" / "train_ddp.sbatch")], check=True)
    text, flags, args = slurm_launch()
    sbatch = dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)", text, flags=re.M))
    assert flags["nproc-per-node"] == sbatch["gpus-per-node"]
    assert sbatch["ntasks-per-node"] == "1", "one torchrun agent per node"
    assert flags["nnodes"] == "$SLURM_NNODES" and flags["rdzv-backend"] == "c10d"
    assert flags["rdzv-id"] == "$SLURM_JOB_ID" and flags["rdzv-conf"].startswith("join_timeout=")
    train_ddp().parse_args(args)


def test_kubernetes_manifest_is_a_headless_service_and_an_indexed_job_that_agree():
    service, job = kubernetes_docs()
    assert service["kind"] == "Service" and service["spec"]["clusterIP"] == "None"
    assert job["kind"] == "Job" and job["spec"]["completionMode"] == "Indexed"
    name = job["metadata"]["name"]
    assert service["spec"]["selector"] == {"job-name": name}
    pod = job["spec"]["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"] and pod["restartPolicy"] == "Never"
    container = pod["containers"][0]
    flags, args = split_launch(container["command"])
    assert int(flags["nnodes"]) == job["spec"]["completions"] == job["spec"]["parallelism"]
    assert int(flags["nproc-per-node"]) == container["resources"]["limits"]["nvidia.com/gpu"]
    host, port = flags["rdzv-endpoint"].rsplit(":", 1)
    assert host == f"{name}-0.{service['metadata']['name']}"
    assert int(port) == service["spec"]["ports"][0]["port"]
    assert flags["rdzv-backend"] == "c10d"
    train_ddp().parse_args(args)


def test_recipes_train_exactly_what_the_notebook_runs():
    _, slurm_flags, slurm_args = slurm_launch()
    k8s_flags, k8s_args = split_launch(kubernetes_docs()[1]["spec"]["template"]["spec"]["containers"][0]["command"])
    nb_args = notebook_train_args()
    assert without_save(slurm_args) == without_save(k8s_args) == without_save(nb_args)
    assert slurm_flags["rdzv-conf"] == k8s_flags["rdzv-conf"]
    parsed = train_ddp().parse_args(nb_args)
    assert parsed.epochs >= 1 and parsed.batch_size >= 1


def test_train_ddp_refuses_to_run_without_torchrun():
    out = subprocess.run([sys.executable, str(RECIPES / "train_ddp.py")],
                         capture_output=True, text=True, cwd=ROOT, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 1 and "launch it with torchrun" in out.stderr
