#!/usr/bin/env bash
# A rank that stops responding: rank 0 must end the job with the timeout message, not hang.
# Usage: stuck_rank_test.sh MPIEXEC COMMUNICATOR_TEST
set -uo pipefail
mpiexec=$1
binary=$2
start=$(date +%s)
out=$(timeout 90 "$mpiexec" -np 2 --oversubscribe "$binary" --stuck 2>&1)
rc=$?
elapsed=$(( $(date +%s) - start ))
echo "$out"
[[ $rc -ne 0 && $rc -ne 124 ]] || { echo "FAIL: exit $rc (124 = hung until killed)"; exit 1; }
grep -q "collective all_reduce(sum) on group 'test' (mpi) timed out: rank 0 of 2" <<<"$out" ||
  { echo "FAIL: no timeout message"; exit 1; }
echo "PASS: exit $rc after ${elapsed} s"
