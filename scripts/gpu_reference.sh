#!/usr/bin/env bash
# One command for the GPU reference numbers: the benchmarks at full size and every chapter in the
# gpu profile, everything under one folder. Budget: under 8 minutes on one H200 (each step has a
# time limit, so a slow step is cut off and reported instead of eating the others' time).
#
#   scripts/gpu_reference.sh [OUT]          OUT defaults to results/gpu-YYYYMMDD
#
# Needs the course environment (make venv) on a machine with a CUDA GPU; PY=python overrides the
# interpreter. Writes OUT/{allreduce,ddp_scaling,amp,notebooks}.json, OUT/nvidia-smi.txt,
# OUT/versions.txt and OUT/log.txt. Commit OUT to results/ with the date and device in its name;
# chapter 12 shows those numbers next to the CPU figures it measures.
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
step 90  allreduce   "$PY" benchmarks/allreduce.py --out "$OUT"
step 90  ddp_scaling "$PY" benchmarks/ddp_scaling.py --out "$OUT"
step 90  amp         "$PY" benchmarks/amp.py --out "$OUT"
step 180 notebooks   env COURSE_PROFILE=gpu "$PY" benchmarks/notebooks.py --out "$OUT"
echo "results in $OUT (log: $LOG)"
exit $failed
