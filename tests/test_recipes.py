"""The multi-node recipes (SLURM, Kubernetes) parse, launch what notebook 03 runs on localhost, and the
Kubernetes manifest is valid for the Kubernetes API (its schema, offline). The SLURM recipe is also run
for real on a private SLURM cluster: tests/slurm/."""
import ast
import copy
import importlib.util
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import nbformat
import pytest
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
    i = next(i for i, a in enumerate(argv) if a.endswith(SCRIPT))
    flags = dict(a.removeprefix("--").split("=", 1) for a in argv[:i] if a.startswith("--"))
    return flags, [a for a in argv[i + 1:] if a != "$@"]   # "$@": the sbatch script's own arguments


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
    assert sbatch["ntasks-per-node"] == "1", "one torchrun agent per node"
    assert flags["nproc-per-node"] == "$NPROC_PER_NODE" and "${SLURM_GPUS_ON_NODE" in text, "one process per GPU"
    k8s_flags, _ = split_launch(kubernetes_docs()[1]["spec"]["template"]["spec"]["containers"][0]["command"])
    assert sbatch["gpus-per-node"] == k8s_flags["nproc-per-node"] == "8", "both recipes describe 8-GPU nodes"
    assert flags["nnodes"] == "$SLURM_NNODES" and flags["rdzv-backend"] == "c10d"
    assert flags["rdzv-endpoint"] == "$HEAD_ADDR:$RDZV_PORT"
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


# The Kubernetes manifest is not run (no cluster can start here): it is validated against the schema of
# the Kubernetes API, which kubernetes-validate bundles for every version from 1.25 to 1.37
KUBERNETES_VERSIONS = ("1.29.0", "1.37.0")   # the oldest version still in common use here, and the newest


@pytest.fixture
def offline(monkeypatch):
    """Any attempt to open a network connection fails the test."""
    def refuse(sock, address):
        raise AssertionError(f"the schema check tried to reach the network: {address}")
    monkeypatch.setattr(socket.socket, "connect", refuse)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_kubernetes_manifest_is_valid_for_the_kubernetes_api(offline, version):
    for doc in kubernetes_docs():
        kubernetes_validate.validate(doc, version, strict=True)   # strict: unknown fields are errors


def broken(path: tuple, value=None, rename: str | None = None) -> list[dict]:
    """The manifest with one field changed (``value``) or misspelled (``rename``)."""
    docs = copy.deepcopy(kubernetes_docs())
    *parents, key = path
    node = docs
    for p in parents:
        node = node[p]
    if rename:
        node[rename] = node.pop(key)
    else:
        node[key] = value
    return docs


@pytest.mark.parametrize("path, value, rename, error", [
    ((1, "spec", "completionMode"), None, "completionMod", "completionMod"),              # misspelled field
    ((1, "spec", "parallelism"), "two", None, "'two' is not of type 'integer'"),         # wrong type
    ((1, "spec", "template", "spec", "containers", 0, "name"), None, "nme", "'name' is a required property"),
    ((0, "spec", "ports", 0, "port"), "29500", None, "'29500' is not of type 'integer'"),  # YAML quoting slip
], ids=["misspelled", "wrong-type", "missing-required", "quoted-port"])
def test_a_broken_manifest_fails_the_schema_check(offline, path, value, rename, error):
    with pytest.raises(kubernetes_validate.ValidationError, match=re.escape(error)):
        for doc in broken(path, value, rename):
            kubernetes_validate.validate(doc, KUBERNETES_VERSIONS[-1], strict=True)
