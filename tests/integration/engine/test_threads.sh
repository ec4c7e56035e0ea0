#!/usr/bin/env bash
# Small jobs for the ThreadSanitizer step of CI (label tsan): the progress
# thread, the command queue, gates and counters shared with application
# threads, over tcp and shm, synchronous and stale.
RUN=$1 EXACT=$2
source "$(dirname "$0")/common.sh"
export STRATA_TIMEOUT_MS=60000 # sanitizers are slow
job 2 2 STRATA_TRANSPORT=tcp -- --steps 4
job 3 1 STRATA_TRANSPORT=shm STRATA_POLICY=ssp STRATA_STALENESS=1 -- \
  --steps 6 --check stale --staleness 1 --sleep
job 2 1 STRATA_OPTIMIZER=sum -- --steps 3 --check sum --alloc
echo "engine jobs ran"
