#!/usr/bin/env bash
# Rejoin: a worker SIGKILLed from outside at an arbitrary moment of training
# is dropped, then started again by hand with the job's settings and its
# rank: it takes its place at a clock every aggregator agreed, is served the
# model of that clock and trains to the end, under bsp and asp over the
# transport given. Every step stays exact (strata-test-exact --victim
# --rejoin): the others see the victim's pushes stop and come back, the
# gradient scale following the live workers both ways. A process of a rank
# the job did not drop (a worker still in, an aggregator) is refused with
# a message naming why (over tcp). strata-run --restart starts a worker
# that died again, and it rejoins (over shm). With a fourth argument
# "again": the same rank killed and started again twice instead, also
# while a partition still lags its first rejoin (twice, lagging below).
# With "gssp": the same under gssp (back in its group at its clock offset,
# after the probe's regroup), with GDTopK, and in one of two groups whose
# clocks run apart. Under stale the new process checks its own elements
# exactly
# after every step: its old process's counted pushes (the coordinator's
# count) plus each of its own, once.
EXACT=$1 TRANSPORT=$2 RUN=$3 WHAT=${4:-once}
source "$(dirname "$0")/common.sh"
export STRATA_TIMEOUT_MS=5000 STRATA_TRANSPORT=$TRANSPORT STRATA_LOG=info
W=3 S=2 VICTIM=3 # worker 1
STEPS=1000

# again R LOG PROGRAM ARGS...: start rank R again, as start_ranks did.
again() {
  local r=$1 log=$2
  shift 2
  env STRATA_RANK="$r" STRATA_SIZE=$((W + S)) STRATA_NUM_AGGREGATORS=$S \
    STRATA_COORD_FILE="$LDIR/coord" STRATA_HOST=127.0.0.1 \
    STRATA_JOB_SECRET=secret-of-the-job "$@" >"$log" 2>&1 &
  AGAIN=$!
}

# refuse R...: start processes of ranks R while the job runs; refused R WHY:
# that process failed naming why it was refused.
declare -A REFUSED
refuse() {
  local r
  for r in "$@"; do
    again "$r" "$LDIR/refused.$r.log" env STRATA_JOIN_TIMEOUT_MS=2000 \
      "${CMD[@]}"
    REFUSED[$r]=$AGAIN
  done
}
refused() {
  local rc=0
  wait "${REFUSED[$1]}" || rc=$?
  [ $rc -ne 0 ] || fail "rank $1 started again was not refused"
  grep -qE "refused us: .*$2" "$LDIR/refused.$1.log" ||
    fail "rank $1 started again did not say /$2/: $(cat "$LDIR/refused.$1.log")"
}

# rejoined POLICY ENV... -- ARGS...: run the job, kill the victim once it
# trains, start it again once dropped, and check every worker ends exact.
rejoined() {
  local policy=$1 envs=() r
  shift
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  echo "-- $policy: worker rank $VICTIM killed, then started again"
  CMD=(env STRATA_POLICY="$policy" "${envs[@]}" "$EXACT" --steps $STEPS
    --sleep --victim $((VICTIM - S)) --rejoin "$@")
  ENV_OF_RANK=()
  start_ranks $W $S "${CMD[@]}"
  wait_log 0 "layout of .* accepted" 60
  [ -z "${AFTER:-}" ] || wait_log 0 "$AFTER" 60
  sleep 0.$((RANDOM % 5 + 1))
  kill -KILL "${PIDS[$VICTIM]}"
  wait "${PIDS[$VICTIM]}" 2>/dev/null
  wait_log 0 "worker rank $VICTIM .* dropped: its first" 30
  local counted=()
  if [[ " $* " == *" --check stale "* ]]; then
    sed -nE "s/.*worker rank $VICTIM .* dropped: its first ([0-9]+) clocks count.*/\1/p" \
      "$LDIR/0.log" | head -1 >"$LDIR/counted"
    counted=(--counted "$LDIR/counted")
  fi
  # The coordinator listens again: only the victim's rank is taken (and
  # it stops once no dropped worker is left to come back).
  if [ "$policy" = bsp ] && [ "$TRANSPORT" = tcp ]; then
    refuse 2 1
    wait_log 0 "refused .*rank 2 is still in the job" 30
    wait_log 0 "refused .*rank 1 is an aggregator" 30
  fi
  again $VICTIM "$LDIR/$VICTIM.log" "${CMD[@]}" "${counted[@]}"
  PIDS[VICTIM]=$AGAIN
  if [ "$policy" = bsp ] && [ "$TRANSPORT" = tcp ]; then
    refused 2 "rank 2 is still in the job"
    refused 1 "rank 1 is an aggregator"
  fi
  within 120 wait_ranks
  for ((r = 0; r < W + S; r++)); do
    expect_rank $r 0 ""
  done
  for r in 2 3 4; do
    grep -q "$STEPS steps exact" "$LDIR/$r.log" ||
      fail "$policy: worker rank $r did not report exact steps: $(cat "$LDIR/$r.log")"
  done
  grep -q "rejoined at clock" "$LDIR/$VICTIM.log" ||
    fail "$policy: rank $VICTIM did not rejoin: $(cat "$LDIR/$VICTIM.log")"
  grep -qE "worker rank $VICTIM .* rejoined: it trains from clock [0-9]+; clocks [0-9]+ to [0-9]+ of its rank were lost" \
    "$LDIR/0.log" || fail "$policy: no rejoin logged: $(cat "$LDIR/0.log")"
  [ "$policy" != gssp ] || grep -qE "rank $VICTIM .* is back in group [0-9]+" \
    "$LDIR/0.log" || fail "$policy: no group given back: $(cat "$LDIR/0.log")"
  [ -n "${KEEP:-}" ] || rm -rf "$LDIR"
}

