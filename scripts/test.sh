#!/usr/bin/env bash
# Runs every test (CI runs this, .ci/run): installs dependencies, then, in this order:
#  0. the C++/CUDA sources against .clang-format (tools/format.sh --check; seconds);
#  1. Release build (-DLOOM_WERROR=ON; loom-engine-gpuemu, the GPU kernels on the CPU emulator,
#     always; loom-engine-cuda too when nvcc is present) and the whole CTest suite;
#  2. AddressSanitizer + UndefinedBehaviorSanitizer build (-O1 -g1: line tables are all a
#     report needs) and the whole CTest suite again. The e2e tests know it (LOOM_SANITIZED=1)
#     and leave to the Release stage only: the emulator's wide models and its f16/flag variants
#     (minutes under ASan), the slow-reader RSS bound (ASan's quarantine) and the EMFILE case
#     (UBSan's vptr check needs a free descriptor: tests/e2e/test_chaos_gateway.py);
#  3. ThreadSanitizer build of loom-gateway, loom-engine-cpu and the threaded unit tests, and
#     its threaded subset (below); LOOM_TSAN=0 skips it (a fast local loop; CI runs it);
#  4. loom-engine-hip compiled with hipcc (no AMD GPU here);
#  5. libFuzzer for a bounded time: the GGUF reader (LOOM_FUZZ_SECONDS, 60 s), then the
#     protocol line parser, the Jinja lexer/parser and the OpenAI request parser
#     (LOOM_FUZZ_EACH_SECONDS, 20 s each; LOOM_FUZZ_TARGETS picks them, "" skips them).
# CI time (2 cores, no GPU, no ccache) is budgeted at about 45 minutes; the slowest tests are
# started first (CTest COST, tests/CMakeLists.txt) so they overlap the rest.
# The tests read the shared models at ../shared (beside the repository), or at
# $LOOM_SHARED_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
LOOM_WITH_TEST_TOOLS=1 scripts/install-deps.sh
shared="${LOOM_SHARED_DIR:-$(cd .. && pwd)/shared}"
jobs="${LOOM_JOBS:-$(nproc)}"
echo "== format (clang-format) =="
tools/format.sh --check

cuda=()
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda=(-DLOOM_CUDA=ON)  # compiles loom-engine-cuda for sm_90a
else
  echo "test: no nvcc found: loom-engine-cuda is not compiled"
fi
echo "== build (Release) =="
scripts/build.sh build -DLOOM_WERROR=ON -DLOOM_SHARED_DIR="$shared" "${cuda[@]}"
echo "== tests (Release) =="
ctest --test-dir build --output-on-failure -j "$jobs"

# Sanitizer builds (ASan, TSan, fuzz): LOOM_SANITIZER_OPT, default -O1 -g1 (line tables give
# every report its file:line; ASan's documentation asks for -O1 or more) instead of
# RelWithDebInfo's -O2 -g:
# a Catch2 test file (gateway_serving) compiles in 43% less CPU time, a gateway file
# (engine_client) in 50% less (user+sys, GCC 12, ASan + UBSan, 2026-12-02).
san_opt="${LOOM_SANITIZER_OPT:--O1 -g1}"
san_build=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_C_FLAGS_RELWITHDEBINFO=$san_opt -DNDEBUG"
           "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$san_opt -DNDEBUG")
echo "== build (ASan + UBSan) =="
scripts/build.sh build-asan -DLOOM_SANITIZE=ON -DLOOM_SHARED_DIR="$shared" "${san_build[@]}"
echo "== tests (ASan + UBSan) =="
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs"
# ---- ThreadSanitizer (LOOM_TSAN=0 skips it) ----------------------------------------
# The engine has a reader thread, a scheduler and a thread pool; the gateway one
# io_context thread that forks the engine. The subset: the unit tests of the protocol,
# sampler and gateway core, the CPU backend's "1 and 3 threads" case of forward_f64, and the e2e tests that drive
# those threads: engine_protocol (PING answered mid-request, cancel, many requests in
# flight), supervision, chaos_engine's busy-engine PING and fake-engine cases,
# chaos_load's disconnect storm and chaos_gateway's shutdown cases.
if [ "${LOOM_TSAN:-1}" != 0 ]; then
  echo "== build (ThreadSanitizer): loom-gateway, loom-engine-cpu, threaded unit tests =="
  tsan_units=(test_protocol test_sampler test_gateway_json_input test_gateway_request_parser test_gateway_serving
              test_gateway_text_assembler test_forward_f64)
  cmake -S . -B build-tsan -G Ninja "${san_build[@]}" -DLOOM_TSAN=ON -DLOOM_SHARED_DIR="$shared" >/dev/null
  ninja -C build-tsan -j "$jobs" loom-gateway loom-engine-cpu "${tsan_units[@]}"
  echo "== tests (ThreadSanitizer) =="
  # GCC 12's TSan cannot map its shadow memory under high mmap randomisation
  # (vm.mmap_rnd_bits > 28 on newer kernels): run without ASLR where setarch allows it.
  norand=()
  if setarch "$(uname -m)" -R true 2>/dev/null; then norand=(setarch "$(uname -m)" -R); fi
  export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
  for t in "${tsan_units[@]}"; do
    if [ "$t" = test_forward_f64 ]; then "${norand[@]}" "build-tsan/bin/$t" "threads do not change the result*"
    else "${norand[@]}" "build-tsan/bin/$t"; fi
  done
  tsan_e2e() { LOOM_BIN=build-tsan/bin LOOM_SHARED="$shared" PYTHONDONTWRITEBYTECODE=1 "${norand[@]}" python3 "$@"; }
  tsan_e2e tests/e2e/test_engine_protocol.py
  tsan_e2e tests/e2e/test_supervision.py
  tsan_e2e tests/e2e/test_chaos_engine.py BusyEngineAnswersPing FakeEngines
  tsan_e2e tests/e2e/test_chaos_load.py Load.test_disconnect_storm_leaves_nothing_behind
  tsan_e2e tests/e2e/test_chaos_gateway.py Shutdown
  unset TSAN_OPTIONS
