#!/usr/bin/env bash
# strata-train --scenario gssp16 (16 workers in four speed tiers, 4
# aggregators, gssp) with its shards protected every 10 clocks
# (STRATA_PROTECT_EVERY): aggregator rank 2 is SIGKILLed during the run,
# its shard rebuilt and taken over by a survivor, then two workers (a fast
# and a slow one) are SIGKILLed and dropped. The run must print a failure
# and a recovery line for the aggregator and a failure line for each
# worker, still reach 0.80 and end with its table.
set -uo pipefail
train=$1
out=$(mktemp -d)
[ -n "${KEEP:-}" ] && echo "output in $out"
trap 'kill -KILL $driver 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$out"' EXIT
source "$(dirname "$0")/failures.sh"

# seen N: the run printed N failure lines of workers.
seen() {
  [ "$(grep -cE " failure: worker rank " "$out/log")" -ge "$1" ]
}

# The budget is for a loaded machine (0.80 takes about 2.5 s quiet); the
# driver ends once it is spent. The aggregator is killed once the
# coordinator agreed a protected clock (its info line: the groups run
# apart, so clocks are missed before one is agreed).
STRATA_PROTECT_EVERY=10 STRATA_TIMEOUT_MS=20000 STRATA_LOG=info "$train" \
  --scenario gssp16 --compare gssp --budget 40 --json "$out/r.json" \
  --no-plot >"$out/log" 2>"$out/err" &
driver=$!
within 90 grep -q "every shard protected at clock" "$out/err" ||
  fail "no clock of the shards was protected within 90 s"
run=$(pgrep -P $driver | head -1)
pid=$(rank_pid 2) || fail "no process of aggregator rank 2 found"
kill -KILL "$pid"
within 60 grep -qE " recovery: aggregator rank 2's shard taken over" "$out/log" ||
  fail "aggregator rank 2's shard was not taken over within 60 s"
n=0
for rank in 5 19; do
  pid=$(rank_pid $rank) || fail "no process of worker rank $rank found"
  kill -KILL "$pid"
  n=$((n + 1))
  within 60 seen $n ||
    fail "worker rank $rank was not dropped within 60 s"
done
wait $driver || fail "the run exited with $?"
cat "$out/log"
grep -qE "^gssp +[0-9.]+ s  failure: aggregator rank 2 lost, its shard rebuilt at clock [0-9]+ by aggregator rank [0-9]+" "$out/log" ||
  fail "no failure line for aggregator rank 2"
grep -qE "^gssp +[0-9.]+ s  recovery: aggregator rank 2's shard taken over by aggregator rank [0-9]+ at clock [0-9]+, [0-9]+ of its clocks lost \([0-9]+ to [0-9]+\), [0-9]+ ms after the loss" "$out/log" ||
  fail "no recovery line for aggregator rank 2"
for rank in 5 19; do
  grep -qE "^gssp +[0-9.]+ s  failure: worker rank $rank lost, its clocks from [0-9]+ on do not count; 1[45] workers train on" "$out/log" ||
    fail "no failure line for worker rank $rank"
done
[ "$(grep -cE ' (failure|recovery): ' "$out/log")" -eq 4 ] ||
  fail "not one line per failure and recovery"
grep -qE "^policy +time to 0.80" "$out/log" && grep -qE "^gssp +[0-9.]+ s .* [0-9]+$" "$out/log" ||
  fail "no final table, or 0.80 not reached"
grep -qE '"policy": "gssp", "time_to_target_s": [0-9.]+,.*"ok": true' "$out/r.json" ||
  fail "the gssp job failed or did not reach 0.80: $(cat "$out/r.json")"
echo "PASS"
