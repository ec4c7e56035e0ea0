#!/usr/bin/env bash
# One coordinator address for job after job (STRATA_COORD fixed, as on a
# cluster): strata-bench-pushpull makes one job per size, and a fast rank's
# HELLO for the next size used to land in the previous job's coordinator,
# which failed ("that rank has already joined"). The coordinator stops
# listening once every rank joined, and a HELLO of another job (another
# launcher job id, or the process's next job) is refused without harm: the
# rank retries until its own coordinator answers.
#   test_coord_reuse.sh RUN EXACT BENCH
RUN=$1 EXACT=$2 BENCH=$3
source "$(dirname "$0")/common.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
free_port() {
  python3 -c 'import socket; s = socket.socket()
s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Four sizes, four jobs on one address.
out=$(STRATA_COORD=127.0.0.1:$(free_port) STRATA_HOST=127.0.0.1 \
  "$RUN" -n 3 -a 1 --spmd -- "$BENCH" --min-bytes 64K --max-bytes 512K \
  --iters 5 --blocks 1 --warmup 1 2>&1) || fail "pushpull on a fixed STRATA_COORD: $out"
[ "$(grep -cE '^ +[0-9]+ +3 +1 ' <<<"$out")" -eq 4 ] || fail "not every size ran: $out"

# A rank of another job (another SLURM_JOB_ID) reaching a coordinator that
# still waits for its own rank 1 is refused, and the job it reached goes on.
unset STRATA_PARTITION_BYTES
export STRATA_COORD=127.0.0.1:$(free_port) STRATA_HOST=127.0.0.1 STRATA_SIZE=2 \
  STRATA_NUM_AGGREGATORS=1 STRATA_JOB_SECRET=one-secret-for-both STRATA_LR=1
SLURM_JOB_ID=100 STRATA_RANK=0 "$EXACT" --steps 2 >"$dir/0.log" 2>&1 &
agg=$!
rc=0
SLURM_JOB_ID=200 STRATA_RANK=1 STRATA_TIMEOUT_MS=3000 "$EXACT" --steps 2 \
  >"$dir/other.log" 2>&1 || rc=$?
[ $rc -ne 0 ] || fail "a rank of another job joined: $(cat "$dir/other.log")"
grep -q 'refused us: .*another job' "$dir/other.log" ||
  fail "the rank of another job was not told why: $(cat "$dir/other.log")"
kill -0 $agg 2>/dev/null || fail "the job failed on a stranger's HELLO: $(cat "$dir/0.log")"
SLURM_JOB_ID=100 STRATA_RANK=1 "$EXACT" --steps 2 >"$dir/1.log" 2>&1 ||
  fail "rank 1 of the job: $(cat "$dir/1.log")"
wait $agg || fail "rank 0 of the job: $(cat "$dir/0.log")"
grep -q 'steps exact' "$dir/1.log" || fail "not exact: $(cat "$dir/1.log")"
echo "one coordinator address, job after job: every job ran; a stranger was refused"
