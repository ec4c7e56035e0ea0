#!/usr/bin/env bash
# perf/multihost/bench-netns: the table's link bound for aggregators on hosts
# of their own and beside the workers (--colocate), from made-up runs, and
# the arguments it refuses (both before any host is made: no root needed).
SRC=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
run() { # TAG BYTES STRATA_US
    printf '{"results": [{"bytes": %s, "strata_us": %s, "mpi_allreduce_us": null}]}\n' \
        "$2" "$3" >"$dir/$1.json"
}
# 4 MiB at 1 Gbit/s: 33554 us per model crossing a link
run 1gbit-S1-r1 4194304 100000
run 1gbit-S2-r1 4194304 50000
run 1gbit-coloc-S1-r1 4194304 60000
run 1gbit-coloc-stage0-S2-r1 4194304 40000
table=$(/usr/bin/python3 "$SRC/perf/multihost/bench-netns-table.py" "$dir" 2) ||
    fail "the table failed: $table"
bound() { # RATE S: the bound_us column of that row
    awk -v r="$1" -v s="$2" '$1 == r && $2 == s { print $5 }' <<<"$table"
}
# separate: W/S x the model; colocated: max(S + W - 2, S)/S x the model
[ "$(bound 1gbit 1)" = 67109 ] || fail "separate S=1: W x the model: $table"
[ "$(bound 1gbit 2)" = 33554 ] || fail "separate S=2: W/S x the model: $table"
[ "$(bound 1gbit-coloc 1)" = 33554 ] || fail "colocated S=1 of 2 workers: one model: $table"
[ "$(bound 1gbit-coloc-stage0 2)" = 33554 ] || fail "colocated S=W=2: 2(W-1)/W: $table"
rm -f "$dir"/*.json
run 1gbit-coloc-S4-r1 4194304 60000
table=$(/usr/bin/python3 "$SRC/perf/multihost/bench-netns-table.py" "$dir" 4)
[ "$(bound 1gbit-coloc 4)" = 50332 ] || fail "colocated S=W=4: 2(W-1)/W = 1.5 models: $table"

netns=$SRC/perf/multihost/bench-netns.sh
out=$("$netns" "$dir" --workers 2 --aggs 3 --colocate 1 2>&1)
[ $? -eq 2 ] || fail "3 aggregators beside 2 workers accepted: $out"
grep -q "needs S <= W" <<<"$out" || fail "the reason is not named: $out"
out=$("$netns" "$dir" --colocate 2 2>&1)
[ $? -eq 2 ] || fail "--colocate 2 accepted: $out"
grep -q -- "--colocate '2'" <<<"$out" || fail "the bad value is not named: $out"
echo "bench-netns: link bounds of separate and colocated aggregators, bad --colocate refused"
