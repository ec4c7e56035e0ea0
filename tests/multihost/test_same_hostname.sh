#!/usr/bin/env bash
# Hosts that share a hostname and a boot id but not a network namespace
# (containers of one node, each with its own network): shm reaches only a
# peer in the same namespace, so a worker must pick shm for the aggregator
# beside it and tcp for the others, and local ranks count per namespace.
# strata-bench-pushpull under mpirun must not take such hosts for one.
#   test_same_hostname.sh BUILD
BUILD=$1
source "$(dirname "$0")/common.sh" 3 --hostname node -- "$@"
export PATH=$BUILD/bin:$PATH
out=$("$MHRUN" -n 2 -a 2 --map 0,1,0,2 --timeout 120 -e STRATA_LR=2 \
  -e STRATA_LOG=debug -- "$BUILD/tests/strata-test-exact" --steps 3 2>&1) ||
  fail "the job failed: $out"
expect_count 2 'worker [0-9]: 3 steps exact' "$out" "exact workers"
expect_count 1 '^\[2 h0\].*joined as worker over mixed' "$out" "the worker beside aggregator 0"
expect_count 1 '^\[3 h2\].*joined as worker over tcp' "$out" "the worker alone on h2"
expect_count 1 '^\[2 h0\].*welcomed: local rank 1, the job on several hosts$' "$out" "the second rank on h0"
if command -v mpirun >/dev/null; then
  out=$("$MHRUN" --launch mpirun --spmd -n 2 -a 1 --map 0,1,2 --timeout 120 \
    -- "$BUILD/bin/strata-bench-pushpull" --min-bytes 64K --max-bytes 128K \
    --iters 3 --blocks 1 2>&1) || fail "pushpull under mpirun: $out"
  expect_count 2 '^\[mpirun h0\] +[0-9]+ +2 +1 +tcp ' "$out" "pushpull rows over tcp"
fi
echo "one hostname, three network namespaces: shm only within one, tcp across"
