#!/usr/bin/env bash
# strata-bench-pushpull runs under strata-run and under mpirun, checks its
# sums, prints the partition size the engine picked (or --partition-bytes),
# and writes the JSON the issue specifies, with --breakdown its stages. (It
# measures nothing here.)
RUN=$1 BENCH=$2 MPIRUN=${3:-}
EXACT=unused
source "$(dirname "$0")/common.sh"
unset STRATA_PARTITION_BYTES
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
args=(--aggregators 2 --min-bytes 4K --max-bytes 16K --iters 3 --warmup 1)

"$RUN" --spmd -n 2 -a 2 -- "$BENCH" "${args[@]}" --breakdown \
  --json "$dir/run.json" \
  >"$dir/run.out" 2>&1 || fail "under strata-run: $(cat "$dir/run.out")"
python3 - "$dir/run.json" 0 <<'PY' || fail "bad JSON from the strata-run job"
import json, sys
rows = json.load(open(sys.argv[1]))["results"]
assert [r["bytes"] for r in rows] == [4096, 8192, 16384], rows
for r in rows:
    assert r["workers"] == 2 and r["aggregators"] == 2, r
    assert r["strata_us"] > 0 and r["transport"], r
    # The engine's pick for a small model on one host: its floor, 1 MiB.
    assert r["partition_bytes"] == 1048576, r
    assert (r["mpi_allreduce_us"] is None) == (sys.argv[2] == "0"), r
    assert 0 < r["strata_min_us"] <= r["strata_us"], r
    # --breakdown: the workers' stages; the aggregators' under mpirun only
    b = r["breakdown"]
    assert b["round_us"] > 0 and b["round_trip_us"] > 0, r
    assert b["push_post_us"] > 0 and b["pull_wakeup_us"] >= 0, r
    assert ("agg_reduce_us" in b) == (sys.argv[2] == "1"), r
PY
grep -q '^#   breakdown, us per round (means): round [0-9.]* = push handoff' \
  "$dir/run.out" || fail "no breakdown: $(cat "$dir/run.out")"

if [ -n "$MPIRUN" ]; then
  root=()
  [ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
  "$MPIRUN" "${root[@]}" --oversubscribe -np 4 --mca btl self,vader \
    "$BENCH" "${args[@]}" --breakdown --partition-bytes 8K \
    --json "$dir/mpi.json" \
    >"$dir/mpi.out" 2>&1 ||
    fail "under mpirun: $(cat "$dir/mpi.out")"
  python3 - "$dir/mpi.json" 1 <<'PY' || fail "bad JSON from the mpirun job"
import json, sys
rows = json.load(open(sys.argv[1]))["results"]
assert len(rows) == 3, rows
for r in rows:
    assert r["partition_bytes"] == 8192, r  # --partition-bytes sets it
    assert r["strata_us"] > 0 and r["mpi_allreduce_us"] > 0, r
    assert 0 < r["mpi_allreduce_min_us"] <= r["mpi_allreduce_us"], r
    b = r["breakdown"]  # the aggregators' stages, gathered over MPI
    assert b["agg_reduce_us"] > 0 and b["agg_serve_us"] > 0, r
    assert b["agg_reduce_wait_us"] >= 0 and b["round_trip_us"] > 0, r
PY
  grep -q '^#     to the model landed = aggregators. wait' "$dir/mpi.out" ||
    fail "no aggregators' breakdown: $(cat "$dir/mpi.out")"
fi
echo "strata-bench-pushpull runs and reports"
