#!/usr/bin/env bash
# Issue 11's matrix in one call on one GPU, most important first, each part skipped when the time
# left (BUDGET seconds from the start) would not hold it:
#  1. the random Llama-3-8B-shaped F16 and Q4_K_M models generated into SHM (loom-make-model), and
#     loom-gpu-qgemm-test and loom-gpu-matvec-test;
#  2. decode steps at 1-256 rows (loom-gpu-bench --step-rows, graph replays, median of 9) of both
#     models for BASE_BIN's and BIN's engines, PREV_BIN's for Q4_K_M when given, and BIN's with
#     top-20 logprobs;
#  3. serving: BIN's engine alone and behind BIN's loom-gateway at c = 1-256, without and with
#     top-20 (tools/bench_serving.py, 128-token prompts, 128 tokens a request), Q4_K_M then F16;
#  4. F16 prefill at 512 / 2K / 8K / 30K tokens, BIN then BASE_BIN;
#  5. serving for BASE_BIN's engine (behind BIN's gateway) at c = 1, 64 and 256;
#  6. Nsight Compute counters (time, DRAM bytes and bandwidth, issued instructions, registers,
#     warps active) of six fragment-kernel launches at 64 rows and six matvec1 launches at 1 row.
# Usage: BIN=DIR BASE_BIN=DIR [PREV_BIN=DIR] [OUT=DIR] [SHM=DIR] [BUDGET=570] [RES1=250] [RES2=150]
#        bash tools/gpu_matrix.sh
# BIN holds loom-engine-cuda, loom-gateway, loom-gpu-bench, loom-gpu-qgemm-test,
# loom-gpu-matvec-test and loom-make-model (BIN/lib goes on LD_LIBRARY_PATH, as tools/gpu_check.sh
# takes it); BASE_BIN and PREV_BIN loom-engine-cuda and loom-gpu-bench. RES1 and RES2 are the
# seconds kept back for the parts after BIN's Q4_K_M and F16 serving (RES1=100 RES2=60 fit
# BUDGET=380). The 2026-12-07 matrix in docs/benchmarks.md ran this with BUDGET=300 RES1=40
# RES2=10 on an H100 (238 s; part 5 skipped), from git-ignored paths (.devdata/call25.sh).
# Results: the log on stdout; $OUT/step-*.log, serving-*.json and .log, prefill-*.log, ncu-*.log.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/gpu-out/matrix}
M=${SHM:-/dev/shm/loom}
mkdir -p "$OUT" "$M"
N=$(cd "${BIN:?set BIN (see the header)}" && pwd)
B=$(cd "${BASE_BIN:?set BASE_BIN (see the header)}" && pwd)
P=${PREV_BIN:+$(cd "$PREV_BIN" && pwd)}
[ -d "$N/lib" ] && export LD_LIBRARY_PATH="$N/lib:${LD_LIBRARY_PATH:-}"
T0=$(date +%s) BUDGET=${BUDGET:-570}
Q=$M/llama3-8b-q4_k_m.gguf F=$M/llama3-8b-f16.gguf
left() { echo $((BUDGET - ($(date +%s) - T0))); }
log() { echo "=== $(date +%T) +$(($(date +%s) - T0))s $*"; }
log info
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader
log gen-models
timeout 120 "$N/loom-make-model" --preset llama3-8b --type q4_k_m --threads 8 --out "$Q" >"$OUT/mk-q4.log" 2>&1 &
timeout 150 "$N/loom-make-model" --preset llama3-8b --type f16 --threads 8 --out "$F" >"$OUT/mk-f16.log" 2>&1
wait
tail -qn1 "$OUT/mk-q4.log" "$OUT/mk-f16.log"
log tests
timeout 60 "$N/loom-gpu-qgemm-test" >"$OUT/qtest.log" 2>&1
echo "qgemm-test rc $? $(grep -E 'cases' "$OUT/qtest.log")"
timeout 60 "$N/loom-gpu-matvec-test" >"$OUT/mtest.log" 2>&1
echo "matvec-test rc $? $(tail -1 "$OUT/mtest.log")"
# step TAG BINDIR MODEL [ARGS]: decode steps at 1-256 rows, one line of rows:ms.
step() {
  timeout 90 "$2/loom-gpu-bench" --model "$3" --step-rows 1,2,4,8,16,32,64,128,256 ${4:-} >"$OUT/step-$1.log" 2>&1
  echo "$1: $(grep -E '^decode step' "$OUT/step-$1.log" | sed -E 's/decode step of ([0-9]+) rows: ([0-9.]+) ms.*/\1:\2/' | tr '\n' ' ')"
  grep -m1 -iE 'bandwidth|copy' "$OUT/step-$1.log" | cut -c1-150
}
log steps
step q4-base "$B" "$Q"
step q4-new "$N" "$Q"
[ -n "$P" ] && step q4-prev "$P" "$Q"
step q4-new-lp20 "$N" "$Q" "--step-logprobs 20"
step f16-base "$B" "$F"
step f16-new "$N" "$F"
step f16-new-lp20 "$N" "$F" "--step-logprobs 20"
# serve TAG BINDIR MODEL CONCURRENCY RESERVE: bursts on the engine alone and behind BIN's
# gateway, run when RESERVE + 60 s are left, ended RESERVE s before the budget.
serve() {
  [ "$(left)" -gt $(($5 + 60)) ] || { log "skip serving $1"; return; }
  log "serving $1 (engine alone and gateway, 128/128, c = $4, without and with top-20)"
  timeout $(($(left) - $5)) python3 tools/bench_serving.py --engine "$2/loom-engine-cuda" --gateway "$N/loom-gateway" \
    --model "$3" --scenarios concurrency --concurrency "$4" --prompt 128 --gen 128 \
    --engine-arg=--parallel=256 --json "$OUT/serving-$1.json" >"$OUT/serving-$1.log" 2>&1
  sed -n '/^target /,$p' "$OUT/serving-$1.log" | head -40
}
serve q4-new "$N" "$Q" 1,2,4,8,16,32,64,128,256 "${RES1:-250}"
serve f16-new "$N" "$F" 1,2,4,8,16,32,64,128,256 "${RES2:-150}"
# prefill TAG BINDIR: F16 prefill tok/s at 512 / 2K / 8K / 30K tokens.
prefill() {
  [ "$(left)" -gt 80 ] || { log "skip prefill $1"; return; }
  log "prefill f16 $1"
  timeout 45 "$2/loom-gpu-bench" --model "$F" --prefill-list 512,2048,8192,30000 --ctx 30720 >"$OUT/prefill-$1.log" 2>&1
  grep -E '^prefill' "$OUT/prefill-$1.log"
}
prefill new "$N"
prefill base "$B"
serve q4-base "$B" "$Q" 1,64,256 40
serve f16-base "$B" "$F" 1,64,256 40
MET=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_read.sum.per_second,smsp__inst_executed.sum
MET=$MET,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size
MET=$MET,launch__block_size
command -v ncu >/dev/null || export PATH=$PATH:/usr/local/cuda/bin
# ncuk TAG MODEL ROWS KERNEL_REGEX SKIP COUNT: Nsight Compute counters of COUNT launches.
ncuk() {
  [ "$(left)" -gt 30 ] || { log "skip ncu $1"; return; }
  log "ncu $1"
  timeout $(($(left) - 8)) ncu --clock-control none -k regex:"$4" -s "$5" -c "$6" --metrics "$MET" \
    "$N/loom-gpu-bench" --model "$2" --step-rows "$3" >"$OUT/ncu-$1.log" 2>&1
  grep -E '_kernel|gemm|nvjet|gpu__time|dram__bytes_read|inst_executed|registers|grid_size|warps_active' \
    "$OUT/ncu-$1.log" | cut -c1-160 | head -70
}
ncuk q4-64 "$Q" 64 qgemm_frag_kernel 300 6
ncuk q4-1 "$Q" 1 matvec1_kernel 300 6
log end
