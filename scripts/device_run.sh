#!/usr/bin/env bash
# The GPU reference run in one call of the device tool (its machine: Python 3.12 with PyTorch, no
# Jupyter, no network; files come back only from $OUT, eight at most). Here, first:
#
#   scripts/gpu_wheels.sh                                  # nbclient, ipykernel, torchao ... into .whl/
#
# then one call:  run(command="bash scripts/device_run.sh", carry=[".whl"], timeout_s=600)
#
# It installs the carried wheels, runs scripts/gpu_reference.sh (benchmarks at full size, the
# PyTorch chapters under the GPU profile, BUDGET_S seconds in all) and packs the folder it wrote as
# $OUT/<folder>.tar.gz, with log.txt and the summaries beside it. Unpack that into results/ and
# commit it. To rehearse it on a machine without a GPU: OUT=/tmp/o REHEARSE=1 scripts/device_run.sh
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?OUT is unset: run this on the device machine, where the tool sets it (elsewhere: scripts/gpu_reference.sh)}"
PY=${PY:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "installing the carried wheels failed" >&2; exit 1; }
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
"$PY" -c "import nbclient, ipykernel, torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" \
  || { echo "no Jupyter here: run scripts/gpu_wheels.sh and carry .whl" >&2; exit 1; }
stage=$(mktemp -d)
name=$("$PY" -m course_utils.gpu_reference)  # the folder it is committed as: gpu-h200-YYYYMMDD
BUDGET_S=${BUDGET_S:-480} PY=$PY bash scripts/gpu_reference.sh "$stage/$name"
rc=$?
tar -C "$stage" -czf "$OUT/$name.tar.gz" "$name"
cp "$stage/$name/log.txt" "$OUT/log.txt"
"$PY" - "$stage/$name" > "$OUT/summaries.txt" <<'PY'
import json, sys
import xml.etree.ElementTree as ET
from pathlib import Path
folder = Path(sys.argv[1])
if (folder / "gpu_tests.xml").exists():
    suite = ET.parse(folder / "gpu_tests.xml").getroot().find("testsuite")
    failed = [case.get("name") for case in suite.iter("testcase") if case.find("failure") is not None
              or case.find("error") is not None]
    print(f"gpu_tests.xml {suite.get('tests')} tests, {suite.get('skipped')} skipped, failed: {failed or 'none'}")
for path in sorted(folder.glob("*.json")):
    print(path.name, json.dumps(json.loads(path.read_text())["summary"]))
PY
cat "$OUT/summaries.txt"
echo "packed $name.tar.gz ($(du -k "$OUT/$name.tar.gz" | cut -f1) KiB); gpu_reference.sh exit $rc"
exit $rc
