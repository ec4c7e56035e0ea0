# Shared by the engine's multi-process tests. Sourced; expects $RUN (strata-run)
# and $EXACT (strata-test-exact).
set -u
for v in $(env | grep -o '^STRATA_[A-Z0-9_]*'); do unset "$v"; done
export STRATA_TIMEOUT_MS=${STRATA_TIMEOUT_MS:-10000}
export STRATA_PARTITION_BYTES=4096 # many partitions, pieces across tensors

fail() { echo "FAIL: $*" >&2; exit 1; }

# job W S [VAR=VALUE...] -- ARGS: run a job under strata-run, with LR = W
# (the exact checks need it); fails the test on a non-zero exit.
job() {
  local w=$1 s=$2; shift 2
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local out
  out=$(env STRATA_LR="$w" "${envs[@]}" "$RUN" -n "$w" -a "$s" -- "$EXACT" "$@" 2>&1) ||
    fail "$w workers, $s aggregators, ${envs[*]} $*: $out"
  [ "$(grep -c 'steps exact' <<<"$out")" -eq "$w" ] ||
    fail "not every worker reported exact results: $out"
}

# restarted WHAT SECONDS N EXACT COMMAND...: COMMAND runs a job under
# strata-run --restart in which a worker dies and is started again: it must
# end within SECONDS, with N workers reporting EXACT (a grep pattern) and
# the coordinator logging the rejoin. The output stays in $OUT.
restarted() {
  local what=$1 limit=$2 n=$3 exact=$4
  shift 4
  OUT=$(within "$limit" "$@" 2>&1) || fail "$what: the job did not go on: $OUT"
  [ "$(grep -c "$exact" <<<"$OUT")" -eq "$n" ] ||
    fail "$what: not every worker was exact: $OUT"
  grep -qE "worker rank [0-9]+ .* rejoined: it trains from clock" <<<"$OUT" ||
    fail "$what: no rejoin logged: $OUT"
}

# by_hand W S PROGRAM ARGS...: start every rank directly (no strata-run, so
# that no launcher stops the others) and wait for all; logs and exit codes
# land in $LDIR. ENV_OF_RANK[r] adds VAR=value settings to rank r.
by_hand() {
  start_ranks "$@"
  wait_ranks
}

# start_ranks W S PROGRAM ARGS...: by_hand's start; the pids are in PIDS.
start_ranks() {
  local w=$1 s=$2; shift 2
  local n=$((w + s)) r extra
  LDIR=$(mktemp -d)
  PIDS=()
  for ((r = 0; r < n; r++)); do
    read -r -a extra <<<"${ENV_OF_RANK[$r]:-}"
    env STRATA_RANK=$r STRATA_SIZE=$n STRATA_NUM_AGGREGATORS=$s \
      STRATA_COORD_FILE="$LDIR/coord" STRATA_HOST=127.0.0.1 \
      STRATA_JOB_SECRET=secret-of-the-job "${extra[@]}" \
      "$@" >"$LDIR/$r.log" 2>&1 &
    PIDS+=($!)
  done
}

# wait_ranks: wait for the ranks start_ranks started, keeping exit codes.
wait_ranks() {
  local r
  for r in "${!PIDS[@]}"; do
    wait "${PIDS[$r]}"
    echo $? >"$LDIR/$r.rc"
  done
}

# seeded: RANDOM from SEED (the caller's copy of STRATA_TEST_SEED, read
# before this file unset it) or from the clock, printed so that a failure
# can be run again.
seeded() {
  SEED=${SEED:-$((10#$(date +%N) % 100000))}
  RANDOM=$SEED
  echo "seed $SEED (STRATA_TEST_SEED=$SEED runs the same kills again)"
}

# wait_log R PATTERN SECONDS: wait until rank R logged PATTERN.
wait_log() {
  local t0=$SECONDS
  until grep -qsE "$2" "$LDIR/$1.log"; do
    if [ $((SECONDS - t0)) -gt "$3" ]; then
      kill -KILL "${PIDS[@]}" 2>/dev/null
      fail "rank $1 did not log /$2/ within $3 s: $(cat "$LDIR/$1.log")"
    fi
    sleep 0.1
  done
}

# expect_rank R CODE PATTERN: rank R exited with CODE and logged PATTERN.
expect_rank() {
  local rc
  rc=$(cat "$LDIR/$1.rc")
  [ "$rc" -eq "$2" ] || fail "rank $1 exited $rc, expected $2: $(cat "$LDIR/$1.log")"
  [ -z "$3" ] || grep -qE "$3" "$LDIR/$1.log" ||
    fail "rank $1 did not report /$3/: $(cat "$LDIR/$1.log")"
}

# within SECONDS COMMAND...: run COMMAND, failing if it takes longer.
within() {
  local limit=$1 t0=$SECONDS rc=0
  shift
  "$@" || rc=$?
  [ $((SECONDS - t0)) -le "$limit" ] || fail "took $((SECONDS - t0)) s, more than $limit s: $*"
  return $rc
}
