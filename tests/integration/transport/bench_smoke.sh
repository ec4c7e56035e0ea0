#!/usr/bin/env bash
# strata-bench-transport --loopback on a provider: it runs, prints its table
# and writes the JSON the issue specifies, with one entry per size.
set -u
bench=$1 provider=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
json=$(mktemp); trap 'rm -f "$json"' EXIT
# Sleeping when idle: spinning peers crawl on a shared CI machine.
out=$(STRATA_JOB_SECRET=bench-smoke "$bench" --provider "$provider" --loopback \
      --quick --poll block --sizes 8:64K --json "$json") ||
  fail "the benchmark exited $?"
grep -q "provider $provider" <<<"$out" || fail "no header in: $out"
[ "$(grep -c '^ [0-9]' <<<"$out")" -eq 14 ] || fail "not 14 rows in: $out"
grep -q "^{\"provider\": \"$provider\", \"results\": \[" "$json" || fail "bad JSON head: $(cat "$json")"
n=$(grep -cE '^  \{"bytes": [0-9]+, "bw_gbps": [0-9.]+, "lat_us": [0-9.]+\},?$' "$json")
[ "$n" -eq 14 ] || fail "$n result entries, want 14: $(cat "$json")"
grep -q '"bytes": 65536,' "$json" || fail "no 64 KiB entry"
STRATA_JOB_SECRET=bench-smoke "$bench" --provider "$provider" --loopback \
  --quick --poll block --sizes 8:8 --lat-only >/dev/null || fail "--lat-only failed"
out=$(STRATA_JOB_SECRET=bench-smoke "$bench" --provider "$provider" --loopback \
      --poll block --sizes 8:16 --iters 7) || fail "--iters 7 failed"
[ "$(awk '$1 ~ /^[0-9]+$/ && $2 == 7 && $5 == 7' <<<"$out" | wc -l)" -eq 2 ] ||
  fail "not 7 iterations for both sizes and measurements in: $out"
"$bench" --provider "$provider" --loopback --sizes 9 >/dev/null 2>&1 && fail "--sizes 9 accepted"
"$bench" --provider "$provider" --loopback --iters 0 >/dev/null 2>&1 && fail "--iters 0 accepted"
exit 0
