#!/usr/bin/env bash
# The main job: install dependencies, build, and start loom-gateway with the CPU engine
# on a model. Usage:
#   scripts/run.sh                         # default model (see below), http://127.0.0.1:8080
#   scripts/run.sh --model /path/to.gguf   # any GGUF file; other flags go to loom-gateway
# Default model: models/stories260K.gguf, downloaded once from Hugging Face and checked
# against its sha256; without network, a small random-weight model made by
# loom-make-model (its output is gibberish, but every endpoint works).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh build

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
  mkdir -p models
  model=models/stories260K.gguf
  sha=270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d
  if [ ! -f "$model" ]; then
    for url in https://huggingface.co/ggml-org/models/resolve/main/tinyllamas/stories260K.gguf \
               https://huggingface.co/ggml-org/models-moved/resolve/main/tinyllamas/stories260K.gguf; do
      if curl -fsSL --max-time 60 -o "$model.part" "$url" 2>/dev/null &&
         echo "$sha  $model.part" | sha256sum -c --quiet 2>/dev/null; then
        mv "$model.part" "$model"
        echo "run: downloaded $model from $url"
        break
      fi
      rm -f "$model.part"
    done
  fi
  if [ ! -f "$model" ]; then
    model=models/loom-tiny-random.gguf
    if [ ! -f "$model" ]; then
      echo "run: no network: making a random-weight model with loom-make-model (its text is gibberish)"
      build/bin/loom-make-model --preset tiny --out "$model"
    fi
  fi
fi
echo "run: starting loom-gateway on $model (Ctrl-C stops it)"
exec build/bin/loom-gateway --model "$model" "${args[@]}"
