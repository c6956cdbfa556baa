#!/usr/bin/env bash
# A learner job killed with SIGKILL while writing a checkpoint resumes from the previous complete
# one. Usage: checkpoint_crash_test.sh MPIEXEC CHECKPOINT_TEST
set -uo pipefail
mpiexec=$1
binary=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
timeout 120 "$mpiexec" -np 2 --oversubscribe "$binary" --crash-during-save "$dir" > "$dir/crash.log" 2>&1
rc=$?
[[ $rc -ne 0 && $rc -ne 124 ]] || { cat "$dir/crash.log"; echo "FAIL: the save was not killed (exit $rc)"; exit 1; }
[[ -d "$dir/step_1" && -f "$dir/step_1/COMPLETE" ]] || { echo "FAIL: no complete step_1"; exit 1; }
[[ ! -e "$dir/step_2/COMPLETE" ]] || { echo "FAIL: step_2 completed although killed"; exit 1; }
timeout 120 "$mpiexec" -np 2 --oversubscribe "$binary" --resume-after-crash "$dir" || { echo "FAIL: resume"; exit 1; }
[[ -f "$dir/step_2/COMPLETE" ]] || { echo "FAIL: step_2 not saved after resuming"; exit 1; }
echo "PASS: killed during the save (exit $rc), resumed from step_1"
