#!/usr/bin/env bash
# A rank that stops responding: rank 0 must end the job with the timeout message, not hang, and
# name the rank that never arrived (its host, pid and last collective, from the progress
# records).
# Usage: stuck_rank_test.sh MPIEXEC COMMUNICATOR_TEST
set -uo pipefail
mpiexec=$1
binary=$2
[[ $(id -u) == 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
progress=$(mktemp -d)
trap 'rm -rf "$progress"' EXIT
start=$(date +%s)
out=$(timeout 90 "$mpiexec" -np 2 --oversubscribe "$binary" --stuck "$progress" 2>&1)
rc=$?
elapsed=$(( $(date +%s) - start ))
echo "$out"
[[ $rc -ne 0 && $rc -ne 124 ]] || { echo "FAIL: exit $rc (124 = hung until killed)"; exit 1; }
grep -q "collective all_reduce(sum) on group 'test' (mpi) timed out: rank 0 of 2 on $(hostname)" \
  <<<"$out" || { echo "FAIL: no timeout message"; exit 1; }
grep -q "this was collective #2 of group 'test'. Stuck: rank 1 on $(hostname) (pid [0-9]*) has not reached it: its last was #1 all_reduce(sum), left" \
  <<<"$out" || { echo "FAIL: the stuck rank is not named"; exit 1; }
echo "PASS: exit $rc after ${elapsed} s"
