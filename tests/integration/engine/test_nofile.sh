#!/usr/bin/env bash
# File descriptors: an aggregator of 24 workers over shm needs about 4 per
# worker. Under a soft limit of 64 with a higher hard limit, every rank
# raises its soft limit and the job runs; under a hard limit of 64, it fails
# at once naming the limit (ulimit -n), and no rank blames memory (the
# descriptors ran out inside memfd_create, which was reported as "out of
# memory" by every rank).
RUN=$1 EXACT=$2
source "$(dirname "$0")/common.sh"
export STRATA_TRANSPORT=shm
hard=$(ulimit -Hn)
[ "$hard" = unlimited ] || [ "$hard" -ge 1024 ] ||
  { echo "SKIP: the hard descriptor limit is $hard here (1024 needed)"; exit 77; }
out=$(ulimit -Sn 64 && job 24 1 -- --steps 2 2>&1) ||
  fail "24 shm workers under a soft limit of 64 (hard $hard): $out"
out=$(ulimit -n 64 && env STRATA_LR=24 "$RUN" -n 24 -a 1 -- "$EXACT" --steps 2 2>&1) &&
  fail "24 shm workers under a hard limit of 64 succeeded: $out"
grep -qE 'rank 0, an aggregator of 24 workers and the coordinator, needs about [0-9]+ file descriptors, and RLIMIT_NOFILE allows 64 .*ulimit -n' <<<"$out" ||
  fail "the aggregator did not name the descriptor limit: $out"
! grep -qi 'out of memory' <<<"$out" || fail "a rank blamed memory: $out"
echo "descriptors: the soft limit is raised to the hard one; a hard limit too low is named"
