#!/usr/bin/env bash
# Connecting to a coordinator that is not listening yet is what every rank
# but 0 does at the start of a torchrun-style job: the refused attempts are
# retried quietly (debug), and only the deadline is an error, said once,
# naming the coordinator's address and the last reason.
#   test_join_quiet.sh EXACT
EXACT=$1
RUN=unused
source "$(dirname "$0")/common.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
port=$(python3 -c 'import socket; s = socket.socket()
s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export STRATA_COORD=127.0.0.1:$port STRATA_HOST=127.0.0.1 STRATA_LR=2 \
  STRATA_NUM_AGGREGATORS=1 STRATA_JOB_SECRET=quiet-join-secret

# Rank 0 starts 1.5 s after the workers: they retry for that long.
pids=()
for r in 1 2; do
  STRATA_RANK=$r STRATA_SIZE=3 "$EXACT" --steps 2 >"$dir/$r.log" 2>&1 &
  pids+=($!)
done
sleep 1.5
STRATA_RANK=0 STRATA_SIZE=3 "$EXACT" --steps 2 >"$dir/0.log" 2>&1 || fail "rank 0: $(cat "$dir/0.log")"
for p in "${pids[@]}"; do wait "$p" || fail "a worker failed: $(cat "$dir"/*.log)"; done
[ "$(cat "$dir"/*.log | grep -c 'steps exact')" -eq 2 ] || fail "not exact: $(cat "$dir"/*.log)"
# (exact.c asks for the secret on purpose, to check that it is refused)
noisy=$(cat "$dir"/*.log | grep -E ' (ERROR|WARN) ' |
  grep -v 'strata_setting: STRATA_JOB_SECRET is secret' || true)
[ -z "$noisy" ] || fail "a normal late start logged errors or warnings: $noisy"

# Rank 0 never starts: one error at the deadline says what was tried.
rc=0
STRATA_RANK=1 STRATA_SIZE=2 STRATA_TIMEOUT_MS=2000 "$EXACT" --steps 1 >"$dir/alone.log" 2>&1 || rc=$?
[ $rc -ne 0 ] || fail "a worker without a coordinator succeeded"
errors=$(grep -E ' ERROR ' "$dir/alone.log" || true)
[ "$(grep -c . <<<"$errors")" -eq 1 ] || fail "expected one error line, got: $(cat "$dir/alone.log")"
grep -q "127.0.0.1:$port" <<<"$errors" && grep -qi 'refused' <<<"$errors" ||
  fail "the error does not name the address and the refusal: $errors"
echo "a late coordinator is waited for quietly; a missing one is one error naming it"
