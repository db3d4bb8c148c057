#!/usr/bin/env bash
# One self-contained GPU run (for the H200 device machine): device sampler check, correctness of
# loom-engine-cuda on the shared test models against the references and the CPU engine, random
# Llama-3-8B-shaped models (F16, Q4_K_M) generated into /dev/shm, the CPU-vs-GPU greedy check on
# them, and the benchmarks (tools/bench_gpu.py). Logs go to $OUT (or ./gpu-out) as it runs, and a
# summary is printed last.
#
# Usage: tools/gpu_check.sh [stage ...]   stages: info sampler small small16 gen check8b bench sass ncu
# (default: all). small checks the F32 KV pool (--kv-f32) against the tolerances of the CPU
# engine, small16 the default F16 pool against its own. bench also times the variants in
# $BENCH_VARIANTS (bench_gpu.py --variant NAME:ARGS: the F32 pool and --batch-invariant by
# default); BENCH_SKIP_GATEWAY=1 leaves out the gateway figures. sass writes the single-row
# matvec kernels' machine code and opcode counts; ncu profiles a few decode matvecs (Nsight
# Compute, clocks left alone; NCU_MODELS, NCU_KERNELS choose).
# The binaries (loom-engine-cuda, loom-engine-cpu, loom-gpu-bench, loom-gpu-sampler-test,
# loom-make-model, loom-gateway) come from one of:
#   BIN=DIR        prebuilt, in DIR. Shared libraries they need that this machine lacks (e.g.
#                  the ICU of the build machine, for loom-gateway) may be carried in DIR/lib,
#                  which goes on LD_LIBRARY_PATH; a DIR/lib/*.tar.xz is unpacked there first.
#   BUILD_DIR=DIR  built here: scripts/build.sh DIR -DLOOM_CUDA=ON (needs nvcc and the packages
#                  of scripts/install-deps.sh); BIN is then DIR/bin.
# The small models and references are read from $DATA (models/, reference/; default the shared
# folder: $LOOM_SHARED_DIR, else ../shared beside the repository).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -n "${BUILD_DIR:-}" ]; then
  scripts/build.sh "$BUILD_DIR" -DLOOM_CUDA=ON || { echo "gpu_check: the build in $BUILD_DIR failed" >&2; exit 1; }
  BIN="$BUILD_DIR/bin"
fi
if [ -z "${BIN:-}" ]; then
  echo "gpu_check: set BIN=DIR (prebuilt binaries) or BUILD_DIR=DIR (build here); see the header" >&2
  exit 2
