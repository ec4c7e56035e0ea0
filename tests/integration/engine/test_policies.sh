#!/usr/bin/env bash
# The policies and update rules, each checked on every pull: the staleness
# bound of SSP (s = 0, 1, 3) and ASP with uneven, sleeping workers; the sum
# of aggregators that only sum; momentum replayed exactly; parameters in
# strata_alloc memory (no staging copy) and one partition per shard.
RUN=$1 EXACT=$2 TRANSPORT=$3
source "$(dirname "$0")/common.sh"
export STRATA_TRANSPORT=$TRANSPORT
for s in 0 1 3; do
  job 4 2 STRATA_POLICY=ssp STRATA_STALENESS=$s -- \
    --steps 12 --check stale --staleness $s --sleep
done
job 3 2 STRATA_POLICY=asp -- --steps 12 --check stale --staleness inf --sleep
job 3 2 STRATA_OPTIMIZER=sum -- --steps 4 --check sum
job 2 2 STRATA_MOMENTUM=0.9 STRATA_WEIGHT_DECAY=0 -- \
  --steps 5 --check momentum --lr 2 --momentum 0.9
out=$(env STRATA_LR=2 "$RUN" -n 2 -a 2 -- "$EXACT" --steps 3 --alloc 2>&1) ||
  fail "strata_alloc run: $out"
grep -q "0 staging copies" <<<"$out" || fail "strata_alloc memory was staged: $out"
job 3 2 STRATA_PARTITION_BYTES=4M -- --steps 3
echo "ssp, asp, sum, momentum and strata_alloc hold over $TRANSPORT"
