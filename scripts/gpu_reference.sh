#!/usr/bin/env bash
# One command for the GPU reference numbers: the benchmarks at full size and every chapter in the
# gpu profile, everything under one folder. Budget: under 8 minutes on one H200 (each step has a
# time limit, and all of them one deadline, BUDGET_S seconds from the start: a slow step is cut off
# and reported instead of eating the others' time).
#
#   scripts/gpu_reference.sh [OUT]          OUT defaults to results/gpu-<chip>-YYYYMMDD (gpu-h200-...)
#   scripts/device_run.sh                   the same, on the device tool's machine, in one call
#   REHEARSE=1 scripts/gpu_reference.sh     no GPU needed: every step at CPU sizes into results/tmp/,
#                                           to check the script and an environment (nothing to commit)
#
# Needs PyTorch on a machine with a CUDA GPU (the course's .venv, or PY=python3 with torch, numpy,
# matplotlib, nbclient and ipykernel: the chapters run only where Jupyter's packages are). Writes
# OUT/gpu_tests.xml (tests/gpu: the course's code checked on the GPU), OUT/{device,allreduce,
# ddp_scaling,amp,step_profile,gpt_mfu,notebooks}.json, the executed PyTorch chapters
# in OUT/chapters/, OUT/nvidia-smi.txt, OUT/versions.txt and OUT/log.txt. Commit OUT as
# results/gpu-<chip>-YYYYMMDD/ (e.g. gpu-h200-20261205; device_run.sh names and packs it): course_utils.gpu_reference reads it, and
# chapters 00, 01, 04, 12 and 13 show those numbers beside the ones they measure.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
# this checkout's course_utils for the chapters' kernels and their worker processes too (the course's
# .venv installs it; a machine's own Python, like the device's, does not)
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
BUDGET_S=${BUDGET_S:-480}
name=$("$PY" -m course_utils.gpu_reference)  # gpu-h200-YYYYMMDD: chip and day, course_utils.gpu_reference.folder_name
if [ "${REHEARSE:-0}" = 1 ]; then
  SIZE=(--quick); PROFILE=cpu; OUT=${1:-results/tmp/$name}
else
  SIZE=(); PROFILE=gpu; OUT=${1:-results/$name}
  "$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU visible to torch (REHEARSE=1 runs the steps on the CPU)'" || exit 1
fi
mkdir -p "$OUT"
LOG="$OUT/log.txt"
: > "$LOG"
command -v nvidia-smi >/dev/null && nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
"$PY" - > "$OUT/versions.txt" <<'PY'
import importlib.metadata as md, platform, torch
print("python", platform.python_version())
print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())
for dist in ("tensorflow", "tensorflow-cpu", "keras", "jax", "onnxruntime"):
    try:
        print(dist, md.version(dist))
    except md.PackageNotFoundError:
        pass
print("gpus", [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
PY
failed=0
step() {  # step LIMIT_S NAME COMMAND...: at most LIMIT_S, and never past the deadline
  local limit=$1 name=$2; shift 2
  local left=$((BUDGET_S - SECONDS))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 15 ]; then
    echo "== $name: not run, ${left}s of the ${BUDGET_S}s budget left" | tee -a "$LOG"; failed=1; return
  fi
  echo "== $name (limit ${limit}s)" | tee -a "$LOG"
  local start=$SECONDS
  STEP_DEADLINE=$(($(date +%s) + limit)) timeout --kill-after=10 "$limit" "$@" >> "$LOG" 2>&1  # notebooks.py reads it
  local rc=$?
  echo "== $name: exit $rc after $((SECONDS - start)) s" | tee -a "$LOG"
  [ "$rc" -eq 0 ] || failed=1
}
step 90  gpu_tests    "$PY" -m pytest tests/gpu -q -p no:cacheprovider --junitxml="$OUT/gpu_tests.xml"
step 45  device       "$PY" benchmarks/device.py "${SIZE[@]}" --out "$OUT"
step 60  allreduce    "$PY" benchmarks/allreduce.py "${SIZE[@]}" --out "$OUT"
step 60  ddp_scaling  "$PY" benchmarks/ddp_scaling.py "${SIZE[@]}" --out "$OUT"
step 60  amp          "$PY" benchmarks/amp.py "${SIZE[@]}" --out "$OUT"
step 45  step_profile "$PY" benchmarks/step_profile.py "${SIZE[@]}" --out "$OUT"
step 90  gpt_mfu      "$PY" benchmarks/gpt_mfu.py "${SIZE[@]}" --out "$OUT"
step 120 gemm_efficiency "$PY" benchmarks/gemm_efficiency.py "${SIZE[@]}" --out "$OUT"   # the planner's GPU curve (bf16, 512-16384)
step 300 notebooks    env COURSE_PROFILE=$PROFILE "$PY" benchmarks/notebooks.py --torch-only --save "$OUT/chapters" --out "$OUT"
echo "results in $OUT (log: $LOG)"
exit $failed