fi
[ -d "$BIN" ] || { echo "gpu_check: no folder $BIN" >&2; exit 2; }
BIN=$(cd "$BIN" && pwd)
DATA=${DATA:-${LOOM_SHARED_DIR:-$(cd .. && pwd)/shared}}
OUT=${OUT:-$PWD/gpu-out}
SHM=${SHM:-/dev/shm/loom}
mkdir -p "$OUT" "$SHM"
if [ -d "$BIN/lib" ]; then
  for a in "$BIN"/lib/*.tar.xz; do [ -f "$a" ] && tar xJf "$a" -C "$BIN/lib"; done
  export LD_LIBRARY_PATH="$BIN/lib:${LD_LIBRARY_PATH:-}"
fi
export PYTHONUNBUFFERED=1
STAGES=("$@")
[ ${#STAGES[@]} -eq 0 ] && STAGES=(info sampler small small16 gen check8b bench sass ncu)
BENCH_VARIANTS=${BENCH_VARIANTS:-"kvf32:--kv-f32 invariant:--batch-invariant"}
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
    stamp "shared models vs references and the CPU engine (F32 KV pool)"
    timeout 300 python3 tools/check_gpu.py --engine "$BIN/loom-engine-cuda" --engine-arg=--kv-f32 \
      --cpu-engine "$BIN/loom-engine-cpu" --models "$DATA/models" --refs "$DATA/reference" 2>&1 | tee "$OUT/small.log"
    note "small models, F32 KV:"
    sed -n '/^model /,$p' "$OUT/small.log" >>"$SUMMARY"
  fi
  if want small16; then
    stamp "shared models vs references and the CPU engine (F16 KV pool, the default)"
    timeout 300 python3 tools/check_gpu.py --engine "$BIN/loom-engine-cuda" \
      --cpu-engine "$BIN/loom-engine-cpu" --models "$DATA/models" --refs "$DATA/reference" 2>&1 | tee "$OUT/small16.log"
    note "small models, F16 KV:"
    sed -n '/^model /,$p' "$OUT/small16.log" >>"$SUMMARY"
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
      timeout 240 python3 tools/check_gpu.py --engine "$BIN/loom-engine-cuda" \
        --cpu-engine "$BIN/loom-engine-cpu" --model8b "$SHM/llama3-8b-$t.gguf" --steps "${STEPS8B:-64}" 2>&1 |
        tee "$OUT/check8b-$t.log"
      note "$(grep '^8B check' "$OUT/check8b-$t.log")"
    done
  fi
  if want bench; then
    stamp "benchmark: backend, engine protocol, gateway"
    local vargs=() v
    for v in $BENCH_VARIANTS; do vargs+=(--variant "$v"); done
    [ "${BENCH_SKIP_GATEWAY:-0}" = 1 ] && vargs+=(--skip-gateway)
    timeout 420 python3 tools/bench_gpu.py --bin "$BIN" --models "$SHM/llama3-8b-f16.gguf" "$SHM/llama3-8b-q4_k_m.gguf" \
      --json "$OUT/bench.json" "${vargs[@]}" 2>&1 | tee "$OUT/bench.log"
    sed -n '/^== summary/,$p' "$OUT/bench.log" >>"$SUMMARY"
  fi
  if want sass; then
    stamp "machine code of the single-row matvec kernels (Q4_K, F16)"
    if command -v cuobjdump >/dev/null; then
      timeout 60 cuobjdump -sass "$BIN/loom-gpu-bench" 2>/dev/null | python3 -c '
import re, sys, collections
out = open(sys.argv[1], "w")
name, keep, counts = None, False, {}
for line in sys.stdin:
    m = re.search(r"Function : (\S+)", line)
    if m:
        name = m.group(1); keep = "matvec_kernelILj12ELi1E" in name or "matvec_kernelILj1ELi1E" in name
        if keep: counts[name] = collections.Counter()
    if keep:
        out.write(line)
        ins = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line)
        if ins: counts[name][ins.group(1)] += 1
for n, c in counts.items():
    print(n, sum(c.values()), " ".join(f"{k}:{v}" for k, v in c.most_common(24)))
' "$OUT/matvec.sass" | tee "$OUT/sass_counts.txt"
    fi
  fi
  if want ncu; then
    stamp "Nsight Compute: decode matvec kernels of the first layers (${NCU_MODELS:-q4_k_m f16})"
    if command -v ncu >/dev/null; then
      for t in ${NCU_MODELS:-q4_k_m f16}; do
        timeout 75 ncu --clock-control none -k regex:"${NCU_KERNELS:-matvec_kernel|attn_}" -s 1 -c 8 --section SpeedOfLight \
          --section Occupancy --section WarpStateStats --section SchedulerStats -f -o "$OUT/ncu-$t" \
          "$BIN/loom-gpu-bench" --model "$SHM/llama3-8b-$t.gguf" --decode-only --prompt 64 --gen 2 >"$OUT/ncu-$t.run.log" 2>&1
        timeout 30 ncu -i "$OUT/ncu-$t.ncu-rep" --page details >"$OUT/ncu-$t.txt" 2>&1
        grep -E "matvec_kernel|attn_|Duration|DRAM Throughput|Issued Warp|No Eligible|Achieved Occupancy" \
          "$OUT/ncu-$t.txt" | head -120
      done
    fi
  fi
  stamp done
  echo
  echo "================ summary ================"
  cat "$SUMMARY"
}

main 2>&1 | tee "$OUT/log"
