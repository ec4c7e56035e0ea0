#!/usr/bin/env bash
# STRATA_METRICS: rank 0 writes every rank's metrics as one JSON file, with
# what the job did (bytes both ways, reductions, clocks per group, the
# staleness histogram) consistent with the job's shape.
RUN=$1 EXACT=$2
source "$(dirname "$0")/common.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
job 3 2 STRATA_POLICY=ssp STRATA_STALENESS=2 STRATA_METRICS="$dir/m.json" -- \
  --steps 5 --check stale --staleness 2
python3 - "$dir/m.json" <<'PY' || fail "metrics JSON: $(cat "$dir/m.json")"
import json, sys
ranks = json.load(open(sys.argv[1]))["ranks"]
assert sorted(r["rank"] for r in ranks) == [0, 1, 2, 3, 4], ranks
aggs = [r for r in ranks if r["role"] == "aggregator"]
workers = [r for r in ranks if r["role"] == "worker"]
assert len(aggs) == 2 and len(workers) == 3
for w in workers:
    assert w["clock"] == 5 and w["pushes"] == 5, w
    assert w["bytes_pushed"] > 0 and w["bytes_pulled"] >= w["bytes_pushed"], w
for a in aggs:
    assert a["group_clocks"] == [5, 5, 5], a          # ssp: a group per worker
    assert a["reductions"] > 0 and a["updates"] == a["reductions"], a
    assert sum(a["staleness_histogram"]) == a["updates"], a
assert sum(a["bytes_pushed"] for a in aggs) == sum(w["bytes_pushed"] for w in workers)
PY
echo "the metrics file describes the job"
