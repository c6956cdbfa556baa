#!/usr/bin/env bash
# clang-format every C++ file in the tree (in place), or check only with --check.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
mode=(-i)
if [[ "${1:-}" == "--check" ]]; then mode=(--dry-run --Werror); fi
git ls-files -co --exclude-standard '*.h' '*.cc' '*.cpp' '*.hpp' |
  while read -r f; do [[ -f "$f" ]] && printf '%s\n' "$f"; done |
  xargs -r clang-format "${mode[@]}"
