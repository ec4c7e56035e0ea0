#!/usr/bin/env bash
# STRATA_SHARDS: more shards than aggregators, shard s held by aggregator
# s mod S (layout.h). Every step stays exact under bsp, ssp, asp and sum,
# with momentum, with one aggregator holding every shard and, over shm,
# with gradients read in place; each aggregator says which shards it holds.
# Fewer shards than aggregators, shards with protection, and a rank whose
# STRATA_SHARDS differs are clear errors.
RUN=$1 EXACT=$2 TRANSPORT=$3
source "$(dirname "$0")/common.sh"
export STRATA_TRANSPORT=$TRANSPORT

out=$(env STRATA_LR=3 STRATA_SHARDS=5 STRATA_LOG=info "$RUN" -n 3 -a 2 -- \
  "$EXACT" --steps 4 2>&1) || fail "5 shards on 2 aggregators: $out"
[ "$(grep -c 'steps exact' <<<"$out")" -eq 3 ] ||
  fail "not every worker reported exact results: $out"
grep -q "aggregator 0 holds shards 0, 2, 4 of 5: [1-9][0-9]* partitions" <<<"$out" ||
  fail "aggregator 0 did not say it holds shards 0, 2 and 4: $out"
grep -q "aggregator 1 holds shards 1, 3 of 5: [1-9][0-9]* partitions" <<<"$out" ||
  fail "aggregator 1 did not say it holds shards 1 and 3: $out"

job 4 2 STRATA_SHARDS=4 STRATA_POLICY=ssp STRATA_STALENESS=1 -- \
  --steps 10 --check stale --staleness 1 --sleep
job 3 3 STRATA_SHARDS=7 STRATA_POLICY=asp -- \
  --steps 8 --check stale --staleness inf --sleep
job 2 2 STRATA_SHARDS=5 STRATA_MOMENTUM=0.9 STRATA_WEIGHT_DECAY=0 -- \
  --steps 5 --check momentum --lr 2 --momentum 0.9
job 3 2 STRATA_SHARDS=4 STRATA_OPTIMIZER=sum -- --steps 4 --check sum
# One aggregator holding three shards: a push goes to it alone (no PUSHED).
job 2 1 STRATA_SHARDS=3 -- --steps 4
if [ "$TRANSPORT" = shm ]; then
  out=$(env STRATA_LR=3 STRATA_SHARDS=5 "$RUN" -n 3 -a 2 -- "$EXACT" \
    --steps 5 --alloc --alloc-grad --scribble --sleep 2>&1) ||
    fail "5 shards on 2 aggregators, read in place: $out"
  [ "$(grep -cE 'steps exact .*, [1-9][0-9]* pushes read in place' <<<"$out")" -eq 3 ] ||
    fail "not every worker was exact and read in place: $out"
fi

# refused VAR=VALUE... -- PATTERN: a job of 1 worker and 2 aggregators
# fails naming PATTERN.
refused() {
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  out=$(env "${envs[@]}" "$RUN" -n 1 -a 2 -- "$EXACT" --steps 2 2>&1) &&
    fail "${envs[*]} was accepted: $out"
  grep -qE "$2" <<<"$out" || fail "${envs[*]}: no word of /$2/: $out"
}
refused STRATA_SHARDS=1 -- \
  "STRATA_SHARDS=1 is fewer than the 2 aggregators"
refused STRATA_SHARDS=3 STRATA_PROTECT_EVERY=2 -- \
  "STRATA_SHARDS=3 on 2 aggregators with STRATA_PROTECT_EVERY: checkpoints and protection cover one shard per aggregator"

export STRATA_SHARDS=4
ENV_OF_RANK=([2]=STRATA_SHARDS=3)
within 60 by_hand 1 2 "$EXACT" --steps 2
unset ENV_OF_RANK
[ "$(cat "$LDIR/0.rc")" -ne 0 ] || fail "a rank with STRATA_SHARDS=3 was let in"
grep -qE "settings differ between ranks: .* has STRATA_SHARDS=3 but rank 0 has 4" "$LDIR/0.log" ||
  fail "the differing STRATA_SHARDS was not named: $(cat "$LDIR/0.log")"
echo "more shards than aggregators hold over $TRANSPORT"
