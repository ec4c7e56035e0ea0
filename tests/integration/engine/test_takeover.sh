#!/usr/bin/env bash
# A lost aggregator's shard taken over under each policy that allows it
# beyond bsp (test_protect.sh has bsp): an aggregator SIGKILLed at a random,
# seeded moment, its shard rebuilt at the protected clock P and resumed by
# rank 0 at R, every worker exact after every step (exact.c --takeover: see
# its header for what exact means under ssp and asp).
RUN=$1 EXACT=$2
SEED=${STRATA_TEST_SEED:-} # common.sh unsets every STRATA_ variable
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/takeover.sh"
export STRATA_TRANSPORT=tcp STRATA_LOG=info
: "$RUN" # taken() starts every rank by hand

SEED=${SEED:-$((10#$(date +%N) % 100000))}
RANDOM=$SEED
echo "seed $SEED (STRATA_TEST_SEED=$SEED runs the same kills again)"

echo "-- ssp, staleness 2: own updates exact, the others' within the bound"
taken 3 3 1 STRATA_POLICY=ssp STRATA_STALENESS=2 -- --check stale --staleness 2
echo "-- asp: own updates exact"
taken 3 3 1 STRATA_POLICY=asp -- --check stale --staleness inf
echo "the takeover under ssp and asp: every worker exact"
