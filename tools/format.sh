#!/usr/bin/env bash
# Formats loom's C++ and CUDA sources with clang-format and the repository's .clang-format.
# Usage: tools/format.sh          rewrite every .cpp/.hpp/.h/.cu/.cuh file git tracks or would
#                                 add (untracked, not ignored) in place
#        tools/format.sh --check  change nothing; list the files that differ, exit 1 if any
# Needs clang-format 14 (Debian 12's `clang-format`); other versions may format differently.
set -euo pipefail
cd "$(dirname "$0")/.."
# New files count before they are added: a new file once passed the check here and failed CI's.
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh')
if [ "${1:-}" = --check ]; then
  bad=()
  for f in "${files[@]}"; do
    clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if [ ${#bad[@]} -gt 0 ]; then
    printf 'format: not formatted (run tools/format.sh): %s\n' "${bad[@]}"
    exit 1
  fi
  echo "format: ${#files[@]} files formatted"
else
  clang-format -i "${files[@]}"
fi
