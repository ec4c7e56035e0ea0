#!/usr/bin/env bash
# A cable pulled mid-job: host h2's link goes down (carrier lost at the
# switch, nothing is closed, no RST or FIN reaches anyone), in a job that
# needs both workers. Every rank must fail within STRATA_TIMEOUT_MS, the
# ranks elsewhere naming the worker on h2, never hang.
#   test_cut_link.sh BUILD
BUILD=$1
source "$(dirname "$0")/common.sh" 3 -- "$@"
export PATH=$BUILD/bin:$PATH STRATA_TIMEOUT_MS=5000
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
"$MHRUN" -n 2 -a 1 --map 0,1,2 --logs "$logs" --timeout 120 \
  -e STRATA_OPTIMIZER=sum -e STRATA_LOG=info -e STRATA_MIN_WORKERS=2 \
  -- "$BUILD/tests/strata-test-exact" --check sum \
  --steps 100000 --sleep >"$logs/out" 2>&1 &
job=$!
for ((i = 0; i < 300; i++)); do # until h2's worker trains (its log says so)
  grep -q 'joined as worker' "$logs/2.log" 2>/dev/null && break
  kill -0 $job 2>/dev/null || fail "the job ended before the cut: $(cat "$logs/out")"
  sleep 0.1
done
sleep 1
"$NSC" link 2 down
t0=$SECONDS
rc=0
wait $job || rc=$?
took=$((SECONDS - t0))
out=$(cat "$logs/out")
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "the job exited $rc after the cut: $out"
for r in 0 1 2; do
  grep -q "mhrun: rank $r on h$r exited" <<<"$out" || fail "rank $r did not fail: $out"
done
for r in 0 1; do
  grep -qE "^\[$r h$r\].*worker rank 2 \(pid [0-9]+ on h2\)" <<<"$out" ||
    fail "rank $r did not name the worker on h2: $out"
done
# STRATA_TIMEOUT_MS, then the time to tell everyone, on a loaded machine.
[ "$took" -le 15 ] || fail "the ranks took $took s to fail after the cut (timeout 5 s): $out"
echo "a pulled cable: every rank failed within $took s, naming the worker on h2"
