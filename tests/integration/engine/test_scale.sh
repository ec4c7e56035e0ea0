#!/usr/bin/env bash
# Many workers on one host: 128 workers of one aggregator over shm and over
# tcp, each job integer-exact; then 256 over shm under a soft descriptor
# limit of 1024 (a common default; the aggregator needs about 4 per worker
# over shm), which every rank raises to the hard limit. Slow: 128 processes
# on 2 cores take about 10 s a job, far more on a loaded machine, so joining
# gets STRATA_JOIN_TIMEOUT_MS to spare.
#   test_scale.sh RUN EXACT
RUN=$1 EXACT=$2
source "$(dirname "$0")/common.sh"
export STRATA_PARTITION_BYTES=65536 STRATA_JOIN_TIMEOUT_MS=240000 \
  STRATA_TIMEOUT_MS=60000
hard=$(ulimit -Hn)
for tp in shm tcp; do
  start=$SECONDS
  job 128 1 STRATA_TRANSPORT=$tp -- --steps 2
  echo "128 workers over $tp: exact in $((SECONDS - start)) s"
done
[ "$hard" = unlimited ] || [ "$hard" -ge 2048 ] ||
  { echo "SKIP: the hard descriptor limit is $hard here (2048 needed)"; exit 77; }
start=$SECONDS
(ulimit -Sn 1024 && job 256 1 STRATA_TRANSPORT=shm -- --steps 2) || exit 1
echo "256 workers over shm under a soft limit of 1024 (hard $hard): exact in $((SECONDS - start)) s"
