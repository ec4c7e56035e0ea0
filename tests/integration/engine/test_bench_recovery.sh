#!/usr/bin/env bash
# strata-bench-recovery kills an aggregator of a real bsp job (1 MiB
# shards, over shm: engine_protect covers tcp) and prints the stages of its
# recovery from the ranks' takeover metrics: every stage measured, the
# total their sum, and the clocks the takeover lost (R - P). (It measures
# nothing here.) A takeover that fails ends the job within 10 s plus the
# 20 s timeout.
BENCH=$1
RUN=unused EXACT=unused
source "$(dirname "$0")/common.sh"
unset STRATA_PARTITION_BYTES
for t in shm; do
  out=$("$BENCH" --sizes 1 --transport "$t" --kill-at 2 --after 3 \
    --timeout-ms 20000 2>&1) ||
    fail "over $t: $out"
  row=$(grep -v '^#' <<<"$out")
  python3 - "$t" "$row" <<'PY' || fail "over $t, a bad row: $out"
import sys
t, row = sys.argv[1], sys.argv[2].split()
assert len(row) == 14 and row[:4] == ["1", "3", "1", t], row
detect, rebuild, agree, install, first, total, steady = map(float, row[4:11])
P, R, lost = map(int, row[11:])
assert min(detect, rebuild, agree, install, first, steady) >= 0, row
assert abs(detect + rebuild + agree + install + first - total) < 0.5, row
assert P >= 2 and P % 2 == 0 and R >= P and lost == R - P, row
PY
done
echo "strata-bench-recovery: a killed aggregator's recovery timed by stage"