# twice N: under strata-run --restart 2 the victim dies at its step 20,
# rejoins, its new process dies N steps after its first clock (N = 0:
# before it pushed anything), and the third process rejoins; every step of
# the others stays exact (sum) and every process there ends exact.
twice() {
  echo "-- bsp under strata-run --restart 2: worker rank $VICTIM dies, and again $1 steps after it rejoined"
  local mark
  mark=$(mktemp -u "${TMPDIR:-/tmp}/strata-rejoin.XXXXXX")
  restarted "a worker killed twice (again after $1 steps)" 90 3 \
    '600 steps exact' env STRATA_OPTIMIZER=sum "$RUN" -n $W -a $S \
    --restart 2 -- "$EXACT" --steps 600 --sleep --check sum --die-at 20 \
    --rejoin --die-again "$1,$mark" --victim $((VICTIM - S))
  rm -f "$mark"
  grep -q "worker 1: dies again at clock" <<<"$OUT" ||
    fail "the victim's second process did not die: $OUT"
  [ "$(grep -cE "worker rank $VICTIM .* rejoined: it trains from clock" <<<"$OUT")" -eq 2 ] ||
    fail "a worker killed twice (again after $1 steps) did not rejoin twice: $OUT"
}
# lagging: a second rejoin while a partition still lags the first. Worker
# rank 2 is stopped (SIGSTOP; a long timeout keeps it in the job), so the
# victim's last pushes wait there unapplied; the victim is killed and
# started again (its first rejoin, with those pushes still to apply), that
# process kills itself before its first push and is dropped, and a third
# one asks to rejoin: it waits until every partition took the rank back
# (once rank 2 goes on), then trains; every step stays exact.
lagging() {
  echo "-- bsp: a second rejoin while a partition still lags the first"
  local mark p2
  mark=$(mktemp -u "${TMPDIR:-/tmp}/strata-rejoin.XXXXXX")
  # The others may see the victim out (while the third process waits) or
  # never, but no step before its first process's boundary (the count
  # the coordinator logs, handed over in $mark.count) without it.
  CMD=(env STRATA_POLICY=bsp STRATA_OPTIMIZER=sum STRATA_TIMEOUT_MS=60000
    "$EXACT" --steps 600 --sleep --check sum --victim $((VICTIM - S))
    --rejoin --out-optional --counted "$mark.count" --die-again "0,$mark")
  ENV_OF_RANK=()
  start_ranks $W $S "${CMD[@]}"
  wait_log 0 "layout of .* accepted" 60
  sleep 0.3
  kill -STOP "${PIDS[2]}"
  sleep 1 # the victim pushes what it can meanwhile
  kill -KILL "${PIDS[$VICTIM]}"
  wait "${PIDS[$VICTIM]}" 2>/dev/null
  wait_log 0 "worker rank $VICTIM .* dropped: its first" 30
  sed -nE "s/.*worker rank $VICTIM .* dropped: its first ([0-9]+) clocks count.*/\1/p" \
    "$LDIR/0.log" | head -1 >"$mark.count"
  again $VICTIM "$LDIR/$VICTIM.2.log" "${CMD[@]}"
  p2=$AGAIN
  wait $p2 2>/dev/null
  grep -q "dies again" "$LDIR/$VICTIM.2.log" ||
    { kill -CONT "${PIDS[2]}"; kill -KILL "${PIDS[@]}" 2>/dev/null
      fail "the victim's second process did not die as told: $(cat "$LDIR/$VICTIM.2.log")"; }
  wait_log 0 "worker rank $VICTIM \\(pid $p2 .* dropped: its first" 30
  again $VICTIM "$LDIR/$VICTIM.log" "${CMD[@]}"
  PIDS[VICTIM]=$AGAIN
  sleep 1
  if grep -q "waits: an aggregator still takes its rank back" "$LDIR/0.log"; then
    echo "the third process waited for a lagging partition"
  else
    echo "no partition lagged this time (the victim was killed between pushes)"
  fi
  kill -CONT "${PIDS[2]}"
  within 120 wait_ranks
  rm -f "$mark" "$mark.count"
  for ((r = 0; r < W + S; r++)); do
    expect_rank $r 0 ""
  done
  for r in 2 3 4; do
    grep -q "600 steps exact" "$LDIR/$r.log" ||
      fail "lagging: worker rank $r did not report exact steps: $(cat "$LDIR/$r.log")"
  done
  [ "$(grep -cE "worker rank $VICTIM .* rejoined: it trains from clock" "$LDIR/0.log")" -eq 2 ] ||
    fail "lagging: the victim did not rejoin twice: $(cat "$LDIR/0.log")"
  [ -n "${KEEP:-}" ] || rm -rf "$LDIR"
}
if [ "$WHAT" = again ]; then
  twice 0
  twice 5
  lagging
  echo "a worker killed and started again twice over $TRANSPORT: back in the job, exact"
  exit 0
