#!/usr/bin/env bash
# STRATA_PROTECT_EVERY: every K clocks each aggregator's shard (model and
# optimizer state) is cut into pieces whose Reed-Solomon parity the other
# aggregators hold in memory, sealed with a CRC32C; training stays exact,
# and the coordinator learns the clock every shard is protected at.
# A parity fragment corrupted while held (a bit flipped by
# STRATA_PROTECT_FLIP) is named by its CRC32C and not used. A lost
# aggregator's shard is rebuilt by the survivors from the fragments of the
# protected clock, exactly, and a survivor takes it over: every worker ends
# exact, the lost shard without the clocks after its protected one. A loss
# before any clock was protected, or a second loss, fails naming the
# aggregator. A parity count the aggregators cannot hold is a
# clear error.
RUN=$1 EXACT=$2
SEED=${STRATA_TEST_SEED:-} # common.sh unsets every STRATA_ variable
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/takeover.sh"
export STRATA_TRANSPORT=tcp STRATA_LOG=info

# pjob W S ENV... -- ARGS: a job of W workers and S aggregators, exact.
pjob() {
  local w=$1 s=$2 envs=()
  shift 2
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  OUT=$(env STRATA_LR="$w" "${envs[@]}" "$RUN" -n "$w" -a "$s" -- "$EXACT" "$@" 2>&1) ||
    fail "protected job ${envs[*]} $*: $OUT"
  [ "$(grep -c 'steps exact' <<<"$OUT")" -eq "$w" ] ||
    fail "not every worker reported exact results (${envs[*]} $*): $OUT"
}
# sealed S M: every one of the S aggregators holds M parity fragments.
sealed() {
  local n
  n=$(grep -cE "shard [0-9]+: holds parity fragment [0-9]+ of stripe [0-9]+, first sealed at clock [0-9]+" <<<"$OUT")
  [ "$n" -eq "$1" ] || fail "$1 aggregators should each say they hold parity, $n did: $OUT"
}

echo "-- 3 aggregators, 1 parity fragment, every 2 clocks"
pjob 2 3 STRATA_PROTECT_EVERY=2 -- --steps 8
sealed 3
grep -q "protected every 2 clocks by 1 parity fragments across 3 aggregators" <<<"$OUT" ||
  fail "no word of the protection: $OUT"
# Geometry (engine/protect.h): aggregator 1 holds parity fragment k = 2 of
# stripe 2.
grep -q "shard 1: holds parity fragment 2 of stripe 2, first sealed at clock 2" <<<"$OUT" ||
  fail "aggregator 1 did not seal its fragment of clock 2: $OUT"
# The coordinator learns the clock every aggregator's part is done of.
grep -qE "every shard protected at clock (2|4|6|8) " <<<"$OUT" ||
  fail "the coordinator did not agree on a protected clock: $OUT"

echo "-- 4 aggregators, 2 parity fragments, with momentum"
pjob 2 4 STRATA_PROTECT_EVERY=3 STRATA_PROTECT_PARITY=2 STRATA_MOMENTUM=0.5 \
  -- --steps 7 --check momentum --momentum 0.5 --lr 2
sealed 4
grep -qE "every shard protected at clock (3|6) " <<<"$OUT" ||
  fail "the coordinator did not agree on a protected clock with m = 2: $OUT"

echo "-- a bit flipped in held parity: named by its CRC32C, not used"
pjob 2 3 STRATA_PROTECT_EVERY=2 STRATA_PROTECT_FLIP=2 -- --steps 6
grep -q "a bit of parity fragment 2 of stripe 2 (clock 2) flipped" <<<"$OUT" ||
  fail "the test hook did not flip: $OUT"
grep -q "fragment 2 of stripe 2 (clock 2, held by aggregator 1) fails its CRC32C: not used" <<<"$OUT" ||
  fail "the flipped fragment was not named: $OUT"
[ "$(grep -c 'fails its CRC32C' <<<"$OUT")" -eq 3 ] ||
  fail "every aggregator flipped one fragment, so three must be named: $OUT"

