#!/usr/bin/env bash
# The main job: install dependencies, build, and start loom-gateway with the CPU engine
# on a model. Usage:
#   scripts/run.sh                         # default model (see below), http://127.0.0.1:8080
#   scripts/run.sh --model /path/to.gguf   # any GGUF file; other flags go to loom-gateway
# Default model: models-default/stories260K.gguf, shipped in the repository (1.2 MB,
# MIT; see models-default/README.md) and checked against its sha256, so that a fresh
# clone serves real English text without network access.
# LOOM_BIN_DIR=<folder>: use the binaries there instead of installing and building
# (tests/e2e/test_run_script.py runs this script that way in a fresh copy of the tree).
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${LOOM_BIN_DIR:-}"
if [ -z "$bin" ]; then
  scripts/install-deps.sh
  scripts/build.sh build
  bin=build/bin
fi

model=""
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --model=*) model="${1#--model=}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done

if [ -z "$model" ]; then
  model=models-default/stories260K.gguf
  if ! (cd models-default && sha256sum -c --quiet SHA256SUMS); then
    echo "run: $model does not match models-default/SHA256SUMS (a partial checkout?)" >&2
    exit 1
  fi
fi
echo "run: starting loom-gateway on $model (Ctrl-C stops it)"
exec "$bin/loom-gateway" --model "$model" "${args[@]}"
