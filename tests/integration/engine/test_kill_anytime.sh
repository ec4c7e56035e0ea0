#!/usr/bin/env bash
# A worker SIGKILLed from outside at an arbitrary moment of training (inside
# a push, between a push and its pull, or computing), over the transport
# given, in a job that needs every worker (STRATA_MIN_WORKERS): every other
# rank ends with a clear error naming it within STRATA_TIMEOUT_MS, never a
# hang. (test_shrink.sh: the job that goes on without it.)
EXACT=$1 TRANSPORT=$2
RUN=unused
source "$(dirname "$0")/common.sh"
# Joining has a deadline of its own: starting five processes on a loaded
# machine took more than 3 s ("3 of 5 ranks did not join").
export STRATA_TIMEOUT_MS=3000 STRATA_JOIN_TIMEOUT_MS=60000 \
  STRATA_TRANSPORT=$TRANSPORT STRATA_OPTIMIZER=sum STRATA_LOG=info
W=3 S=2 N=5 VICTIM=3
export STRATA_MIN_WORKERS=$W
LDIR=$(mktemp -d)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$LDIR"' EXIT
pids=()
for ((r = 0; r < N; r++)); do
  STRATA_RANK=$r STRATA_SIZE=$N STRATA_NUM_AGGREGATORS=$S \
  STRATA_COORD_FILE=$LDIR/coord STRATA_HOST=127.0.0.1 \
  STRATA_JOB_SECRET=kill-test-secret \
    "$EXACT" --check sum --steps 1000 --sleep >"$LDIR/$r.log" 2>&1 &
  pids+=($!)
done
# Wait until the victim joined (killed before its HELLO, it is a rank that
# never came: another failure), then a moment more: in its commit or
# training.
for ((i = 0; i < 600; i++)); do
  grep -q "joined as worker" "$LDIR/$VICTIM.log" && break
  sleep 0.1
done
grep -q "joined as worker" "$LDIR/$VICTIM.log" ||
  fail "the victim did not join within 60 s: $(cat "$LDIR"/*.log)"
sleep 0.$((RANDOM % 5 + 3))
grep -q "steps exact" "$LDIR"/*.log && fail "a worker finished before the kill"
kill -KILL "${pids[$VICTIM]}"
t0=$SECONDS
for ((r = 0; r < N; r++)); do
  rc=0
  wait "${pids[$r]}" || rc=$?
  [ "$r" -eq "$VICTIM" ] && continue
  [ "$rc" -eq 3 ] || fail "rank $r exited $rc, expected 3: $(cat "$LDIR/$r.log")"
  grep -qE "worker rank $VICTIM .*disconnected (before|without) finalizing" \
    "$LDIR/$r.log" || fail "rank $r did not name the killed worker: $(cat "$LDIR/$r.log")"
done
[ $((SECONDS - t0)) -le 5 ] ||
  fail "the job took $((SECONDS - t0)) s to end after the kill: $(tail -n 5 "$LDIR"/*.log)"
echo "a worker killed at any moment over $TRANSPORT: every rank names it"
