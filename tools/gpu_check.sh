#!/usr/bin/env bash
# One self-contained GPU run (for the H200 device machine): device sampler check, correctness of
# loom-engine-cuda on the shared test models against the references and the CPU engine, random
# Llama-3-8B-shaped models (F16, Q4_K_M) generated into /dev/shm, the CPU-vs-GPU greedy check on
# them, and the benchmarks (tools/bench_gpu.py). Logs go to $OUT (or ./gpu-out) as it runs, and a
# summary is printed last.
#
# Usage: tools/gpu_check.sh [stage ...]   stages: info sampler small gen check8b bench (default: all)
# Expects prebuilt binaries in $BIN (default .devbin: loom-engine-cuda, loom-engine-cpu,
# loom-gpu-bench, loom-gpu-sampler-test, loom-make-model, loom-gateway; shared libraries in
# $BIN/lib) and the small models and references in $DATA (default .devdata: models/, reference/).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.devbin}
DATA=${DATA:-.devdata}
OUT=${OUT:-$PWD/gpu-out}
SHM=${SHM:-/dev/shm/loom}
mkdir -p "$OUT" "$SHM"
export LD_LIBRARY_PATH="$PWD/$BIN/lib:${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1
STAGES=("$@")
[ ${#STAGES[@]} -eq 0 ] && STAGES=(info sampler small gen check8b bench)
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"

want() { local s; for s in "${STAGES[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
note() { echo "$*" | tee -a "$SUMMARY"; }
stamp() { echo "=== $(date +%T) $*"; }

main() {
  if want info; then
    stamp info
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv || true
    ls -la "$BIN" "$DATA" || true
  fi
  if want sampler; then
    stamp "device sampler vs engine/sampler.cpp"
    timeout 120 "$BIN/loom-gpu-sampler-test" 600 2>&1 | tail -15 | tee "$OUT/sampler.log"
    note "sampler: $(tail -1 "$OUT/sampler.log")"
  fi
  if want small; then
    stamp "shared models vs references and the CPU engine"
    timeout 300 python3 engine/backends/cuda/check_gpu.py --engine "$BIN/loom-engine-cuda" \
      --cpu-engine "$BIN/loom-engine-cpu" --models "$DATA/models" --refs "$DATA/reference" 2>&1 | tee "$OUT/small.log"
    note "small models:"
    sed -n '/^model /,$p' "$OUT/small.log" >>"$SUMMARY"
  fi
  if want gen; then
    stamp "random Llama-3-8B models into $SHM"
    for t in f16 q4_k_m; do
      [ -s "$SHM/llama3-8b-$t.gguf" ] || timeout 240 "$BIN/loom-make-model" --preset llama3-8b --type $t \
        --threads "$(nproc)" --out "$SHM/llama3-8b-$t.gguf" 2>&1 | tail -2
    done
    ls -la "$SHM"
  fi
  if want check8b; then
    for t in q4_k_m f16; do
      stamp "8B greedy check $t (GPU vs CPU engine)"
      timeout 240 python3 engine/backends/cuda/check_gpu.py --engine "$BIN/loom-engine-cuda" \
        --cpu-engine "$BIN/loom-engine-cpu" --model8b "$SHM/llama3-8b-$t.gguf" --steps "${STEPS8B:-64}" 2>&1 |
        tee "$OUT/check8b-$t.log"
      note "$(grep '^8B check' "$OUT/check8b-$t.log")"
    done
  fi
  if want bench; then
    stamp "benchmark: backend, engine protocol, gateway"
    timeout 420 python3 tools/bench_gpu.py --bin "$BIN" --models "$SHM/llama3-8b-f16.gguf" "$SHM/llama3-8b-q4_k_m.gguf" \
      --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log"
    sed -n '/^== summary/,$p' "$OUT/bench.log" >>"$SUMMARY"
  fi
  stamp done
  echo
  echo "================ summary ================"
  cat "$SUMMARY"
}

main 2>&1 | tee "$OUT/log"
