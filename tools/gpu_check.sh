#!/usr/bin/env bash
# One self-contained GPU run (any machine with an H200, sm_90a): device sampler check, correctness of
# loom-engine-cuda on the shared test models against the references and the CPU engine, random
# Llama-3-8B-shaped models (F16, Q4_K_M) generated into /dev/shm, the CPU-vs-GPU greedy check on
# them, and the benchmarks (tools/bench_gpu.py). Logs go to $OUT (or ./gpu-out) as it runs, and a
# summary is printed last.
#
# Usage: tools/gpu_check.sh [stage ...]   stages: info sampler qgemm small small16 exact split gen
# steps prefill prefillcheck check8b core serving bench sass ncu (default: all but steps, prefill, prefillcheck
# and serving); prefill times the backend's prefill (PREFILL_LIST, PREFILL_MODES) and
# prefillcheck compares the prefill attention paths (tools/check_prefill_attn.py, PREFILLCHECK_*
# options) on the 8B F16 model; qgemm checks the tensor-core decode GEMM (loom-gpu-qgemm-test),
# the matvec kernel (loom-gpu-matvec-test) and decode attention (loom-gpu-attn-test); steps
# times decode steps by row count (STEP_ROWS, STEP_VARIANTS; after gen); CHECK8B_ARGS is one
# engine option for
# check8b (e.g. --kv-f32). BASE_BIN=DIR (another build's binaries, e.g. main before a change)
# adds a "base" variant to steps and, with SERVING_BASE=1, a "-base" run of every serving entry,
# so that before and after are measured in one call. core runs tests/e2e/test_engine_core.py's
# batching/chunking/prefix/preemption cases on loom-engine-cuda; serving runs
# tools/bench_serving.py at the engine protocol (SERVING_RUNS, SERVING_OPTS), and with
# SERVING_GATEWAY=1 also through loom-gateway (same engine, streamed HTTP). small checks the
# F32 KV pool (--kv-f32) against the tolerances of the CPU engine, small16 the default F16
# pool against its own, exact every product in F32 (--precision exact) against the
# CPU engine at 2e-3 for every model, the quantized ones included, split the GEMM paths' products
# on F16 high and low parts (--precision accurate) at 2e-3 too (SMALL_EXTRA adds check_gpu.py
# options to these four stages, e.g. "--engine-arg=--no-matvec-single"). bench also times the
# variants in $BENCH_VARIANTS (bench_gpu.py
# --variant NAME:ARGS: the F32 pool and --precision exact by default); BENCH_SKIP_GATEWAY=1
# leaves out the gateway figures. sass writes the single-row matvec kernels' machine code and
# opcode counts; ncu profiles a few decode matvecs (Nsight Compute, clocks left alone;
# NCU_MODELS, NCU_KERNELS choose; NCU_BENCH_ARGS replaces the bench's arguments, NCU_SKIP the
# kernels skipped first, NCU_COUNT the kernels profiled, default 8). GEN_TYPES (default "f16 q4_k_m") picks the 8B models gen makes.
# The binaries (loom-engine-cuda, loom-engine-cpu, loom-gpu-bench, loom-gpu-sampler-test,
# loom-gpu-qgemm-test, loom-gpu-matvec-test, loom-gpu-attn-test, loom-make-model, loom-gateway)
# come from one of:
#   BIN=DIR        prebuilt, in DIR. Shared libraries they need that this machine lacks (e.g.
#                  the ICU of the build machine, for loom-gateway) may be carried in DIR/lib,
#                  which goes on LD_LIBRARY_PATH; a DIR/lib/*.tar.xz is unpacked there first.
#   BUILD_DIR=DIR  built here: cmake -DLOOM_CUDA=ON (Release, Ninja; needs nvcc), with
#                  -DLOOM_GATEWAY=OFF where RapidJSON, PCRE2 or ICU are missing; LOOM_JOBS jobs
#                  (default nproc); BIN is then DIR/bin. FALLBACK_BIN=DIR2 (optional) supplies
#                  the binaries this machine could not build (loom-engine-cpu without Boost),
#                  its DIR2/lib goes on LD_LIBRARY_PATH, and its binaries run if the build fails.
# The small models and references are read from $DATA (models/, reference/; default the shared
# folder: $LOOM_SHARED_DIR, else ../shared beside the repository).
set -uo pipefail
cd "$(dirname "$0")/.."
T_START=$(date +%s)  # BUDGET_S (below) counts from here, the build included
if [ -n "${BUILD_DIR:-}" ]; then
  # A GPU machine may have CUDA, CMake and Ninja but not the gateway's RapidJSON, PCRE2 or ICU
  # (or Boost): without them configure with LOOM_GATEWAY=OFF and build only the targets there are.
  gw=ON
  { [ -f /usr/include/rapidjson/document.h ] && pkg-config --exists libpcre2-8 icu-uc; } 2>/dev/null || gw=OFF
  t0=$(date +%s)
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_CUDA=ON -DLOOM_GATEWAY=$gw \
    >"${OUT:-/tmp}/configure.log" 2>&1 || { tail -30 "${OUT:-/tmp}/configure.log" >&2; echo "gpu_check: configure failed" >&2; }
  have=$(ninja -C "$BUILD_DIR" -t targets all 2>/dev/null | sed -n 's/^\(loom-[a-z0-9-]*\): phony$/\1/p')
  want_t=()
  for t in loom-engine-cuda loom-engine-cpu loom-make-model loom-gpu-bench loom-gpu-sampler-test loom-gpu-qgemm-test \
    loom-gpu-matvec-test loom-gpu-attn-test \
    loom-gateway; do
    grep -qx "$t" <<<"$have" && want_t+=("$t")
  done
  BIN="$BUILD_DIR/bin"
  if [ ${#want_t[@]} -gt 0 ] && ninja -C "$BUILD_DIR" -j "${LOOM_JOBS:-$(nproc)}" "${want_t[@]}" >"${OUT:-/tmp}/build.log" 2>&1; then
    echo "gpu_check: built ${want_t[*]} (LOOM_GATEWAY=$gw) in $(( $(date +%s) - t0 )) s"
  else
    tail -40 "${OUT:-/tmp}/build.log" >&2 2>/dev/null
    echo "gpu_check: the build in $BUILD_DIR failed" >&2
    [ -x "${FALLBACK_BIN:-}/loom-engine-cuda" ] || exit 1
    echo "gpu_check: running the prebuilt binaries of $FALLBACK_BIN instead" >&2
    BIN="$FALLBACK_BIN"
  fi
  # A binary this machine could not build (loom-engine-cpu without Boost) comes from FALLBACK_BIN.
  if [ -n "${FALLBACK_BIN:-}" ] && [ "$BIN" != "$FALLBACK_BIN" ]; then
    for f in "$FALLBACK_BIN"/loom-*; do
      [ -e "$BIN/$(basename "$f")" ] || { cp "$f" "$BIN/" && echo "gpu_check: $(basename "$f") from $FALLBACK_BIN"; }
    done
  fi
  [ -d "${FALLBACK_BIN:-}/lib" ] && export LD_LIBRARY_PATH="$(cd "$FALLBACK_BIN/lib" && pwd):${LD_LIBRARY_PATH:-}"
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
[ ${#STAGES[@]} -eq 0 ] && STAGES=(info sampler qgemm small small16 exact split gen check8b core bench sass ncu)
BENCH_VARIANTS=${BENCH_VARIANTS:-"kvf32:--kv-f32 exact:--precision=exact"}
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"

# BUDGET_S: seconds this script may take from here; a stage that would start later than
# BUDGET_S - STAGE_RESERVE_S (default 60) is skipped and noted, so the run ends inside a
# wall-clock limit (a remote runner's, say) with its logs packed.
# left N: N, or the seconds BUDGET_S leaves if fewer (at least 10): a stage's timeout.
left() {
  local l=$1
  [ -n "${BUDGET_S:-}" ] && l=$(( BUDGET_S - ($(date +%s) - T_START) ))
  [ "$l" -gt "$1" ] && l=$1
  [ "$l" -lt 10 ] && l=10
  echo "$l"
}
want() {
  local s
  for s in "${STAGES[@]}"; do
    if [ "$s" = "$1" ]; then
      if [ -n "${BUDGET_S:-}" ] && [ $(( $(date +%s) - T_START )) -gt $(( BUDGET_S - ${STAGE_RESERVE_S:-60} )) ]; then
        note "stage $1 skipped: out of time ($(( $(date +%s) - T_START )) s of BUDGET_S=$BUDGET_S)"
        return 1
      fi
      return 0
    fi
  done
  return 1
}
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
    note "sampler: $(grep "sampler check" "$OUT/sampler.log")"
  fi
  if want qgemm; then
    stamp "tensor-core decode GEMM vs a float64 product (tests/gpu/test_qgemm.cpp)"
    timeout 120 "$BIN/loom-gpu-qgemm-test" 2>&1 | tail -8 | tee "$OUT/qgemm.log"
    note "qgemm: $(tail -1 "$OUT/qgemm.log")"
    # The decode matvec kernel at odd sizes (tests/gpu/test_matvec.cpp).
    timeout 60 "$BIN/loom-gpu-matvec-test" 2>&1 | tail -8 | tee "$OUT/matvec.log"
    note "matvec: $(tail -1 "$OUT/matvec.log")"
    # Decode attention over the paged KV cache, every kernel attn_decode picks (tests/gpu/test_attn_decode.cpp).
    timeout 60 "$BIN/loom-gpu-attn-test" 2>&1 | tail -4 | tee "$OUT/attn.log"
    note "attn: $(tail -1 "$OUT/attn.log")"
  fi
  for st in small small16 exact split; do
    want $st || continue
    case $st in  # title, summary heading, check_gpu.py options
      small) t="F32 KV pool" h="F32 KV" o=(--engine-arg=--kv-f32) ;;
      small16) t="F16 KV pool, the default" h="F16 KV" o=() ;;
      exact) t="every product in F32 (--precision exact), 2e-3" h="F32 products and KV"
        o=(--engine-arg=--precision=exact --cpu-tol 2e-3) ;;
      split) t="GEMM products on F16 high and low parts (--precision accurate), 2e-3" h="split products, F32 KV"
        o=(--engine-arg=--precision=accurate --cpu-tol 2e-3) ;;
    esac
    # SMALL_EXTRA: more check_gpu.py options for these stages, e.g. engine flags being tried.
    # shellcheck disable=SC2206
    o+=(${SMALL_EXTRA:-})
    stamp "shared models vs references and the CPU engine ($t${SMALL_EXTRA:+, $SMALL_EXTRA})"
    timeout 300 python3 tools/check_gpu.py --engine "$BIN/loom-engine-cuda" "${o[@]}" \
      --cpu-engine "$BIN/loom-engine-cpu" --models "$DATA/models" --refs "$DATA/reference" 2>&1 | tee "$OUT/$st.log"
    note "small models, $h:"
    sed -n '/^model /,$p' "$OUT/$st.log" >>"$SUMMARY"
  done
  if want gen; then
    stamp "random Llama-3-8B models into $SHM"
    for t in ${GEN_TYPES:-f16 q4_k_m}; do
      [ -s "$SHM/llama3-8b-$t.gguf" ] || timeout 240 "$BIN/loom-make-model" --preset llama3-8b --type $t \
        --threads "$(nproc)" --out "$SHM/llama3-8b-$t.gguf" 2>&1 | tail -2
    done
    ls -la "$SHM"
  fi
  if want steps; then
    # Decode steps of STEP_ROWS rows (loom-gpu-bench --step-rows: median step time and one
    # profiled step) per model of GEN_TYPES and per STEP_VARIANTS entry (name:engine options,
    # ';'-separated; "default:" runs the defaults).
    # With BASE_BIN=DIR (another build's binaries, e.g. main before a change), each model also
    # runs BASE_BIN's loom-gpu-bench with the defaults first, as variant "base"; a STEP_VARIANTS
    # entry whose name starts with "base" (base-lp:--step-logprobs 20) runs BASE_BIN's too.
    # STEP_BINS="name=DIR;..." adds a variant per entry that runs DIR's loom-gpu-bench with the
    # defaults (trial builds of one kernel, side by side).
    local v vn va t bench b
    IFS=';' read -ra vs <<<"${STEP_VARIANTS:-default:;dequant:--decode-gemm-rows 0}"
    [ -n "${BASE_BIN:-}" ] && vs=("base:" "${vs[@]}")
    declare -A step_bin=()
    IFS=';' read -ra bs <<<"${STEP_BINS:-}"
    for b in "${bs[@]}"; do
      [ -n "$b" ] || continue
      step_bin[${b%%=*}]=${b#*=}
      vs+=("${b%%=*}:")
    done
    for t in ${GEN_TYPES:-f16 q4_k_m}; do
      for v in "${vs[@]}"; do
        want steps || break
        vn=${v%%:*} va=${v#*:}
        bench="$BIN/loom-gpu-bench"
        [ "${vn#base}" != "$vn" ] && bench="$BASE_BIN/loom-gpu-bench"
        [ -n "${step_bin[$vn]:-}" ] && bench="${step_bin[$vn]}/loom-gpu-bench"
        stamp "decode steps $t $vn ($va): rows ${STEP_ROWS:-1,4,8,16,64,256}"
        # shellcheck disable=SC2086
        timeout "$(left 150)" "$bench" --model "$SHM/llama3-8b-$t.gguf" \
          --step-rows "${STEP_ROWS:-1,4,8,16,64,256}" $va >"$OUT/steps-$t-$vn.log" 2>&1
        grep "^decode step" "$OUT/steps-$t-$vn.log" | sed "s/^/$t $vn: /" | tee -a "$SUMMARY"
      done
    done
  fi
  if want prefill; then
    # The backend's TTFT (loom-gpu-bench --prefill-list PREFILL_LIST, F16 8B) per prefill
    # attention mode of PREFILL_MODES (default "flash gemm"), and BASE_BIN's defaults first.
    local mode list=${PREFILL_LIST:-512,2048,8192,30720}
    if [ -n "${BASE_BIN:-}" ] && want prefill; then
      stamp "prefill (backend) base: $list"
      timeout "$(left 200)" "$BASE_BIN/loom-gpu-bench" --model "$SHM/llama3-8b-f16.gguf" --prefill-list "$list" \
        >"$OUT/prefill-base.log" 2>&1
      grep -E "^prefill|^BENCHP" "$OUT/prefill-base.log" | sed "s/^/base: /" | tee -a "$SUMMARY"
    fi
    for mode in ${PREFILL_MODES:-flash gemm}; do
      want prefill || break
      stamp "prefill (backend) $mode attention: $list"
      timeout "$(left 200)" "$BIN/loom-gpu-bench" --model "$SHM/llama3-8b-f16.gguf" --prefill-attn "$mode" \
        --prefill-list "$list" >"$OUT/prefill-$mode.log" 2>&1
      grep -E "^prefill|^BENCHP" "$OUT/prefill-$mode.log" | sed "s/^/$mode: /" | tee -a "$SUMMARY"
    done
  fi
  if want prefillcheck; then
    stamp "prefill attention paths against each other and the CPU engine (8B F16, one long prompt)"
    timeout "$(left 300)" python3 tools/check_prefill_attn.py --engine "$BIN/loom-engine-cuda" \
      --cpu-engine "$BIN/loom-engine-cpu" --model "$SHM/llama3-8b-f16.gguf" --tokens "${PREFILLCHECK_TOKENS:-3000}" \
      --cpu-tokens "${PREFILLCHECK_CPU_TOKENS:-128}" ${PREFILLCHECK_MODES:+--modes "$PREFILLCHECK_MODES"} 2>&1 |
      tee "$OUT/prefillcheck.log"
    grep -E " vs |check:" "$OUT/prefillcheck.log" >>"$SUMMARY"
  fi
  if want check8b; then
    for t in q4_k_m f16; do
      stamp "8B greedy check $t (GPU vs CPU engine)"
      timeout 240 python3 tools/check_gpu.py --engine "$BIN/loom-engine-cuda" \
        --cpu-engine "$BIN/loom-engine-cpu" --model8b "$SHM/llama3-8b-$t.gguf" --steps "${STEPS8B:-64}" \
        ${CHECK8B_ARGS:+"--engine-arg=$CHECK8B_ARGS"} 2>&1 |
        tee "$OUT/check8b-$t.log"
      note "$(grep '^8B check' "$OUT/check8b-$t.log")"
    done
  fi
  if want core; then
    # The engine core v2 checks of tests/e2e/test_engine_core.py (alone, among 15 others, chunked
    # by 16, preempted, behind a cached prefix; cancel frees blocks) on loom-engine-cuda: bitwise
    # with --precision exact, logprobs within 2e-3 without.
    stamp "engine core v2 on loom-engine-cuda (tests/e2e/test_engine_core.py EngineCore)"
    LOOM_BIN="$BIN" LOOM_SHARED="$DATA" LOOM_CORE_ENGINE="$BIN/loom-engine-cuda" LOOM_CORE_TOL=2e-3 \
      timeout 300 python3 tests/e2e/test_engine_core.py -v EngineCore 2>&1 | tee "$OUT/core.log"
    note "engine core v2 (CUDA): $(grep -E '^(OK|FAILED)' "$OUT/core.log" | tail -1)"
    grep -E '^(FAIL|ERROR):' "$OUT/core.log" >>"$SUMMARY"
  fi
  if want serving; then
    # tools/bench_serving.py at the engine protocol, one run per SERVING_RUNS entry
    # (model|name|scenarios|engine args|bench options, ';'-separated; model is f16 or q4_k_m,
    # the llama3-8b files of the gen stage), SERVING_OPTS added to every run's options. Every run
    # gets --parallel 256 first (the default is 64), so that c = 256 runs all at once.
    # SERVING_BASE=1 with BASE_BIN=DIR runs every entry with BASE_BIN's engine first (name-base).
    local runs r t name scen args opts a eng
    IFS=';' read -ra runs <<<"${SERVING_RUNS:-q4_k_m|base|concurrency,prefix||}"
    if [ "${SERVING_BASE:-0}" = 1 ] && [ -n "${BASE_BIN:-}" ]; then
      local both=()
      for r in "${runs[@]}"; do
        IFS='|' read -r t name scen args opts <<<"$r"
        both+=("$t|$name-base|$scen|$args|$opts" "$r")
      done
      runs=("${both[@]}")
    fi
    for r in "${runs[@]}"; do
      IFS='|' read -r t name scen args opts <<<"$r"
      want serving || break
      eng="$BIN/loom-engine-cuda"
      [ "${name%-base}" != "$name" ] && eng="$BASE_BIN/loom-engine-cuda"
      stamp "serving $t $name: $scen (engine: $eng $args; bench: $opts)"
      local eargs=(--engine-arg=--parallel=256)
      [ "${SERVING_GATEWAY:-0}" = 1 ] && [ -x "$BIN/loom-gateway" ] && eargs+=(--gateway "$BIN/loom-gateway")
      for a in $args; do eargs+=("--engine-arg=$a"); done
      # shellcheck disable=SC2086
      timeout "$(left "${SERVING_TIMEOUT:-300}")" python3 tools/bench_serving.py --engine "$eng" \
        --model "$SHM/llama3-8b-$t.gguf" --scenarios "$scen" "${eargs[@]}" $opts ${SERVING_OPTS:-} \
        --json "$OUT/serving-$t-$name.json" 2>&1 | tee "$OUT/serving-$t-$name.log"
      note "serving $t $name ($scen; engine: $args; bench: $opts):"
      sed -n '/^target /,$p' "$OUT/serving-$t-$name.log" >>"$SUMMARY"
    done
  fi
  if want bench; then
    stamp "benchmark: backend, engine protocol, gateway"
    local vargs=() v
    for v in $BENCH_VARIANTS; do vargs+=(--variant "$v"); done
    [ "${BENCH_SKIP_GATEWAY:-0}" = 1 ] && vargs+=(--skip-gateway)
    timeout "$(left 420)" python3 tools/bench_gpu.py --bin "$BIN" --models "$SHM/llama3-8b-f16.gguf" "$SHM/llama3-8b-q4_k_m.gguf" \
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
        # shellcheck disable=SC2086
        timeout 75 ncu --clock-control none -k regex:"${NCU_KERNELS:-matvec_kernel|attn_}" -s "${NCU_SKIP:-1}" -c "${NCU_COUNT:-8}" --section SpeedOfLight \
          --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
          --section InstructionStats -f -o "$OUT/ncu-$t" \
          "$BIN/loom-gpu-bench" --model "$SHM/llama3-8b-$t.gguf" ${NCU_BENCH_ARGS:---decode-only --prompt 64 --gen 2} >"$OUT/ncu-$t.run.log" 2>&1
        timeout 30 ncu -i "$OUT/ncu-$t.ncu-rep" --page details >"$OUT/ncu-$t.txt" 2>&1
        grep -E "matvec1?_kernel|rmsnorm|attn_|flash_|qgemm|Duration|DRAM Throughput|Issued Warp|No Eligible|Achieved Occupancy|Executed Instructions  |SM Busy|Compute \(SM\)" \
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
# Everything but log and summary.txt goes in one archive, so that $OUT holds three files
# (some remote runners return only a few files).
( cd "$OUT" && ls | grep -vx -e log -e summary.txt -e logs.tar.xz >/tmp/gpu_check_files.txt &&
  [ -s /tmp/gpu_check_files.txt ] && tar cJf logs.tar.xz -T /tmp/gpu_check_files.txt &&
  xargs rm -rf </tmp/gpu_check_files.txt ) || true
