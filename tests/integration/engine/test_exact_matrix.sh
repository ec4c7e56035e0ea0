#!/usr/bin/env bash
# Every worker's parameters are exactly the expected model after every step,
# for 1-8 workers x 1-4 aggregators, over the transport given.
RUN=$1 EXACT=$2 TRANSPORT=$3
source "$(dirname "$0")/common.sh"
export STRATA_TRANSPORT=$TRANSPORT
for w in 1 2 3 4 5 6 7 8; do
  for s in 1 2 3 4; do
    job "$w" "$s" -- --steps 3
  done
done
echo "exact for 1-8 workers x 1-4 aggregators over $TRANSPORT"
