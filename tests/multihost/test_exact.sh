#!/usr/bin/env bash
# An integer-exact job across 4 emulated hosts, launched the way users
# launch: aggregators on h0 and h1, one worker beside the aggregator on h0
# (shm to it, tcp to the other: "mixed") and one worker on each of h2 and
# h3 (tcp). Every worker must be exact, join over the transports its
# placement implies, and get the local rank of its host.
#   test_exact.sh BUILD LAUNCH   (LAUNCH: env, torchrun or mpirun)
BUILD=$1 LAUNCH=$2
source "$(dirname "$0")/common.sh" 4 -- "$@"
export PATH=$BUILD/bin:$PATH
out=$("$MHRUN" --launch "$LAUNCH" -n 3 -a 2 --map 0,1,0,2,3 --timeout 120 \
  -e STRATA_LR=3 -e STRATA_LOG=debug -e STRATA_PARTITION_BYTES=4096 \
  -- "$BUILD/tests/strata-test-exact" --steps 4 2>&1) || fail "the job failed: $out"
expect_count 3 'worker [0-9]: 4 steps exact' "$out" "exact workers"
expect_count 1 'rank 2 of 5 joined as worker over mixed' "$out" "the worker beside an aggregator"
expect_count 2 'rank [34] of 5 joined as worker over tcp' "$out" "the workers alone on their hosts"
if [ "$LAUNCH" = env ]; then # the coordinator counts the local ranks
  expect_count 1 '^\[2 h0\].*welcomed: local rank 1, the job on several hosts$' "$out" "the second rank on h0"
  expect_count 1 '^\[3 h2\].*welcomed: local rank 0, the job on several hosts$' "$out" "the only rank on h2"
fi
echo "exact across 4 hosts under $LAUNCH: shm beside the aggregator, tcp across hosts"