# The moment of a kill: random, from a seed printed so that a failure can be
# run again (STRATA_TEST_SEED=N).
SEED=${SEED:-$((10#$(date +%N) % 100000))}
RANDOM=$SEED
echo "seed $SEED (STRATA_TEST_SEED=$SEED runs the same kills again)"

echo "-- an aggregator killed at a random moment: its shard taken over, every worker exact without its lost clocks"
taken 3 3 1
echo "-- the same with 2 parity fragments across 4 aggregators"
taken 2 4 2

# lost W S EVERY WAIT: a job whose shards are protected every EVERY clocks;
# once rank 0 logged WAIT, aggregator 2 is SIGKILLed and the job must fail,
# every rank naming it; the failure's text stays in $OUT.
lost() {
  start_ranks "$1" "$2" env STRATA_LR="$1" STRATA_PROTECT_EVERY="$3" \
    STRATA_TIMEOUT_MS=20000 "$EXACT" --steps 1000000 --sleep --takeover
  wait_log 0 "$4" 60
  kill -KILL "${PIDS[2]}"
  within 90 wait_ranks
  expect_rank 2 137 ""
  expect_rank 0 3 "aggregator rank 2 "
  for ((r = $2; r < $1 + $2; r++)); do
    expect_rank "$r" 3 "the job failed: .*aggregator rank 2 "
  done
  OUT=$(cat "$LDIR/0.log")
  [ -n "${KEEP:-}" ] || rm -rf "$LDIR"
}
echo "-- an aggregator killed before any clock was protected: the job fails naming it"
lost 3 3 1000000 "layout of .* accepted"
grep -q "shard 2 taken over by" <<<"$OUT" && fail "a shard never protected was taken over: $OUT"

echo "-- a second aggregator lost after a takeover: the job fails naming it"
ENV_OF_RANK=()
start_ranks 3 3 env STRATA_LR=3 STRATA_PROTECT_EVERY=2 STRATA_TIMEOUT_MS=20000 \
  "$EXACT" --steps 1000000 --sleep --takeover
wait_log 0 "every shard protected at clock" 60
kill -KILL "${PIDS[1]}"
wait_log 0 "shard 1 taken over by aggregator rank 0" 60
kill -KILL "${PIDS[2]}"
within 90 wait_ranks
expect_rank 0 3 "aggregator rank 2 .*the shards are no longer protected since shard 1 was taken over"
for r in 3 4 5; do expect_rank $r 3 "the job failed: .*aggregator rank 2 "; done
[ -n "${KEEP:-}" ] || rm -rf "$LDIR"

echo "-- a worker silent at a loss: the job fails on the timeout naming it, and every aggregator ends"
ENV_OF_RANK=()
start_ranks 2 3 env STRATA_LR=2 STRATA_PROTECT_EVERY=2 STRATA_TIMEOUT_MS=8000 \
  "$EXACT" --steps 1000000 --sleep --takeover
wait_log 0 "every shard protected at clock" 60
kill -STOP "${PIDS[4]}"
kill -KILL "${PIDS[2]}"
wait_log 0 "worker rank 4 did not say how far it got without it" 60
kill -CONT "${PIDS[4]}"
# A job failed with STRATA_ERR_TIMEOUT once left strata_serve waiting on.
t0=$SECONDS
while kill -0 "${PIDS[0]}" 2>/dev/null || kill -0 "${PIDS[1]}" 2>/dev/null; do
  if [ $((SECONDS - t0)) -gt 60 ]; then
    kill -KILL "${PIDS[@]}" 2>/dev/null
    fail "aggregators still serving 60 s after the job failed: $(cat "$LDIR/0.log")"
  fi
  sleep 0.1
done
within 60 wait_ranks
expect_rank 0 3 "worker rank 4 did not say how far it got without it"
for r in 1 3 4; do expect_rank $r 3 "the job failed: .*worker rank 4 did not say"; done
[ -n "${KEEP:-}" ] || rm -rf "$LDIR"

echo "-- as many parity fragments as aggregators: refused"
out=$(env STRATA_LR=1 STRATA_PROTECT_EVERY=2 STRATA_PROTECT_PARITY=2 "$RUN" -n 1 -a 2 -- "$EXACT" --steps 1 2>&1) &&
  fail "2 parity fragments across 2 aggregators were accepted: $out"
grep -q "STRATA_PROTECT_PARITY=2 needs more than 2 aggregators (the job has 2)" <<<"$out" ||
  fail "the impossible parity count was not named: $out"
echo "shards protected across aggregators, exact; a flipped bit named; a lost shard rebuilt exactly and taken over, exact; a loss not survived named"
