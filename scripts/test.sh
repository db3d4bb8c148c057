#!/usr/bin/env bash
# Runs every test: installs dependencies, builds, runs CTest; then builds again with
# AddressSanitizer + UndefinedBehaviorSanitizer and runs CTest once more.
# The tests read the shared models at ../shared (beside the repository), or at
# $LOOM_SHARED_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
LOOM_WITH_TEST_TOOLS=1 scripts/install-deps.sh
shared="${LOOM_SHARED_DIR:-$(cd .. && pwd)/shared}"
jobs="${LOOM_JOBS:-$(nproc)}"

echo "== build (Release) =="
scripts/build.sh build -DLOOM_SHARED_DIR="$shared"
echo "== tests (Release) =="
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== build (ASan + UBSan) =="
scripts/build.sh build-asan -DLOOM_SANITIZE=ON -DLOOM_SHARED_DIR="$shared" -DCMAKE_BUILD_TYPE=RelWithDebInfo
echo "== tests (ASan + UBSan) =="
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs"
echo "== all tests passed =="
