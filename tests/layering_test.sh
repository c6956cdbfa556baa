#!/usr/bin/env bash
# The layering of docs/architecture.md, checked on the sources and on the built libraries:
#  1. every #include "flywheel/<component>/..." of a folder names a component that folder may
#     use (lower layers and itself); no component reaches another one's private headers;
#  2. the libraries link what their layer allows: the buffer core and core link neither
#     LibTorch nor gRPC, the engine links no gRPC, rollout does not link trainer, the trainer
#     links neither rollout nor gRPC, algos and rewards do not link each other.
# Usage: layering_test.sh SOURCE_DIR LIB_DIR...  (the directories holding the built libraries)
set -uo pipefail
src=$1
shift
failures=0
fail() {
  echo "layering: $*" >&2
  failures=$((failures + 1))
}

# allowed <folder> <components...>: the components the folder's files may include.
check_includes() {
  local name=$1 allowed=$2
  shift 2
  local file comp
  for file in "$@"; do
    while read -r comp; do
      [[ " $allowed " == *" $comp "* ]] ||
        fail "$name: ${file#"$src"/} includes flywheel/$comp/ (allowed: $allowed)"
    done < <(grep -ohE '^#include "flywheel/[a-z0-9_]+/' "$file" | sed -E 's|#include "flywheel/||; s|/$||' |
               sort -u)
  done
}
files() { find "$@" -maxdepth 1 -type f \( -name '*.h' -o -name '*.cc' -o -name '*.inc' \) 2>/dev/null; }

check_includes core "core" $(files "$src/src/core" "$src/src/core/options" \
  "$src/include/flywheel/core" "$src/include/flywheel/core/options")
check_includes comm "core comm" $(files "$src/src/comm" "$src/include/flywheel/comm")
check_includes model "core model" $(files "$src/src/model" "$src/src/model/cpu" "$src/src/model/tokenizer" \
  "$src/include/flywheel/model" "$src/include/flywheel/model/cpu" "$src/include/flywheel/model/tokenizer")
check_includes rewards "core rewards" $(files "$src/src/rewards" "$src/src/rewards/math" \
  "$src/src/rewards/sandbox" | grep -v '/rewards/model/') \
  $(files "$src/include/flywheel/rewards")
check_includes reward_model "core model rewards" $(files "$src/src/rewards/model") \
  $(files "$src/include/flywheel/rewards/model")
check_includes remote_reward "core rewards v1" $(files "$src/src/rewards/remote") \
  $(files "$src/include/flywheel/rewards/remote")
check_includes algos "core algos" $(files "$src/src/algos" "$src/include/flywheel/algos")
check_includes buffer "core buffer" $(files "$src/src/buffer") \
  $(files "$src/include/flywheel/buffer")
check_includes buffer_service "core buffer v1" $(files "$src/src/buffer/service") \
  $(files "$src/include/flywheel/buffer/service")
check_includes rollout "core model rollout" $(files "$src/src/rollout" "$src/src/rollout/environments" \
  "$src/include/flywheel/rollout")
check_includes remote_environment "core model rollout v1" $(files "$src/src/rollout/remote")
check_includes rollout_agent "core model rollout launcher" $(files "$src/src/rollout/agent" \
  "$src/include/flywheel/rollout/agent")
check_includes rollout_judge "core model rollout rewards" $(files "$src/src/rollout/judge" \
  "$src/include/flywheel/rollout/judge")
check_includes worker "core model rollout buffer comm rewards v1" \
  $(files "$src/src/rollout/worker" "$src/include/flywheel/rollout/worker")
check_includes trainer "core comm model algos buffer trainer" \
  $(files "$src/src/trainer" "$src/include/flywheel/trainer")
check_includes eval "core comm model rollout rewards buffer algos trainer eval" \
  $(files "$src/src/eval" "$src/include/flywheel/eval")
check_includes jobs "core comm model rollout rewards buffer algos trainer eval launcher jobs" \
  $(files "$src/src/jobs" "$src/include/flywheel/jobs")
check_includes launcher "core launcher" $(files "$src/src/launcher" "$src/include/flywheel/launcher")

# No library reaches into another component's folder for headers.
while IFS=: read -r file _ text; do
  own=${file#"$src"/src/}
  own=${own%%/*}
  reached=$(sed -nE 's|.*\$\{PROJECT_SOURCE_DIR\}/src/([a-z0-9_]+).*|\1|p' <<<"$text")
  [[ -z "$reached" || "$reached" == "$own" ]] ||
    fail "${file#"$src"/}: adds src/$reached (another component's private headers) to its include path"
done < <(grep -rn 'target_include_directories' "$src/src" --include=CMakeLists.txt)

# What each built library links (readelf's NEEDED entries).
lib_dirs=("$@")
# forbid <library> <pattern> <why>
forbid() {
  local lib got
  lib=$(find "${lib_dirs[@]}" -maxdepth 1 -name "lib$1.so" 2>/dev/null | head -1)
  if [[ -z "$lib" ]]; then
    fail "lib$1.so not found in ${lib_dirs[*]}"
    return
  fi
  got=$(readelf -d "$lib" | sed -nE 's/.*Shared library: \[(.*)\]/\1/p' | grep -E "$2" | tr '\n' ' ')
  [[ -z "$got" ]] || fail "lib$1.so links $got($3)"
}
forbid flywheel_core 'torch|c10|grpc|protobuf|flywheel_' "core is the bottom layer"
forbid flywheel_buffer 'torch|c10|grpc' "the buffer core links neither LibTorch nor gRPC"
forbid flywheel_rollout 'grpc|flywheel_(trainer|buffer|rollout_worker)' "the engine links no gRPC"
forbid flywheel_rollout_worker 'flywheel_trainer' "rollout does not link trainer"
forbid flywheel_rollout_agent 'grpc|flywheel_(trainer|buffer|rollout_worker)' \
  "agents: the engine and an HTTP server, no gRPC"
forbid flywheel_trainer 'grpc|flywheel_(rollout|buffer_service)' "no trainer -> rollout arrow"
forbid flywheel_algos 'flywheel_rewards' "algos and rewards are independent"
forbid flywheel_rewards 'flywheel_algos' "algos and rewards are independent"
forbid flywheel_launcher 'grpc|flywheel_(model|rollout|trainer|buffer)' "the launcher runs processes"

if ((failures > 0)); then
  echo "layering: $failures violation(s)" >&2
  exit 1
fi
echo "layering: every include and every link follows docs/architecture.md"
