#!/usr/bin/env bash
# strata-bench-pushpull runs under strata-run and under mpirun, checks its
# sums, shares the model among the aggregators, and writes the JSON the issue
# specifies. (It measures nothing here.)
RUN=$1 BENCH=$2 MPIRUN=${3:-}
EXACT=unused
source "$(dirname "$0")/common.sh"
unset STRATA_PARTITION_BYTES
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
args=(--aggregators 2 --min-bytes 4K --max-bytes 16K --iters 3 --warmup 1)

"$RUN" --spmd -n 2 -a 2 -- "$BENCH" "${args[@]}" --json "$dir/run.json" \
  >"$dir/run.out" 2>&1 || fail "under strata-run: $(cat "$dir/run.out")"
python3 - "$dir/run.json" 0 <<'PY' || fail "bad JSON from the strata-run job"
import json, sys
rows = json.load(open(sys.argv[1]))["results"]
assert [r["bytes"] for r in rows] == [4096, 8192, 16384], rows
for r in rows:
    assert r["workers"] == 2 and r["aggregators"] == 2, r
    assert r["strata_us"] > 0 and r["transport"], r
    # The model is shared among the aggregators, in whole 4 KiB pages.
    assert r["partition_bytes"] == max(4096, r["bytes"] // 2), r
    assert (r["mpi_allreduce_us"] is None) == (sys.argv[2] == "0"), r
    assert 0 < r["strata_min_us"] <= r["strata_us"], r
PY

if [ -n "$MPIRUN" ]; then
  root=()
  [ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
  "$MPIRUN" "${root[@]}" --oversubscribe -np 4 --mca btl self,vader \
    "$BENCH" "${args[@]}" --json "$dir/mpi.json" >"$dir/mpi.out" 2>&1 ||
    fail "under mpirun: $(cat "$dir/mpi.out")"
  python3 - "$dir/mpi.json" 1 <<'PY' || fail "bad JSON from the mpirun job"
import json, sys
rows = json.load(open(sys.argv[1]))["results"]
assert len(rows) == 3, rows
for r in rows:
    assert r["strata_us"] > 0 and r["mpi_allreduce_us"] > 0, r
    assert 0 < r["mpi_allreduce_min_us"] <= r["mpi_allreduce_us"], r
PY
fi
echo "strata-bench-pushpull runs and reports"
