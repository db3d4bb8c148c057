#!/usr/bin/env bash
# Configures and builds loom with CMake + Ninja.
# Usage: scripts/build.sh [BUILD_DIR] [extra cmake args...]   (default BUILD_DIR: build)
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-build}"
shift || true
jobs="${LOOM_JOBS:-$(nproc)}"
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="${LOOM_BUILD_TYPE:-Release}" "$@" >/dev/null
ninja -C "$dir" -j "$jobs"
