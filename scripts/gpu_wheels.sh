#!/usr/bin/env bash
# The Python packages the course needs on the device tool's GPU machine and its image lacks, as
# wheels in .whl/ (run here, where PyPI is reachable; the device run carries .whl):
#
#   scripts/gpu_wheels.sh
#
# The H100/H200 machines have Python 3.12 with their own PyTorch, NumPy and matplotlib, but no
# Jupyter (a chapter cannot run without nbclient and a kernel) and no torchao (chapter 04's float8).
# This takes the closure of nbclient + ipykernel + torchao's requirements at the versions the
# course's .venv holds (so the device runs what CI tested), minus what the device image has
# (DEVICE_HAS, from the device tool's KINDS.md), as cp312 manylinux wheels.
# scripts/device_run.sh installs them there with --no-index --no-deps.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV_PY=${VENV_PY:-.venv/bin/python}
DEST=${DEST:-.whl}
[ -x "$VENV_PY" ] || { echo "no $VENV_PY: run 'make .venv/.installed' first (the versions come from it)" >&2; exit 1; }
pins=$("$VENV_PY" - <<'PY'
import importlib.metadata as md
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOTS = ["nbclient", "ipykernel", "torchao"]
DEVICE_HAS = {"attrs", "packaging", "psutil", "pygments", "python-dateutil", "six", "typing-extensions",
              "numpy", "matplotlib", "torch", "pyyaml", "jinja2", "markupsafe"}
# the device's interpreter: markers are evaluated for it, not for this machine's Python 3.11
DEVICE = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
          "platform_system": "Linux", "os_name": "posix", "platform_machine": "x86_64",
          "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
seen, todo = {}, list(ROOTS)
while todo:
    name = canonicalize_name(todo.pop())
    if name in seen or name in DEVICE_HAS:
        continue
    seen[name] = md.version(name)  # PackageNotFoundError: the .venv is incomplete
    for req in map(Requirement, md.requires(name) or []):
        if req.marker is None or req.marker.evaluate(DEVICE):
            todo.append(req.name)
print(" ".join(f"{n}=={v}" for n, v in sorted(seen.items())))
PY
)
rm -rf "$DEST" && mkdir -p "$DEST"
platforms=()
for n in 39 35 34 31 28 27 24 17 5; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$DEST" $pins 2>&1 \
  | { grep -v "^WARNING: Location 'file://" || true; }
echo "$(ls "$DEST"/*.whl | wc -l) wheels, $(du -sm "$DEST" | cut -f1) MiB in $DEST (a device call carries 64 MiB at most)"
