#!/usr/bin/env bash
# The engine over verbs (label verbs: run inside the soft-RoCE VM by
# softroce_verbs, through tests/softroce/verbs-test): exact BSP for a few
# shapes, SSP's bound on every pull, the sum, and a killed worker.
RUN=$1 EXACT=$2
source "$(dirname "$0")/common.sh"
# An emulated CPU, shared by every rank, on a host that may be busy: a rank
# went 16 s without a word (half of 30 s is a stall).
export STRATA_TRANSPORT=verbs STRATA_TIMEOUT_MS=60000
for shape in "1 1" "3 2" "4 3"; do
  job $shape -- --steps 3
done
job 3 2 STRATA_POLICY=ssp STRATA_STALENESS=1 -- \
  --steps 6 --check stale --staleness 1 --sleep
job 2 2 STRATA_OPTIMIZER=sum -- --steps 3 --check sum
# Joining takes the emulated CPU seconds, more on a busy host; the kill is
# seen at once whatever the timeout. The job needs both workers.
export STRATA_LR=2
STRATA_MIN_WORKERS=2 by_hand 2 1 "$EXACT" --steps 50 --die-at 2
expect_rank 2 137 ""
for r in 0 1; do
  expect_rank $r 3 "worker rank 2 .*disconnected (before|without) finalizing"
done
echo "the engine is exact over verbs"
