#!/usr/bin/env bash
# Same prompt ids -> flywheel generate and llama.cpp (tools/greedy_ids), greedy, compare ids.
#   ./check_greedy.sh [N_NEW=32] [dtype...]   (default dtypes: float32 bfloat16)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "${LLAMA_WORK:-$HOME/llamacpp}"  # setup.sh's work directory
N=${1:-32}; shift || true
DTYPES=${*:-float32 bfloat16}
WORK=${LLAMA_WORK:-$HOME/llamacpp}
FW=${FLYWHEEL:-$REPO/build/flywheel}
PROMPT="1 523 9871 42 17 30001 2048 777 12345 6 300 15000 88 4096 25000 999"
mkdir -p check
echo "{\"prompt_ids\": [$(echo $PROMPT | tr ' ' ',')]}" > check/in.jsonl
for dt in $DTYPES; do
  case $dt in float32) dir=model-f32;; bfloat16) dir=model-bf16;; esac
  $FW generate --model $dir --dtype $dt --threads 1 -i check/in.jsonl -o check/fw-$dt.jsonl \
      --max-new-tokens $N --temperature 0 --ignore-eos 2> check/fw-$dt.err
  tools/greedy_ids $dir.gguf $N 1 $PROMPT > check/ll-$dt.json 2> check/ll-$dt.err
  python3 - "$dt" check/fw-$dt.jsonl check/ll-$dt.json check/ll-$dt.err <<'PY'
import json, sys
dt, fw, ll, err = sys.argv[1:]
a = json.loads(open(fw).readline())["completions"][0]["ids"]
b = json.loads(open(ll).read())["ids"]
margins = [float(l.split("margin")[1]) for l in open(err) if l.startswith("step ")]
same = sum(x == y for x, y in zip(a, b))
first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
print(f"{dt}: {same}/{len(a)} ids equal; first difference at step {first}; "
      f"llama.cpp top1-top2 margin min {min(margins):.4g} (step {margins.index(min(margins))})")
if first is not None:
    print("  flywheel :", a); print("  llama.cpp:", b)
PY
done
