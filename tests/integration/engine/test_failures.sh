#!/usr/bin/env bash
# The failures that must end in a clear error on every rank within
# STRATA_TIMEOUT_MS, never a hang: a layout mismatch, a wrong job secret
# (named even when a later attempt finds no coordinator), an unreachable
# coordinator, a FIFO as its address file, a worker killed in the middle
# of training (in a job that needs every worker), an
# aggregator no worker can reach, and one that dies while the coordinator
# is slow to see it. Every rank reports the job's first failure, as the
# coordinator names it, not what it saw of its consequences.
RUN=$1 EXACT=$2
source "$(dirname "$0")/common.sh"
export STRATA_TIMEOUT_MS=3000 STRATA_LR=3 STRATA_TRANSPORT=tcp
# The timeout, and start-up on a busy machine: a bound for a hang (five
# ASan ranks took 9 s to end on a layout mismatch at load 30, past 8 s,
# then the limit).
limit=24
# The jobs whose ranks must all join before failing join within 10 s (the
# 3 s timeout also bounds joining: at load 30 no ASan rank, not even the
# coordinator's own, had joined within it).
STRATA_JOIN_TIMEOUT_MS=10000 within $limit by_hand 3 2 "$EXACT" --mismatch
for r in 0 1 2 3 4; do
  expect_rank $r 3 "layout mismatch at tensor #2: rank 3 registered 'layer2.weight' fp32\[5001\], rank 2 registered 'layer2.weight' fp32\[5000\]"
done

ENV_OF_RANK=([3]=STRATA_JOB_SECRET=not-the-secret)
STRATA_JOIN_TIMEOUT_MS=10000 within $limit by_hand 2 2 "$EXACT"
unset ENV_OF_RANK
expect_rank 3 3 "cannot join the job: .* \(last error: authentication failed: .*STRATA_JOB_SECRET differs\)"
expect_rank 0 3 "1 of 4 ranks did not join .*\(ranks 3\)"
for r in 1 2; do expect_rank $r 3 "the job failed: 1 of 4 ranks did not join"; done

# The refused secret stays the reason when a later attempt finds no
# coordinator (it gave up on the job): "Connection reset by peer" or
# "refused" hid it.
ENV_OF_RANK=([1]="STRATA_JOB_SECRET=not-the-secret STRATA_LOG=debug")
start_ranks 1 1 "$EXACT"
unset ENV_OF_RANK
wait_log 1 "coordinator at .*STRATA_JOB_SECRET differs.*retrying" $limit
kill -KILL "${PIDS[0]}"
within $limit wait_ranks
expect_rank 1 3 "cannot join the job: .* \(last error: authentication failed: .*STRATA_JOB_SECRET differs\)"

LDIR=$(mktemp -d)
rc=0
within $limit env STRATA_RANK=2 STRATA_SIZE=3 STRATA_COORD=127.0.0.1:9 \
  STRATA_JOB_SECRET=x "$EXACT" >"$LDIR/2.log" 2>&1 || rc=$?
echo $rc >"$LDIR/2.rc"
expect_rank 2 3 "cannot join the job: the coordinator at 127.0.0.1:9 did not accept us within STRATA_TIMEOUT_MS=3000"

# STRATA_COORD_FILE naming a FIFO: reading it waited for a writer forever.
mkfifo "$LDIR/fifo"
rc=0
within $limit env STRATA_RANK=1 STRATA_SIZE=2 STRATA_COORD_FILE="$LDIR/fifo" \
  STRATA_JOB_SECRET=x "$EXACT" >"$LDIR/1.log" 2>&1 || rc=$?
echo $rc >"$LDIR/1.rc"
expect_rank 1 3 "STRATA_COORD_FILE=.*/fifo: is a FIFO, not a regular file"

# A job that needs all three workers (else it goes on: test_shrink.sh);
# they must all join first (at load 35 an ASan worker did not within 3 s).
STRATA_JOIN_TIMEOUT_MS=10000 STRATA_MIN_WORKERS=3 within $limit by_hand 3 2 \
  "$EXACT" --steps 50 --die-at 3
expect_rank 3 137 ""
for r in 0 1 2 4; do
  expect_rank $r 3 "worker rank 3 .*disconnected (before|without) finalizing"
done
# Under strata-run the launcher does not stop the others (this job cannot
# go on without a worker): each ends with the engine's message; the exit
# status is the killed worker's.
rc=0
out=$(within $limit env STRATA_JOIN_TIMEOUT_MS=10000 STRATA_MIN_WORKERS=3 \
  "$RUN" -n 3 -a 2 -- "$EXACT" --steps 50 --die-at 3 2>&1) || rc=$?
[ $rc -eq 137 ] || fail "strata-run exited $rc, not the killed worker's 137: $out"
[ "$(grep -cE "rank [0124] .*worker rank 3 .*disconnected (before|without) finalizing" <<<"$out")" -ge 4 ] ||
  fail "under strata-run, not every rank named the killed worker: $out"
# Aggregator 1 listens on shm only (STRATA_TRANSPORT differs between
# ranks): the workers cannot connect to it. Every rank says so, not that a
# worker left.
ENV_OF_RANK=([1]=STRATA_TRANSPORT=shm)
within $limit by_hand 2 2 "$EXACT"
unset ENV_OF_RANK
for r in 0 1 2 3; do
  expect_rank $r 3 "aggregator rank 1 .*does not listen on the tcp transport"
done

# Aggregator 1 dies while the coordinator is stopped: the workers see it at
# once, but wait for the coordinator (up to STRATA_TIMEOUT_MS) and report
# the failure as it names it.
export STRATA_TIMEOUT_MS=10000 STRATA_LOG=info STRATA_LR=2
start_ranks 2 2 "$EXACT" --steps 1000000 --sleep
wait_log 0 "layout of .* accepted" 60
kill -STOP "${PIDS[0]}"
kill -KILL "${PIDS[1]}"
sleep 3 # the workers lost aggregator 1 long ago
kill -CONT "${PIDS[0]}"
within 20 wait_ranks
expect_rank 1 137 ""
expect_rank 0 3 "aggregator rank 1 "
for r in 2 3; do expect_rank $r 3 "the job failed: .*aggregator rank 1 "; done
echo "every failure ends in the same clear error on every rank"