else
  echo "test: ThreadSanitizer stage skipped (LOOM_TSAN=0)"
fi
# ---- end ThreadSanitizer -----------------------------------------------------------

echo "== build loom-engine-hip (hipcc, ${LOOM_HIP_ARCH:-gfx90a}; compile only: no AMD GPU here) =="
cmake -S . -B build-hip -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_HIP=ON -DLOOM_BUILD_TESTS=OFF -DLOOM_WERROR=ON \
  -DLOOM_HIP_ARCH="${LOOM_HIP_ARCH:-gfx90a}" >/dev/null
ninja -C build-hip -j "$jobs" loom-engine-hip

# ---- fuzz ------------------------------------------------------------------------
# The GGUF reader (and hparams, vocabulary, tokenizers, tensor binding on files that
# parse) under libFuzzer + ASan + UBSan for a bounded time. Seeds: the real files in
# shared/models (linked, not copied); new inputs go to build-fuzz/corpus.
fuzz_seconds="${LOOM_FUZZ_SECONDS:-60}"
echo "== fuzz: GGUF reader, ${fuzz_seconds} s (libFuzzer) =="
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja "${san_build[@]}" -DLOOM_FUZZ=ON \
  -DLOOM_SHARED_DIR="$shared" >/dev/null
ninja -C build-fuzz -j "$jobs" loom-fuzz-gguf
mkdir -p build-fuzz/corpus build-fuzz/seeds
for f in stories260K.gguf TinyStories-656K-Q8_0.gguf TinyStories-656K-Q3_K_M.gguf llama-2-tiny-random.gguf \
         legacy/tinyllamas-stories-260k-f32.gguf legacy/tinyllamas-stories-260k-q8_0.gguf \
         vocab/ggml-vocab-bert-bge.gguf vocab/ggml-vocab-gpt-2.gguf vocab/ggml-vocab-llama-spm.gguf; do
  ln -sf "$shared/models/$f" "build-fuzz/seeds/$(basename "$f")"
done
build-fuzz/bin/loom-fuzz-gguf -max_total_time="$fuzz_seconds" -max_len=1800000 -rss_limit_mb=2048 -timeout=30 \
  -dict=tests/fuzz/gguf.dict -print_final_stats=1 build-fuzz/corpus build-fuzz/seeds
# The engine protocol's line parser, the OpenAI request parser (with a chat template)
# and the Jinja lexer and parser, each for a bounded time. Seeds: tests/fuzz/seeds and
# the chat templates of shared/models/templates (linked).
# LOOM_FUZZ_TARGETS picks them (default all three; each builds its libraries with clang's
# ASan + UBSan: protocol 1 file, jinja 15, openai the gateway core and tokenizers too).
fuzz_each="${LOOM_FUZZ_EACH_SECONDS:-20}"
read -r -a fuzz_targets <<< "${LOOM_FUZZ_TARGETS-protocol jinja openai}"
[ "${#fuzz_targets[@]}" -gt 0 ] && ninja -C build-fuzz -j "$jobs" "${fuzz_targets[@]/#/loom-fuzz-}"
mkdir -p build-fuzz/seeds-jinja
for f in "$shared"/models/templates/*.jinja; do ln -sf "$f" build-fuzz/seeds-jinja/; done
for t in "${fuzz_targets[@]}"; do
  echo "== fuzz: $t, ${fuzz_each} s (libFuzzer) =="
  seeds=tests/fuzz/seeds/$t
  [ "$t" = jinja ] && seeds=build-fuzz/seeds-jinja
  mkdir -p "build-fuzz/corpus-$t"
  build-fuzz/bin/loom-fuzz-$t -max_total_time="$fuzz_each" -rss_limit_mb=2048 -timeout=10 \
    -dict="tests/fuzz/$t.dict" -print_final_stats=1 "build-fuzz/corpus-$t" "$seeds"
done
# ---- end fuzz --------------------------------------------------------------------

echo "== all tests passed =="
