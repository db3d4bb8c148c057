#!/usr/bin/env bash
# Batch-1 decode against context length on one H200: loom-gpu-bench --decode-only after prompts
# of CONTEXTS tokens (default 512 8192 30000) on the random Llama-3-8B F16 model, printing the
# decode tok/s and the device time of each operation of one decode step (CUDA events), so that
# what grows with the context (attention, its split combine) shows by name.
# Usage: BIN=DIR [DATA=DIR] [OUT=DIR] [CONTEXTS="512 8192 30000"] bash tools/gpu_decode_ctx.sh
# BIN: loom-gpu-bench and loom-make-model (carried; BIN/lib as tools/gpu_check.sh takes it).
# The prompts are prefilled with the single-F16 attention product (--prefill-attn gemm16), the
# fastest, since only the decode after them is timed here.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
GEN_TYPES=f16 OUT="$OUT/gen" bash tools/gpu_check.sh info gen >"$OUT/gen.log" 2>&1 || true
tail -5 "$OUT/gen.log"
BIN=$(cd "$BIN" && pwd)
[ -d "$BIN/lib" ] && export LD_LIBRARY_PATH="$BIN/lib:${LD_LIBRARY_PATH:-}"
for n in ${CONTEXTS:-512 8192 30000}; do
  echo "=== $(date +%T) decode after $n tokens"
  timeout 200 "$BIN/loom-gpu-bench" --model "${SHM:-/dev/shm/loom}/llama3-8b-f16.gguf" --decode-only --prompt "$n" \
    --gen "${GEN:-32}" --ctx 32768 --prefill-attn gemm16 "$@" 2>&1 | tee "$OUT/decode-$n.log"
done
