#!/usr/bin/env bash
# Decode at small batch sizes on one H200, for choosing the matvec/GEMM crossover and comparing
# engine builds: tools/bench_serving.py's concurrency scenario at the engine protocol (no
# gateway, no logprobs) on the random Llama-3-8B models, one run per VARIANTS entry and model,
# then one table of ITL p50 (ms) per variant and concurrency.
# Usage: BIN=DIR [OUT=DIR] [GEN_TYPES="f16 q4_k_m"] [CONC=1,2,3,4,6,8,12,16]
#        VARIANTS="name|engine binary in BIN|engine args ..." (';'-separated) bash tools/gpu_small_batch.sh
# e.g. VARIANTS="base|loom-engine-cuda|;mv2|loom-engine-cuda|--matvec-rows=2"
# BIN: the engines, loom-make-model and loom-engine-cpu (carried; BIN/lib as tools/gpu_check.sh
# takes it). Each run: 128-token prompts, 64 generated (BENCH_OPTS adds options).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
GEN_TYPES=${GEN_TYPES:-f16 q4_k_m}
GEN_TYPES="$GEN_TYPES" OUT="$OUT/gen" bash tools/gpu_check.sh info gen >"$OUT/gen.log" 2>&1 || true
tail -3 "$OUT/gen.log"
BIN=$(cd "$BIN" && pwd)
[ -d "$BIN/lib" ] && export LD_LIBRARY_PATH="$BIN/lib:${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1
IFS=';' read -ra variants <<<"${VARIANTS:?set VARIANTS (see the header)}"
for t in $GEN_TYPES; do
  for v in "${variants[@]}"; do
    IFS='|' read -r name exe args <<<"$v"
    eargs=(--engine-arg=--parallel=64)
    for a in $args; do eargs+=("--engine-arg=$a"); done
    echo "=== $(date +%T) $t $name: $exe $args"
    # shellcheck disable=SC2086
    timeout "${RUN_TIMEOUT:-120}" python3 tools/bench_serving.py --engine "$BIN/$exe" \
      --model "${SHM:-/dev/shm/loom}/llama3-8b-$t.gguf" --scenarios concurrency --prompt 128 --gen 64 \
      --concurrency "${CONC:-1,2,3,4,6,8,12,16}" "${eargs[@]}" ${BENCH_OPTS:-} --json "$OUT/sb-$t-$name.json" \
      >"$OUT/sb-$t-$name.log" 2>&1 || echo "run $t $name failed: $(tail -3 "$OUT/sb-$t-$name.log")"
  done
done
python3 - "$OUT" <<'EOF'
import glob, json, os, sys
rows = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "sb-*.json"))):
    key = os.path.basename(f)[3:-5]
    try:
        res = json.load(open(f))["results"]
    except Exception as e:  # a run that died leaves no usable file
        print(key, "unreadable:", e)
        continue
    rows[key] = {r["concurrency"]: r for r in res if r.get("scenario") == "concurrency" and r["logprobs"] == 0 and r.get("target", "engine") == "engine"}
cs = sorted({c for r in rows.values() for c in r})
print("ITL p50 ms (tok/s) per concurrency")
print("variant".ljust(22) + "".join(f"c={c}".rjust(18) for c in cs))
for k, r in rows.items():
    print(k.ljust(22) + "".join((f"{r[c]['itl_p50_ms']:.2f} ({r[c]['tok_s']:.0f})" if c in r else "-").rjust(18) for c in cs))
EOF
