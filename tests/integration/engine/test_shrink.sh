#!/usr/bin/env bash
# Shrink and continue: a worker SIGKILLed from outside at an arbitrary
# moment of training (inside a push, between a push and its pull, or
# computing), under bsp, ssp, asp and gssp over the transport given. The
# others go on and every step stays exact (strata-test-exact --victim): the
# dead worker's pushes count up to one clock, the same in every tensor at
# every aggregator, and none after; the gradient scale follows the live
# workers from one clock on. The coordinator says what was lost. Under
# strata-run the job goes on too (a worker that kills itself at its step
# 20) and ends well.
EXACT=$1 TRANSPORT=$2 RUN=$3
source "$(dirname "$0")/common.sh"
export STRATA_TIMEOUT_MS=5000 STRATA_TRANSPORT=$TRANSPORT STRATA_LOG=info
W=3 S=2 VICTIM=3 # worker 1
STEPS=1500

# killed POLICY ENV... -- ARGS...: run the job, kill the victim once it
# trains, and check that the others end exact.
killed() {
  local policy=$1 envs=() r
  shift
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  echo "-- $policy: worker rank $VICTIM killed"
  ENV_OF_RANK=()
  start_ranks $W $S env STRATA_POLICY="$policy" "${envs[@]}" \
    "$EXACT" --steps $STEPS --sleep --victim $((VICTIM - S)) "$@"
  wait_log 0 "layout of .* accepted" 60
  sleep 0.$((RANDOM % 7 + 2))
  kill -KILL "${PIDS[$VICTIM]}"
  within 120 wait_ranks
  expect_rank $VICTIM 137 ""
  for ((r = 0; r < W + S; r++)); do
    [ "$r" -eq $VICTIM ] && continue
    expect_rank $r 0 ""
  done
  for r in 2 4; do
    grep -q "$STEPS steps exact" "$LDIR/$r.log" ||
      fail "$policy: worker rank $r did not report exact steps: $(cat "$LDIR/$r.log")"
  done
  grep -qE "dropping worker rank $VICTIM .*disconnected without finalizing" \
    "$LDIR/0.log" || fail "$policy: no drop logged: $(cat "$LDIR/0.log")"
  grep -qE "worker rank $VICTIM .* dropped: its first [0-9]+ clocks count" \
    "$LDIR/0.log" || fail "$policy: no boundary logged: $(cat "$LDIR/0.log")"
  [ -n "${KEEP:-}" ] || rm -rf "$LDIR"
}

killed bsp STRATA_OPTIMIZER=sum -- --check sum
# The model in one partition, on one aggregator: its arrival announces a
# push there (no PUSHED), and still none is half applied.
killed bsp STRATA_OPTIMIZER=sum STRATA_PARTITION_BYTES=1M -- --check sum
lr=$((W * (W - 1)))
killed ssp STRATA_STALENESS=2 STRATA_LR=$lr -- --check stale --staleness 2
killed asp STRATA_LR=$lr -- --check stale --staleness inf
killed gssp STRATA_LR=$lr -- --check stale --staleness inf
echo "-- bsp under strata-run: worker rank $VICTIM dies at its step 20"
out=$(within 120 env STRATA_OPTIMIZER=sum "$RUN" -n $W -a $S -- "$EXACT" \
  --steps 200 --check sum --die-at 20 --victim $((VICTIM - S)) 2>&1) ||
  fail "under strata-run the job did not go on: $out"
[ "$(grep -c '200 steps exact' <<<"$out")" -eq 2 ] ||
  fail "under strata-run not both other workers were exact: $out"
grep -qE "strata-run: .*(rank $VICTIM .*the job goes on without it|the job goes on without rank $VICTIM)" <<<"$out" ||
  fail "strata-run did not say the job goes on: $out"
grep -qE "worker rank $VICTIM .* dropped: its first 20 clocks count" \
  <<<"$out" || fail "the boundary is not clock 20: $out"
echo "a worker killed at any moment over $TRANSPORT: the others go on, exact"
