#!/usr/bin/env bash
# Rebuild the Colab reproduction and run chapters in it (issue 38 item 10; results: tools/colab_results.md).
#
#   bash tools/colab_reproduction.sh                 # chapters 00-04 and 09-16
#   bash tools/colab_reproduction.sh 04 11           # some chapters
#
# 1. A clean virtualenv ($COLAB_VENV, default /tmp/colab-venv, outside the repository) with the
#    package versions of Colab's CPU runtime (tools/colab_requirements.txt, from Colab's published
#    pip freeze) and Jupyter's kernel and nbclient, but NOT this repository: course_utils is not installed.
# 2. tools/colab_run.py runs each chapter there with nbclient, as Colab would: google.colab imported,
#    the set-up cell of tools/colab_setup_cell.py cloning this repository's committed HEAD (a file://
#    URL: no network) into a fresh $COLAB_HOME/runs/NN/content/course, no GPU, no COURSE_PROFILE.
#    Two chapters at a time (2 cores). Executed notebooks: $COLAB_HOME/out/; one JSON line per
#    chapter: $COLAB_HOME/results.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${COLAB_VENV:-/tmp/colab-venv}
HOME_DIR=${COLAB_HOME:-/tmp/colab-home}
PYTHON=${COLAB_PYTHON:-python3.11}   # Colab has 3.13; this machine's only CPU torch wheel is for 3.11

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q pip==24.1.2 setuptools==75.2.0 wheel==0.48.0
fi
# every time: puts back Colab's versions of what an earlier run's set-up cells upgraded (torchao)
"$VENV/bin/python" -m pip install -q -r tools/colab_requirements.txt
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "note: uncommitted changes are not in the reproduction (the set-up cell clones HEAD)" >&2
fi

chapters=("$@")
[ ${#chapters[@]} -gt 0 ] || chapters=(00 01 02 03 04 09 10 11 12 13 14 15 16)
rm -rf "$HOME_DIR" && mkdir -p "$HOME_DIR"
"$VENV/bin/python" -m pip freeze > "$HOME_DIR/pip-freeze.txt"
# two queues, alternating chapters, so at most two chapters run at once
first=() second=()
for i in "${!chapters[@]}"; do
  if (( i % 2 == 0 )); then first+=("${chapters[$i]}"); else second+=("${chapters[$i]}"); fi
done
"$VENV/bin/python" tools/colab_run.py --home "$HOME_DIR" "${first[@]}" > "$HOME_DIR/queue1.log" 2>&1 &
one=$!
if [ ${#second[@]} -gt 0 ]; then
  "$VENV/bin/python" tools/colab_run.py --home "$HOME_DIR" "${second[@]}" > "$HOME_DIR/queue2.log" 2>&1 &
  two=$!
  wait "$two" || true
fi
wait "$one" || true
sort "$HOME_DIR/results.jsonl" | "$VENV/bin/python" -c '
import json, sys
rows = [json.loads(line) for line in sys.stdin]
for r in rows:
    print("%s  %-14s  %7.1f s" % (r["chapter"], "ran to the end" if r["ok"] else "FAILED", r["seconds"]))
sys.exit(0 if rows and all(r["ok"] for r in rows) else 1)'
