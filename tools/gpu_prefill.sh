#!/usr/bin/env bash
# One GPU run for the prefill attention paths (issue 10): builds on the machine through
# tools/gpu_check.sh (BUILD_DIR, FALLBACK_BIN as there), then, logging under $OUT as it goes:
# the Llama-3-8B-shaped F16 model into /dev/shm (loom-make-model), the backend's prefill of
# PREFILL_LIST tokens (loom-gpu-bench --prefill-list: TTFT, chunks of 2,048) with each of
# PREFILL_MODES (default "flash gemm gemm16 tiled": the engine's --prefill-attn modes) in the same
# run, the paths against each other and the CPU engine on one long prompt (tools/check_prefill_attn.py), and gpu_check.sh's small16 / small / core stages (the shared
# models against references and the CPU engine; the engine-core cases on loom-engine-cuda).
#
# Usage: BUILD_DIR=DIR DATA=DIR [FALLBACK_BIN=DIR] OUT=DIR bash tools/gpu_prefill.sh
#        PREFILL_LIST (default 512,2048,8192,30720), STAGES (default "bench check small"),
#        BUDGET_S (default 560: every stage's timeout is cut to what is left of it). $OUT ends with
#        summary.txt (everything that matters) and logs.tar.xz (the rest).
set -uo pipefail
T0=$(date +%s)
left() { local l=$(( ${BUDGET_S:-560} - ($(date +%s) - T0) - 15 )); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 5 ] && l=5; echo "$l"; }
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
SHM=${SHM:-/dev/shm/loom}
LIST=${PREFILL_LIST:-512,2048,8192,30720}
STAGES=${STAGES:-"bench check small"}
mkdir -p "$OUT/check" "$SHM"
stamp() { echo "=== $(date +%T) $*" | tee -a "$OUT/summary.txt"; }
has() { [[ " $STAGES " == *" $1 "* ]]; }

stamp build
OUT="$OUT/check" bash tools/gpu_check.sh info >"$OUT/build.log" 2>&1
BIN=$BUILD_DIR/bin
[ -x "$BIN/loom-gpu-bench" ] || { tail -40 "$OUT/build.log"; tail -60 "$OUT/check/build.log" 2>/dev/null; exit 1; }
[ -d "${FALLBACK_BIN:-}/lib" ] && export LD_LIBRARY_PATH="$(cd "$FALLBACK_BIN/lib" && pwd):${LD_LIBRARY_PATH:-}"
for f in "${FALLBACK_BIN:-/nonexistent}"/loom-*; do
  [ -e "$BIN/$(basename "$f")" ] || cp "$f" "$BIN/"
done
tee -a "$OUT/summary.txt" <"$OUT/build.log"
M=$SHM/llama3-8b-f16.gguf
stamp "model $M"
[ -s "$M" ] || timeout "$(left 240)" "$BIN/loom-make-model" --preset llama3-8b --type f16 --threads "$(nproc)" --out "$M" 2>&1 | tail -2

if has bench; then
  for mode in ${PREFILL_MODES:-flash gemm gemm16 tiled}; do
    stamp "backend prefill, $mode attention: $LIST"
    timeout "$(left 200)" "$BIN/loom-gpu-bench" --model "$M" --prefill-attn "$mode" --prefill-list "$LIST" 2>&1 |
      tee "$OUT/prefill-$mode.log" | tee -a "$OUT/summary.txt"
  done
fi
if has check; then
  stamp "gemm vs tiled vs F32 pool vs CPU engine, 8B F16, one long prompt"
  timeout "$(left 300)" python3 tools/check_prefill_attn.py --engine "$BIN/loom-engine-cuda" --cpu-engine "$BIN/loom-engine-cpu" \
    --model "$M" --tokens 3000 --cpu-tokens "${CPU_TOKENS:-256}" 2>&1 | tee "$OUT/check8b.log" | tee -a "$OUT/summary.txt"
fi
if has small; then
  stamp "gpu_check.sh small16 small core"
  mkdir -p "$OUT/check2"
  env -u BUILD_DIR OUT="$OUT/check2" BIN="$BIN" DATA="$DATA" timeout "$(left 420)" bash tools/gpu_check.sh small16 small core \
    >"$OUT/small.log" 2>&1
  tee -a "$OUT/summary.txt" <"$OUT/check2/summary.txt"
fi
stamp done
( cd "$OUT" && ls | grep -vx -e summary.txt -e logs.tar.xz >/tmp/gpu_prefill_files.txt &&
  tar cJf logs.tar.xz -T /tmp/gpu_prefill_files.txt && xargs rm -rf </tmp/gpu_prefill_files.txt ) || true
