#!/usr/bin/env bash
# Runs every test: installs dependencies, builds (loom-engine-gpuemu, the GPU kernels on
# the CPU emulator, always; loom-engine-cuda too when nvcc is present), runs CTest; builds again with AddressSanitizer +
# UndefinedBehaviorSanitizer and runs CTest once more; compiles loom-engine-hip with
# hipcc; fuzzes the GGUF reader for a bounded time.
# The tests read the shared models at ../shared (beside the repository), or at
# $LOOM_SHARED_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
LOOM_WITH_TEST_TOOLS=1 scripts/install-deps.sh
shared="${LOOM_SHARED_DIR:-$(cd .. && pwd)/shared}"
jobs="${LOOM_JOBS:-$(nproc)}"

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

echo "== build (ASan + UBSan) =="
scripts/build.sh build-asan -DLOOM_SANITIZE=ON -DLOOM_SHARED_DIR="$shared" -DCMAKE_BUILD_TYPE=RelWithDebInfo
echo "== tests (ASan + UBSan) =="
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs"
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
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_FUZZ=ON \
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
# ---- end fuzz --------------------------------------------------------------------

echo "== all tests passed =="
