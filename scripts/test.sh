#!/usr/bin/env bash
# Bootstrap (packages + build), then run every test with ctest.
# Tests labelled `gpu` run only when a GPU is present (nvidia-smi lists one).
# Extra arguments go to ctest, e.g. scripts/test.sh -L unit, scripts/test.sh -R Config.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
scripts/bootstrap.sh

# Multi-process tests: OpenMPI refuses root without these; one thread per process.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

label_args=()
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "test: GPU found; running gpu-labelled tests too"
else
  echo "test: no GPU; skipping gpu-labelled tests"
  label_args=(-LE gpu)
fi

build_dir=${FLYWHEEL_BUILD_DIR:-build}
cd "$build_dir"
ctest --output-on-failure --timeout 900 -j "$(nproc)" "${label_args[@]}" "$@"
