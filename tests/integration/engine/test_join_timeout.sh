#!/usr/bin/env bash
# Joining has its own deadline (STRATA_JOIN_TIMEOUT_MS), apart from the
# data-path timeout: a rank launched late joins a job whose STRATA_TIMEOUT_MS
# is shorter than its delay. When ranks are still arriving as the deadline
# passes, the coordinator says the job is still starting (513 ranks on a
# busy machine were blamed on secrets and addresses).
#   test_join_timeout.sh EXACT
EXACT=$1
RUN=unused
source "$(dirname "$0")/common.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export STRATA_HOST=127.0.0.1 STRATA_LR=2 STRATA_NUM_AGGREGATORS=1 \
  STRATA_JOB_SECRET=join-timeout-secret STRATA_TIMEOUT_MS=2000

# start N DELAYS...: ranks 0..N-1, rank r DELAYS[r] seconds ("-": never)
# after the coordinator (rank 0) started its join deadline, which it does
# before writing the coordinator file: delays on the coordinator's clock,
# however slowly a loaded machine starts it.
start() {
  local n=$1 r
  shift
  rm -f "$dir/coord"
  for ((r = 0; r < n; r++)); do
    local d=${1:-0}
    shift || true
    [ "$d" = - ] && continue
    (if [ "$r" -gt 0 ]; then
       i=0
       while [ ! -s "$dir/coord" ] && [ $((i++)) -lt 600 ]; do sleep 0.05; done
       sleep "$d"
     fi
     STRATA_RANK=$r STRATA_SIZE=$n STRATA_COORD_FILE=$dir/coord \
       exec "$EXACT" --steps 2) >"$dir/$r.log" 2>&1 &
  done
}

# A worker 3 s late, with 2 s data timeouts and an 8 s join deadline.
STRATA_JOIN_TIMEOUT_MS=8000 start 3 0 0 3
wait || true
for r in 0 1 2; do grep -q 'ERROR' "$dir/$r.log" && fail "rank $r: $(cat "$dir/$r.log")"; done
[ "$(cat "$dir"/[12].log | grep -c 'steps exact')" -eq 2 ] || fail "not exact: $(cat "$dir"/*.log)"

# A rank started 7.6 s into a 10 s join (in its last quarter however late
# a loaded machine runs it, and with 2.4 s to join): the job is still
# starting.
STRATA_JOIN_TIMEOUT_MS=10000 start 6 0 0 0 0 7.6 -
wait || true
grep -qE '1 of 6 ranks did not join within STRATA_JOIN_TIMEOUT_MS=10000 \(ranks 5\): the job is still starting' "$dir/0.log" ||
  fail "the coordinator did not say the job is still starting: $(cat "$dir/0.log")"

# Nobody arriving late (the others have 3 s to start): the rank is not coming.
STRATA_JOIN_TIMEOUT_MS=4000 start 4 0 0 0 -
wait || true
grep -qE '1 of 4 ranks did not join within STRATA_JOIN_TIMEOUT_MS=4000 \(ranks 3\): not started' "$dir/0.log" ||
  fail "the coordinator did not say the rank is not coming: $(cat "$dir/0.log")"
echo "joining has its own deadline; a job still starting is named as such"
