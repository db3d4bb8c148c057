#!/usr/bin/env bash
# Decode steps of the random 8B Q4_K_M model by kernel choice, against another build, in one call on
# one GPU (written for the single-vector matvec and the Q6_K fragment kernel, timed first as
# opt-in flags and default since 2026-12-06):
#  1. 1 and 2 rows: the default (one row: the single-vector kernel, k_matvec1.cu, with RMSNorm
#     fused) and --no-matvec-single (the batched kernel after a separate RMSNorm);
#  2. 4-64 rows: the default (Q4_K and Q6_K through the decode GEMM's fragment kernels) and
#     --decode-gemm-tiled (both through the tile kernel);
# each with BASE_BIN's default too (another build, e.g. main before a change), alternating, with
# loom-gpu-matvec-test and loom-gpu-qgemm-test first, the model generated into /dev/shm, decode
# steps from loom-gpu-bench --step-rows (the median of 9 and a per-operation profile); with
# DATA=DIR (the shared models and references, as tools/gpu_check.sh takes it) the shared models
# checked (tools/gpu_check.sh small: the F32 KV pool, against the references and
# loom-engine-cpu); then Nsight Compute on the first layers' kernels of each kind.
# Usage: BIN=DIR [OUT=DIR] [BASE_BIN=DIR] [DATA=DIR] [PARTS="1 2"] [NCU=1] bash tools/gpu_trials.sh
# Everything (NCU included) took 130 s on an H100 on 2026-12-06. BIN holds loom-gpu-bench,
# loom-gpu-matvec-test, loom-gpu-qgemm-test, loom-make-model (and loom-engine-cuda,
# loom-engine-cpu with DATA; BIN/lib, as tools/gpu_check.sh takes it). P1_VARIANTS, P2_VARIANTS
# replace the variant lists of parts 1 and 2 (names as in steps() below); CHECK_STAGES the
# tools/gpu_check.sh stages run with DATA (default small).
# Results: $OUT/summary.txt (tests, step medians per variant, Nsight Compute lines), steps-*.log.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
BIN=$(cd "${BIN:?set BIN (see the header)}" && pwd)
[ -d "$BIN/lib" ] && export LD_LIBRARY_PATH="$BIN/lib:${LD_LIBRARY_PATH:-}"
S="$OUT/summary.txt"
: >"$S"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >>"$S" 2>&1
echo "matvec test: $(timeout 60 "$BIN/loom-gpu-matvec-test" | tail -1)" >>"$S"
echo "qgemm test: $(timeout 120 "$BIN/loom-gpu-qgemm-test" | tail -1)" >>"$S"
GEN_TYPES=q4_k_m OUT="$OUT/gen" BIN="$BIN" bash tools/gpu_check.sh gen >"$OUT/gen.log" 2>&1
M=${SHM:-/dev/shm/loom}/llama3-8b-q4_k_m.gguf
i=0
# steps PART ROWS VARIANT...: one loom-gpu-bench run a variant (default, batched, tiled, split, base), in
# the order given.
steps() {
  local part=$1 rows=$2 v
  shift 2
  for v in "$@"; do
    i=$((i + 1))
    local args=(--model "$M" --step-rows "$rows") bench="$BIN/loom-gpu-bench"
    case $v in
      batched) args+=(--no-matvec-single) ;;
      tiled) args+=(--decode-gemm-tiled) ;;
      split) args+=(--precision accurate) ;;
      base) bench="$BASE_BIN/loom-gpu-bench" ;;
    esac
    timeout 120 "$bench" "${args[@]}" >"$OUT/steps-$i-$v.log" 2>&1
    echo "$(date +%T) part $part, $i $v: $(grep '^decode step' "$OUT/steps-$i-$v.log" | sed 's/ (.*//' | tr '\n' ' ')" >>"$S"
  done
}
for part in ${PARTS-1 2}; do
  if [ "$part" = 1 ]; then
    # shellcheck disable=SC2086
    steps 1 1,2 ${P1_VARIANTS:-default batched ${BASE_BIN:+base} default batched ${BASE_BIN:+base}}
  else
    # shellcheck disable=SC2086
    steps 2 4,8,16,32,64 ${P2_VARIANTS:-default tiled ${BASE_BIN:+base} default tiled ${BASE_BIN:+base}}
  fi
done
if [ -n "${DATA:-}" ]; then
  # shellcheck disable=SC2086
  OUT="$OUT/small" BIN="$BIN" DATA="$DATA" bash tools/gpu_check.sh ${CHECK_STAGES:-small} >"$OUT/small.log" 2>&1
  sed -n '/==== summary/,$p' "$OUT/small.log" >>"$S"
fi
if [ "${NCU:-1}" = 1 ] && command -v ncu >/dev/null; then
  # name|kernel regex|bench arguments
  for p in "single|matvec1_kernel|--step-rows 1" "batched|matvec_kernel|--step-rows 1 --no-matvec-single" \
    "frag|qgemm_frag_kernel|--step-rows 64" "tile|qgemm_kernel|--step-rows 64 --decode-gemm-tiled"; do
    IFS='|' read -r name k a <<<"$p"
    # shellcheck disable=SC2086
    timeout 150 ncu --clock-control none -k regex:"$k" -s 0 -c "${NCU_COUNT:-10}" --section SpeedOfLight \
      --section Occupancy --section WarpStateStats --section SchedulerStats --section InstructionStats \
      "$BIN/loom-gpu-bench" --model "$M" $a >"$OUT/ncu-$name.txt" 2>&1
    echo "== Nsight Compute, $name ($k, $a)" >>"$S"
    grep -E "$k|Duration|DRAM Throughput|Executed Instructions  |Achieved Occupancy|Issued Warp|Registers Per" \
      "$OUT/ncu-$name.txt" | head -80 >>"$S"
  done
fi
cat "$S"
