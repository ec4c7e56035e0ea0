#!/usr/bin/env bash
# strata-train --scenario gssp16 (16 workers in four speed tiers, 4
# aggregators, gssp) with two workers SIGKILLed during the run, a fast one
# (rank 5, x1) and, once it was dropped, a slow one (rank 19, x8):
# strata-run --restart 2 starts each again and it rejoins its group. The
# run must print a failure and a recovery line for each, still reach 0.80
# and end with its table.
set -uo pipefail
train=$1
out=$(mktemp -d)
trap 'kill -KILL $driver 2>/dev/null; rm -rf "$out"' EXIT
source "$(dirname "$0")/failures.sh"

# seen WHAT N: the run printed N failure (or recovery) lines.
seen() {
  [ "$(grep -cE " $1: worker rank " "$out/log")" -ge "$2" ]
}

# The budget is for a loaded machine: on a quiet one gssp16 reaches 0.80
# in about 2.5 s; the driver ends once the budget is spent (~30 s).
STRATA_TIMEOUT_MS=10000 STRATA_LOG=warn "$train" --scenario gssp16 \
  --compare gssp --restart 2 --budget 25 --json "$out/r.json" --no-plot \
  >"$out/log" 2>"$out/err" &
driver=$!
within 90 grep -q "^gssp " "$out/log" || fail "gssp never started training"
run=$(pgrep -P $driver | head -1)
# The second dies once the first was dropped, while it rejoins (one drop
# or rejoin is agreed at a time): both early in the run.
n=0
for rank in 5 19; do
  pid=$(rank_pid $rank) || fail "no process of worker rank $rank found"
  kill -KILL "$pid"
  n=$((n + 1))
  within 60 seen failure $n || fail "worker rank $rank was not dropped within 60 s"
done
within 60 seen recovery 2 || fail "the workers were not back within 60 s"
wait $driver || fail "the run exited with $?"
cat "$out/log"
for rank in 5 19; do
  grep -qE "^gssp +[0-9.]+ s  failure: worker rank $rank lost, its clocks from [0-9]+ on do not count; 15 workers train on" "$out/log" ||
    fail "no failure line for worker rank $rank"
  grep -qE "^gssp +[0-9.]+ s  recovery: worker rank $rank back at clock [0-9]+, [0-9]+ of its clocks lost \([0-9]+ to -?[0-9]+\); 16 workers train on" "$out/log" ||
    fail "no recovery line for worker rank $rank"
done
[ "$(grep -cE ' (failure|recovery): ' "$out/log")" -eq 4 ] ||
  fail "not one line per failure and recovery"
grep -qE "^policy +time to 0.80" "$out/log" && grep -qE "^gssp +[0-9.]+ s .* [0-9]+$" "$out/log" ||
  fail "no final table, or 0.80 not reached"
grep -qE '"policy": "gssp", "time_to_target_s": [0-9.]+,.*"ok": true' "$out/r.json" ||
  fail "the gssp job failed or did not reach 0.80: $(cat "$out/r.json")"
echo "PASS"
