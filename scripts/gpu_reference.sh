#!/usr/bin/env bash
# One command for the GPU reference numbers: the benchmarks at full size and every chapter in the
# gpu profile, everything under one folder. Budget: under 8 minutes on one H200 (each step has a
# time limit, so a slow step is cut off and reported instead of eating the others' time).
#
#   scripts/gpu_reference.sh [OUT]          OUT defaults to results/gpu-YYYYMMDD
#
# Needs PyTorch on a machine with a CUDA GPU (the course's .venv, or PY=python3 with torch, numpy,
# matplotlib, nbclient and ipykernel: the chapters run only where Jupyter's packages are). Writes
# OUT/{device,allreduce,ddp_scaling,amp,step_profile,notebooks}.json, the executed PyTorch chapters
# in OUT/chapters/, OUT/nvidia-smi.txt, OUT/versions.txt and OUT/log.txt. Commit OUT as
# results/gpu-<device>-YYYYMMDD/ (e.g. gpu-h200-20261205): course_utils.reference reads it, and
# chapters 00, 01, 04 and 12 show those numbers beside the ones they measure.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${1:-results/gpu-$(date -u +%Y%m%d)}
mkdir -p "$OUT"
LOG="$OUT/log.txt"
: > "$LOG"
command -v nvidia-smi >/dev/null && nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU visible to torch'" || exit 1
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
step() {  # step LIMIT_S NAME COMMAND...
  local limit=$1 name=$2; shift 2
  echo "== $name (limit ${limit}s)" | tee -a "$LOG"
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >> "$LOG" 2>&1
  local rc=$?
  echo "== $name: exit $rc after $((SECONDS - start)) s" | tee -a "$LOG"
  [ "$rc" -eq 0 ] || failed=1
}
step 45  device       "$PY" benchmarks/device.py --out "$OUT"
step 60  allreduce    "$PY" benchmarks/allreduce.py --out "$OUT"
step 60  ddp_scaling  "$PY" benchmarks/ddp_scaling.py --out "$OUT"
step 60  amp          "$PY" benchmarks/amp.py --out "$OUT"
step 45  step_profile "$PY" benchmarks/step_profile.py --out "$OUT"
step 210 notebooks    env COURSE_PROFILE=gpu "$PY" benchmarks/notebooks.py --torch-only --save "$OUT/chapters" --out "$OUT"
echo "results in $OUT (log: $LOG)"
exit $failed
