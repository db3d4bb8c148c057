#!/usr/bin/env bash
# The kernels that are in the engine but not yet timed on a GPU, against the default paths, in one
# call on one GPU:
#  1. the single-vector quantized matvec (k_matvec1.cu, --matvec-single) against the batched
#     kernel at 1 and 2 rows, for each LOOM_MV1 launch shape (rows a warp, blocks an SM asked of
#     the register allocator);
#  2. the decode GEMM's Q6_K fragment kernel (k_qgemm_frag.cu, --decode-gemm-q6-frag) against its
#     tile kernel at 4-64 rows;
# with loom-gpu-matvec-test (every launch shape) and loom-gpu-qgemm-test first, the random 8B
# Q4_K_M model generated into /dev/shm, decode steps (loom-gpu-bench --step-rows: the median of 9
# and a per-operation profile) with the default run again at the end (run-to-run spread), and
# with DATA=DIR (the shared models and references, as tools/gpu_check.sh takes it) the shared
# models checked with both flags on (tools/gpu_check.sh small: the F32 KV pool, against
# the references and loom-engine-cpu).
# Usage: BIN=DIR [OUT=DIR] [BASE_BIN=DIR] [DATA=DIR] [PARTS="1 2"] [NCU=1] bash tools/gpu_trials.sh
# The steps, then the shared models, then the profiles: never timed as a whole (an estimate of 12
# minutes; a call cut short keeps what came first). Under a 10-minute limit PARTS="1 2" NCU=0
# DATA=... then PARTS= NCU=1 split it.
# BIN holds loom-gpu-bench, loom-gpu-matvec-test, loom-gpu-qgemm-test, loom-make-model (and
# loom-engine-cuda, loom-engine-cpu with DATA; BIN/lib, as tools/gpu_check.sh takes it);
# BASE_BIN adds another build's default path. P1_VARIANTS, P2_VARIANTS replace the variant lists of
# parts 1 and 2 (names as in steps() below), e.g. to fit one call.
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
for shape in "" 2,2 2,3 4,1 4,2; do
  echo "matvec test LOOM_MV1=$shape: $(LOOM_MV1=$shape timeout 60 "$BIN/loom-gpu-matvec-test" | tail -1)" >>"$S"
done
echo "qgemm test: $(timeout 120 "$BIN/loom-gpu-qgemm-test" | tail -1)" >>"$S"
GEN_TYPES=q4_k_m OUT="$OUT/gen" BIN="$BIN" bash tools/gpu_check.sh gen >"$OUT/gen.log" 2>&1
M=${SHM:-/dev/shm/loom}/llama3-8b-q4_k_m.gguf
i=0
# steps PART ROWS VARIANT...: one loom-gpu-bench run a variant (default, single, sRB (single with
# LOOM_MV1=R,B), q6frag, base), in the order given.
steps() {
  local part=$1 rows=$2 v
  shift 2
  for v in "$@"; do
    i=$((i + 1))
    local env=() args=(--model "$M" --step-rows "$rows") bench="$BIN/loom-gpu-bench"
    case $v in
      single) args+=(--matvec-single) ;;
      s[24][123]) env=("LOOM_MV1=${v:1:1},${v:2:1}") args+=(--matvec-single) ;;
      q6frag) args+=(--decode-gemm-q6-frag) ;;
      base) bench="$BASE_BIN/loom-gpu-bench" ;;
    esac
    env "${env[@]}" timeout 120 "$bench" "${args[@]}" >"$OUT/steps-$i-$v.log" 2>&1
    echo "$(date +%T) part $part, $i $v: $(grep '^decode step' "$OUT/steps-$i-$v.log" | sed 's/ (.*//' | tr '\n' ' ')" >>"$S"
  done
}
for part in ${PARTS-1 2}; do
  if [ "$part" = 1 ]; then
    # shellcheck disable=SC2086
    steps 1 1,2 ${P1_VARIANTS:-default single s22 s23 s41 s42 ${BASE_BIN:+base} default single}
  else
    # shellcheck disable=SC2086
    steps 2 4,8,16,32,64 ${P2_VARIANTS:-default q6frag default q6frag}
  fi
done
if [ -n "${DATA:-}" ]; then
  SMALL_EXTRA="--engine-arg=--matvec-single --engine-arg=--decode-gemm-q6-frag" OUT="$OUT/small" BIN="$BIN" \
    DATA="$DATA" bash tools/gpu_check.sh small >"$OUT/small.log" 2>&1
  sed -n '/==== summary/,$p' "$OUT/small.log" >>"$S"
fi
if [ "${NCU:-1}" = 1 ] && command -v ncu >/dev/null; then
  # name|kernel regex|bench arguments
  for p in "single|matvec1_kernel|--step-rows 1 --matvec-single" "batched|matvec_kernel|--step-rows 1" \
    "q6frag|qgemm_frag_kernel|--step-rows 64 --decode-gemm-q6-frag" "tile|qgemm_kernel|--step-rows 64"; do
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
