#!/usr/bin/env bash
# Bootstrap (packages + build), then run the quickstart job. Today the job checks the toolchain
# and the quickstart config; training arrives with the end-to-end issue.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
scripts/bootstrap.sh
build_dir=${FLYWHEEL_BUILD_DIR:-build}
"$build_dir/flywheel" version
"$build_dir/flywheel" validate-config configs/quickstart.yaml
