#!/usr/bin/env bash
# strata-bench-protect runs (it checks the shard it rebuilt against the one
# lost, so a wrong rebuild fails it) and names bad arguments.
BENCH=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
out=$("$BENCH" --aggs 5 --parity 2 --sizes 1,2 --reps 1 2>&1) || fail "bench failed: $out"
[ "$(grep -cE '^ +5 +2 +[12] ' <<<"$out")" -eq 2 ] || fail "expected a row per size: $out"
out=$("$BENCH" --aggs 3 --parity 3 2>&1)
[ $? -eq 2 ] || fail "--parity 3 of 3 aggregators accepted: $out"
grep -q -- "--parity 1..aggs-1" <<<"$out" || fail "the bad argument is not named: $out"
echo "strata-bench-protect rebuilds exactly and refuses bad arguments"
