#!/usr/bin/env bash
# Installs loom's build and test dependencies from Debian 12 packages.
# Usage: scripts/install-deps.sh            (needs root, or sudo)
set -euo pipefail
PKGS=(
  build-essential cmake ninja-build ccache pkg-config
  libboost-dev libboost-program-options-dev   # Beast/Asio/Process, CLI parsing
  rapidjson-dev libpcre2-dev                   # JSON, Unicode regexes
  libicu-dev                                   # Unicode decomposition (WordPiece accents)
  catch2                                       # unit tests (v2)
  python3 python3-jinja2                       # e2e tests; reference template renderer
  curl ca-certificates                         # fetching a bigger model (README)
)
if [ "${LOOM_WITH_TEST_TOOLS:-0}" = 1 ]; then
  PKGS+=(clang libclang-rt-14-dev)             # fuzzing, sanitizers
  PKGS+=(clang-format)                         # tools/format.sh --check (clang-format 14)
  PKGS+=(hipcc libamdhip64-dev)                # compiling loom-engine-hip
  PKGS+=(python3-prometheus-client)            # a real Prometheus parser for /metrics (tests/e2e)
  PKGS+=(chromium)                             # the playground page in a real browser (tests/e2e)
  # OpenAI client tests (tests/openai). A Node.js that is already there counts: e.g.
  # NodeSource's nodejs package bundles npm and conflicts with Debian's npm package.
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    PKGS+=(nodejs npm)
  fi
fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then echo "install-deps: all packages present"; exit 0; fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
