#!/usr/bin/env bash
# A lost aggregator's shard taken over under a policy beyond bsp
# (test_protect.sh has bsp): ssp (s = 2), asp, or gssp (manual groups: two
# groups whose clocks run apart, never regrouped). An aggregator SIGKILLed
# at a random, seeded moment, its shard rebuilt at the protected clock P
# and resumed by rank 0 at R, every worker exact after every step
# (exact.c --takeover --check stale: see its header for what exact means
# there). Under esync and fedavg (rounds.c, ROUNDS) a round is the clock:
# the lost shard misses the mean deltas of rounds P..R-1 once the taker
# served it, every other element none (rounds.c --takeover).
RUN=$1 EXACT=$2 POLICY=$3 ROUNDS=${4:-}
SEED=${STRATA_TEST_SEED:-} # common.sh unsets every STRATA_ variable
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/takeover.sh"
export STRATA_TRANSPORT=tcp STRATA_LOG=info
: "$RUN" # taken() starts every rank by hand

SEED=${SEED:-$((10#$(date +%N) % 100000))}
RANDOM=$SEED
echo "seed $SEED (STRATA_TEST_SEED=$SEED runs the same kills again)"

case $POLICY in
ssp) taken 3 3 1 STRATA_POLICY=ssp STRATA_STALENESS=2 -- --check stale --staleness 2 ;;
asp) taken 3 3 1 STRATA_POLICY=asp -- --check stale --staleness inf ;;
gssp)
  # The groups' clocks run apart, at most 4 (the inter-group bound): with
  # none, the lone worker of group 1 could end its 400 steps before the
  # first protected clock was agreed and the kill came (seen at load 35).
  taken 3 3 1 STRATA_POLICY=gssp STRATA_GROUPING=manual:0,0,1 \
    STRATA_INTER_STALENESS=4 -- --check stale --staleness 4
  ;;
esync | fedavg)
  # 3 workers (the mean of distinct deltas is an integer), local steps of
  # 1, 4 and 9 ms: 200 rounds take 2 s and more.
  TAKEN_ROUNDS=200 taken 3 3 1 STRATA_POLICY="$POLICY" \
    STRATA_FEDAVG_STEPS=1 -- --check distinct
  ;;
sum)
  # Nothing is protected under STRATA_OPTIMIZER=sum (docs/engine.md says
  # why no shard is taken over): a lost aggregator ends the job, and every
  # rank says why.
  start_ranks 3 3 env STRATA_OPTIMIZER=sum STRATA_PROTECT_EVERY=2 \
    STRATA_TIMEOUT_MS=20000 "$EXACT" --steps 1000000 --sleep --check sum
  wait_log 0 "layout of .* accepted" 60
  kill -KILL "${PIDS[2]}"
  within 90 wait_ranks
  expect_rank 2 137 ""
  why="aggregator rank 2 .*STRATA_OPTIMIZER=sum: nothing is protected"
  expect_rank 0 3 "$why"
  for r in 3 4 5; do expect_rank $r 3 "the job failed: .*$why"; done
  echo "under STRATA_OPTIMIZER=sum a lost aggregator ends the job, named"
  exit 0
  ;;
*) fail "no takeover case for policy '$POLICY'" ;;
esac
echo "the takeover under $POLICY: every worker exact"
