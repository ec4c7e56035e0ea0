#!/usr/bin/env bash
# The failures that must end in a clear error on every rank within
# STRATA_TIMEOUT_MS, never a hang: a layout mismatch, a wrong job secret,
# an unreachable coordinator, a worker killed in the middle of training.
RUN=$1 EXACT=$2
source "$(dirname "$0")/common.sh"
export STRATA_TIMEOUT_MS=3000 STRATA_LR=3 STRATA_TRANSPORT=tcp
limit=$((3 + 3 + 2)) # the timeout, and start-up on a busy machine

within $limit by_hand 3 2 "$EXACT" --mismatch
for r in 0 1 2 3 4; do
  expect_rank $r 3 "layout mismatch at tensor #2: rank 3 registered 'layer2.weight' fp32\[5001\], rank 2 registered 'layer2.weight' fp32\[5000\]"
done

SECRET_OF_RANK=([3]=not-the-secret)
within $limit by_hand 2 2 "$EXACT"
unset SECRET_OF_RANK
expect_rank 3 3 "cannot join the job: .* \(last error: authentication failed: .*STRATA_JOB_SECRET differs\)"
expect_rank 0 3 "1 of 4 ranks did not join .*\(ranks 3\)"
for r in 1 2; do expect_rank $r 3 "the job failed: 1 of 4 ranks did not join"; done

LDIR=$(mktemp -d)
rc=0
within $limit env STRATA_RANK=2 STRATA_SIZE=3 STRATA_COORD=127.0.0.1:9 \
  STRATA_JOB_SECRET=x "$EXACT" >"$LDIR/2.log" 2>&1 || rc=$?
echo $rc >"$LDIR/2.rc"
expect_rank 2 3 "cannot join the job: the coordinator at 127.0.0.1:9 did not accept us within STRATA_TIMEOUT_MS=3000"

within $limit by_hand 3 2 "$EXACT" --steps 50 --die-at 3
expect_rank 3 137 ""
for r in 0 1 2 4; do
  expect_rank $r 3 "worker rank 3 .*disconnected (before|without) finalizing"
done
echo "mismatch, wrong secret, unreachable coordinator and a killed worker all end in clear errors"