fi
lr=$((W * (W - 1)))
if [ "$WHAT" = gssp ]; then
  # One group after the probe's three (a regroup: each worker's clocks
  # map to the group's with an offset of its own, the victim's well above
  # 0 as it starts slow; killed after that regroup, AFTER); fixed, so that
  # the load's noise in the step times cannot split it.
  KEEP=1 AFTER="regroup 1 done" rejoined gssp STRATA_GROUPS=1 STRATA_LR=$lr -- --check stale \
    --staleness inf --slow-start 10
  read -r j b < <(sed -nE "s/.*worker rank $VICTIM is back from clock ([0-9]+) on .* at its clock ([0-9]+);.*/\1 \2/p" \
    "$LDIR/1.log" | head -1)
  [ -n "$j" ] && [ "$b" -gt "$j" ] ||
    fail "gssp: the victim came back without a clock offset (clock ${j:-?}, its group's ${b:-?}): $(cat "$LDIR/1.log")"
  [ -n "${KEEP:-}" ] || rm -rf "$LDIR"
  # GDTopK's first epoch sends 35 % of each partition, more than a
  # worker's own third: every own update arrives in its step, exactly.
  rejoined gssp STRATA_GROUPS=1 STRATA_GDTOPK=1 STRATA_LR=$lr -- \
    --check stale --staleness inf
  # Two groups whose clocks run apart: the victim's J is its group's. The
  # other group may run entirely before the drop's clock or after the
  # rejoin's, never seeing the victim out.
  rejoined gssp STRATA_GROUPING=manual:0,0,1 STRATA_LR=$lr -- \
    --check stale --staleness inf --out-optional
  echo "a worker killed and started again under gssp over $TRANSPORT: back in its group, exact"
  exit 0
fi
rejoined bsp STRATA_OPTIMIZER=sum -- --check sum
rejoined asp STRATA_LR=$lr -- --check stale --staleness inf
if [ "$TRANSPORT" = shm ]; then
  echo "-- bsp under strata-run --restart 1: worker rank $VICTIM dies at its step 20"
  restarted "under strata-run --restart" 60 3 '1000 steps exact' \
    env STRATA_OPTIMIZER=sum "$RUN" -n $W -a $S --restart 1 -- "$EXACT" \
    --steps 1000 --sleep --check sum --die-at 20 --rejoin \
    --victim $((VICTIM - S))
  grep -q "strata-run: starting rank $VICTIM (worker) again" <<<"$OUT" ||
    fail "strata-run did not say it starts rank $VICTIM again: $OUT"
fi
echo "a worker killed and started again over $TRANSPORT: back in the job, exact"
