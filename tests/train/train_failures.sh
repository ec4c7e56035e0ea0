#!/usr/bin/env bash
# strata-train shows what happened: a worker SIGKILLed during a run (bsp,
# or the policy given second) is dropped (one failure line: who, and from
# which clock its pushes do not count), strata-run --restart starts it
# again and it rejoins (one recovery line: who, at which clock, the clocks
# lost), and the run still ends with its table and a model that learned.
set -uo pipefail
train=$1 policy=${2:-bsp}
out=$(mktemp -d)
trap 'kill -KILL $driver 2>/dev/null; rm -rf "$out"' EXIT
fail() { echo "FAIL: $*" >&2; cat "$out/log" "$out/err" >&2; exit 1; }

STRATA_TIMEOUT_MS=5000 STRATA_LOG=warn "$train" --speeds 1,1,1 \
  --aggregators 1 --compare "$policy" --restart 1 --budget 4 --eval-every 0.5 \
  --base-ms 2 --json "$out/r.json" --no-plot >"$out/log" 2>"$out/err" &
driver=$!
t0=$SECONDS
until grep -q "^$policy " "$out/log"; do
  [ $((SECONDS - t0)) -lt 60 ] || fail "$policy never started training"
  sleep 0.1
done
# The driver's strata-run, and its last worker rank (not the reporter).
run=$(pgrep -P $driver | head -1)
victim=$(pgrep -P "$run" -f -- '--worker' | sort -n | tail -1)
[ -n "$victim" ] || fail "no worker process of the job found"
kill -KILL "$victim"
wait $driver || fail "the run exited with $?"
cat "$out/log"
grep -qE "^$policy +[0-9.]+ s  failure: worker rank [0-9]+ lost, its clocks from [0-9]+ on do not count; 2 workers train on" "$out/log" ||
  fail "no failure line"
grep -qE "^$policy +[0-9.]+ s  recovery: worker rank [0-9]+ back at clock [0-9]+, [0-9]+ of its clocks lost \([0-9]+ to [0-9]+\); 3 workers train on" "$out/log" ||
  fail "no recovery line"
[ "$(grep -cE ' (failure|recovery): ' "$out/log")" -eq 2 ] ||
  fail "not one line per failure and recovery"
grep -qE "^policy +time to" "$out/log" && grep -qE "^$policy +.* [0-9]+$" "$out/log" ||
  fail "no final table"
grep -q "\"policy\": \"$policy\".*\"ok\": true" "$out/r.json" || fail "the $policy job failed"
grep -q "worker rank .* rejoined" "$out/err" ||
  fail "the engine's messages were not passed on"
echo "PASS"
