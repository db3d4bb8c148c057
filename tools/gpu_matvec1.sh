#!/usr/bin/env bash
# The single-vector quantized matvec (k_matvec1.cu, the engine's --matvec-single) against the
# batched kernel on one GPU, in one call: loom-gpu-matvec-test for every launch shape, the random
# 8B Q4_K_M model generated into /dev/shm, batch-1 and 2-row decode steps (loom-gpu-bench
# --step-rows) for the default path, --matvec-single and each LOOM_MV1 shape (rows a warp, blocks
# an SM asked of the register allocator), the default again (run-to-run spread), the per-operation
# profile of each, and Nsight Compute on the first layers' matvecs of both kernels.
# Usage: BIN=DIR [OUT=DIR] [BASE_BIN=DIR] bash tools/gpu_matvec1.sh
# BIN holds loom-gpu-bench, loom-gpu-matvec-test, loom-make-model (and BIN/lib, as
# tools/gpu_check.sh takes it); BASE_BIN adds another build's default path (main before a change).
# Results: $OUT/summary.txt (step medians per variant), steps-*.log (profiles), ncu-*.txt.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
BIN=$(cd "${BIN:?set BIN (see the header)}" && pwd)
[ -d "$BIN/lib" ] && export LD_LIBRARY_PATH="$BIN/lib:${LD_LIBRARY_PATH:-}"
S="$OUT/summary.txt"
: >"$S"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >>"$S" 2>&1
for shape in "" 2,2 2,3 4,1 4,2; do
  echo "matvec test LOOM_MV1=$shape: $(LOOM_MV1=$shape timeout 60 "$BIN/loom-gpu-matvec-test" | tail -1)" >>"$S"
done
GEN_TYPES=q4_k_m OUT="$OUT/gen" BIN="$BIN" bash tools/gpu_check.sh gen >"$OUT/gen.log" 2>&1
M=${SHM:-/dev/shm/loom}/llama3-8b-q4_k_m.gguf
i=0
for v in default single s22 s23 s41 s42 ${BASE_BIN:+base} default single; do
  i=$((i + 1))
  env=() args=(--model "$M" --step-rows "${STEP_ROWS:-1,2}") bench="$BIN/loom-gpu-bench"
  case $v in
    single) args+=(--matvec-single) ;;
    s*) env=("LOOM_MV1=${v:1:1},${v:2:1}") args+=(--matvec-single) ;;
    base) bench="$BASE_BIN/loom-gpu-bench" ;;
  esac
  env "${env[@]}" timeout 90 "$bench" "${args[@]}" >"$OUT/steps-$i-$v.log" 2>&1
  echo "$i $v: $(grep '^decode step' "$OUT/steps-$i-$v.log" | sed 's/ (.*//' | tr '\n' ' ')" >>"$S"
done
if command -v ncu >/dev/null; then
  for k in matvec1_kernel matvec_kernel; do
    a=(--step-rows 1)
    [ $k = matvec1_kernel ] && a+=(--matvec-single)
    timeout 120 ncu --clock-control none -k regex:"$k" -s 0 -c "${NCU_COUNT:-10}" --section SpeedOfLight \
      --section Occupancy --section WarpStateStats --section SchedulerStats --section InstructionStats \
      "$BIN/loom-gpu-bench" --model "$M" "${a[@]}" >"$OUT/ncu-$k.txt" 2>&1
    grep -E "$k|Duration|DRAM Throughput|Executed Instructions  |Achieved Occupancy|Issued Warp|Registers Per" \
      "$OUT/ncu-$k.txt" | head -80 >>"$S"
  done
fi
cat "$S"
