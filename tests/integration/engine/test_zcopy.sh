#!/usr/bin/env bash
# Zero copy on one host: over shm, aggregators reduce the workers'
# strata_alloc'ed gradients in place. Every step stays exact under bsp, ssp,
# asp and gssp while each worker overwrites its gradients as soon as its
# push completes (--scribble: a push that completed before the aggregators
# read it shows as a wrong model); STRATA_ZERO_COPY=0 copies instead; a
# worker that kills itself right after its push is out, before the others
# push that clock, leaves the job exact: its push is reduced from what it
# left (or not at all), never half. strata_free refuses the block the
# aggregators read. A push waited on before the rest of its clock
# completes, its gradients copied (--split).
RUN=$1 EXACT=$2
source "$(dirname "$0")/common.sh"
export STRATA_TRANSPORT=shm

# zjob W S [VAR=VALUE...] -- ARGS: job() whose every worker read in place;
# the output stays in $out.
zjob() {
  local w=$1 s=$2; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  out=$(env STRATA_LR="$w" "${envs[@]}" "$RUN" -n "$w" -a "$s" -- "$EXACT" \
    --alloc --alloc-grad --scribble --sleep "$@" 2>&1) ||
    fail "$w workers, $s aggregators, ${envs[*]} $*: $out"
  [ "$(grep -cE 'steps exact .*, [1-9][0-9]* pushes read in place' <<<"$out")" -eq "$w" ] ||
    fail "${envs[*]} $*: not every worker was exact and read in place: $out"
}

zjob 3 2 -- --steps 6 --try-free
[ "$(grep -c 'strata_free: .* holds gradients the aggregators read in place' <<<"$out")" -eq 3 ] ||
  fail "strata_free did not refuse the gradients read in place: $out"
zjob 1 1 -- --steps 4
echo "-- a push waited on before the rest of its clock is pushed"
# Partitions of 1216 floats: tensors 0-3 (6080) fill five exactly, so the
# push of 0-3 shares none with tensor 4; over 2 aggregators its reduction
# waits for the whole clock, and the wait has it copied instead.
zjob 3 2 STRATA_PARTITION_BYTES=4864 -- --steps 6 --split 4
zjob 4 2 STRATA_POLICY=ssp STRATA_STALENESS=1 -- \
  --steps 10 --check stale --staleness 1
zjob 3 2 STRATA_POLICY=asp -- --steps 10 --check stale --staleness inf
zjob 3 2 STRATA_POLICY=gssp -- --steps 10 --check stale --staleness inf
zjob 3 2 STRATA_OPTIMIZER=sum -- --steps 4 --check sum
echo "-- STRATA_ZERO_COPY=0 copies"
out=$(env STRATA_LR=2 STRATA_ZERO_COPY=0 "$RUN" -n 2 -a 2 -- "$EXACT" \
  --steps 3 --alloc --alloc-grad --scribble 2>&1) || fail "copy run: $out"
[ "$(grep -c 'steps exact .*, 0 pushes read in place' <<<"$out")" -eq 2 ] ||
  fail "STRATA_ZERO_COPY=0 still read in place: $out"
echo "-- a worker dead right after its push of clock 5"
out=$(env STRATA_TIMEOUT_MS=5000 STRATA_OPTIMIZER=sum "$RUN" -n 3 -a 2 -- \
  "$EXACT" --steps 12 --check sum --alloc-grad --die-after-push 5 \
  --victim 1 2>&1) || fail "the job did not go on: $out"
[ "$(grep -c '12 steps exact' <<<"$out")" -eq 2 ] ||
  fail "not both other workers were exact: $out"
grep -qE "worker rank 3 .* dropped: its first [56] clocks count" <<<"$out" ||
  fail "no boundary at clock 5 or 6: $out"
grep -oE "worker rank 3 .* dropped: its first [0-9]+ clocks count" <<<"$out"
echo "zero copy over shm: exact under bsp, ssp, asp, gssp and sum, off when" \
  "asked, and a worker dead after its push"
