#!/usr/bin/env bash
# A rank that stops (SIGSTOP: still connected, not dead) is named by every
# other rank within STRATA_TIMEOUT_MS, whatever its role: a worker under
# every policy, an aggregator and the coordinator under a gradient policy
# and a round policy. Under esync and fedavg a stopped worker is dropped and
# the others finish every round. The stopped rank, once continued, reports
# the same failure (the coordinator: that it did not run), or that it was
# dropped.
EXACT=$1 ROUNDS=$2
RUN=unused
source "$(dirname "$0")/common.sh"
export STRATA_TIMEOUT_MS=4000 STRATA_TRANSPORT=tcp STRATA_LOG=info
# Joining has its own deadline, not what this test times (the 4 s timeout
# also bounded it: at load 30 three ASan ranks had not joined within it).
export STRATA_JOIN_TIMEOUT_MS=60000
T=4 W=3 S=2

# others_within SECONDS VICTIM: every rank but VICTIM exits within SECONDS
# of now; their exit codes land in $LDIR/R.rc.
others_within() {
  local limit=$1 victim=$2 t0=$SECONDS r left
  while :; do
    left=0
    for r in "${!PIDS[@]}"; do
      [ "$r" -eq "$victim" ] || ! kill -0 "${PIDS[$r]}" 2>/dev/null || left=1
    done
    [ $left -eq 0 ] && break
    if [ $((SECONDS - t0)) -gt "$limit" ]; then
      kill -KILL "${PIDS[@]}" 2>/dev/null
      fail "ranks still running $limit s after rank $victim stopped: $(tail -n 3 "$LDIR"/*.log)"
    fi
    sleep 0.1
  done
  for r in "${!PIDS[@]}"; do
    [ "$r" -eq "$victim" ] && continue
    wait "${PIDS[$r]}"
    echo $? >"$LDIR/$r.rc"
  done
}

# resume VICTIM: continue it and keep its exit code.
resume() {
  kill -CONT "${PIDS[$1]}"
  wait "${PIDS[$1]}"
  echo $? >"$LDIR/$1.rc"
}

# stalled POLICY VICTIM NAME PROGRAM ARGS...: start a job, stop rank VICTIM
# once it trains (the worker stops itself at its step 20 or in round 2),
# and check that every rank names it (/NAME stopped responding/).
stalled() {
  local policy=$1 victim=$2 name=$3 r
  shift 3
  echo "-- $policy: rank $victim stops"
  ENV_OF_RANK=()
  start_ranks $W $S env STRATA_POLICY="$policy" STRATA_LR=$W "$@"
  if [ "$victim" -lt $S ]; then
    wait_log 0 "layout of .* accepted" 60
    sleep 1
    kill -STOP "${PIDS[$victim]}"
  else
    local t0=$SECONDS
    until grep -q "^State:.*stopped" "/proc/${PIDS[$victim]}/status" 2>/dev/null; do
      [ $((SECONDS - t0)) -le 60 ] || fail "rank $victim never stopped: $(cat "$LDIR/$victim.log")"
      sleep 0.05
    done
  fi
  others_within $((T + 2)) "$victim"
  resume "$victim"
  for ((r = 0; r < W + S; r++)); do
    if [ "$r" -eq 0 ] && [ "$victim" -eq 0 ]; then
      expect_rank 0 3 "this rank, the coordinator \(rank 0\), did not run for"
    else
      expect_rank $r 3 "$name stopped responding: nothing from it for"
    fi
  done
}

# In a job that needs every worker (else it goes on without it, as
# esync and fedavg below).
for p in bsp ssp asp gssp; do
  stalled $p 3 "worker rank 3 \(pid [0-9]+ on [^)]*\)" STRATA_MIN_WORKERS=$W \
    "$EXACT" --steps 1000000 --check stale --staleness inf --stop-at 20
done
stalled bsp 1 "aggregator rank 1 \(pid [0-9]+ on [^)]*\)" \
  "$EXACT" --steps 1000000 --check stale --staleness inf --sleep
stalled ssp 0 "the coordinator \(rank 0 at [0-9.:]+\)" \
  "$EXACT" --steps 1000000 --check stale --staleness inf --sleep
stalled esync 1 "aggregator rank 1 \(pid [0-9]+ on [^)]*\)" \
  "$ROUNDS" --rounds 1000000 --check equal
stalled fedavg 0 "the coordinator \(rank 0 at [0-9.:]+\)" \
  "$ROUNDS" --rounds 1000000 --check equal

# esync and fedavg go on without a stopped worker: the others finish every
# round within the timeout of its stop, and it learns it was dropped.
for p in esync fedavg; do
  echo "-- $p: worker rank 4 stops in round 2"
  start_ranks $W $S env STRATA_POLICY=$p "$ROUNDS" --rounds 6 --check equal \
    --stop-in 2
  others_within 60 4
  resume 4
  for r in 2 3; do expect_rank $r 0 "6 rounds exact"; done
  for r in 0 1; do expect_rank $r 0 ""; done
  grep -q "dropping worker rank 4 .*stopped responding" "$LDIR/0.log" ||
    fail "$p: the coordinator did not drop the stopped worker: $(cat "$LDIR/0.log")"
  expect_rank 4 3 "this worker was dropped from the job, which goes on without it: stopped responding"
done
echo "a stopped worker, aggregator or coordinator is named by every rank"
