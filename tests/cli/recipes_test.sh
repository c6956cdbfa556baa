#!/usr/bin/env bash
# Every ready recipe in configs/recipes/ must load. Usage: recipes_test.sh FLYWHEEL SOURCE_DIR
# Runs `flywheel validate-config` on each configs/recipes/*.yaml, then `flywheel reward` on one
# record (validate-config checks reward names only; building the functions checks their params).
# Fails naming every file that does not pass, and when fewer than 6 recipes exist.
set -uo pipefail
flywheel=$1
src=$2
min_recipes=6
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

shopt -s nullglob
recipes=("$src"/configs/recipes/*.yaml)
failed=()
printf '%s\n' '{"completion": "3 + 4 = 7, so the answer is \\boxed{7}.", "answer": "7"}' \
  >"$work/completion.jsonl"

for f in "${recipes[@]}"; do
  name=${f#"$src"/}
  if ! out=$("$flywheel" validate-config "$f" 2>&1); then
    echo "FAIL: $name: flywheel validate-config failed:" >&2
    echo "$out" >&2
    failed+=("$name")
    continue
  fi
  if ! out=$("$flywheel" reward "$f" -i "$work/completion.jsonl" -o "$work/scores.jsonl" 2>&1); then
    echo "FAIL: $name: its reward functions do not build or score:" >&2
    echo "$out" >&2
    failed+=("$name")
    continue
  fi
  echo "ok: $name"
done

if (( ${#recipes[@]} < min_recipes )); then
  echo "FAIL: ${#recipes[@]} recipe(s) in configs/recipes/, expected at least $min_recipes" >&2
  exit 1
fi
if (( ${#failed[@]} > 0 )); then
  echo "FAIL: ${#failed[@]} of ${#recipes[@]} recipe(s) invalid: ${failed[*]}" >&2
  exit 1
fi
echo "all ${#recipes[@]} recipes valid"
