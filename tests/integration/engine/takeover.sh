# Shared by the takeover tests (test_protect.sh, test_takeover.sh,
# test_spare.sh). Sourced after common.sh; expects $EXACT and RANDOM seeded.

# taken W S M [VAR=VALUE...] [-- ARGS...]: a job of W workers and S
# aggregators with M parity fragments every 2 clocks, the settings and
# exact.c's ARGS added (a policy and its check); a random time (0-0.6 s)
# after the first protected clock a random aggregator but rank 0 is
# SIGKILLed. The survivors rebuild its shard at the protected clock P,
# exactly (the CRC32C of the lost aggregator's snapshot), rank 0 takes it
# over and every worker resumes it at a clock R; every worker ends with the
# exact model in which that shard alone misses the updates of clocks
# P..R-1 (exact --takeover: under --check stale, of its own those the
# snapshot did not hold), and every rank but the victim ends well. The
# job's 400 steps take 1.3 s and more (each sleeps up to 4 ms), so the kill
# comes before its end; deadlines are for hangs.
# With TAKEN_SPARES=N the last N aggregators are spares (STRATA_SPARE=1):
# the victim is one of the others, and the first spare, holding no shard,
# rebuilds and takes the shard over instead of rank 0.
# With TAKEN_ROUNDS=N the program is $ROUNDS (rounds.c, esync or fedavg),
# N rounds of it with --takeover, and a round is the clock.
taken() {
  local w=$1 s=$2 m=$3 spares=${TAKEN_SPARES:-0} r taker=0
  local prog=("$EXACT" --steps 400 --sleep --spares "$spares")
  local done="400 steps exact"
  if [ -n "${TAKEN_ROUNDS:-}" ]; then
    prog=("$ROUNDS" --rounds "$TAKEN_ROUNDS" --sleep-ms 1)
    done="$TAKEN_ROUNDS rounds exact"
  fi
  local victim=$((1 + RANDOM % ($2 - 1 - spares))) ms=$((RANDOM % 600))
  local envs=() args=()
  shift 3
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  [ $# -gt 0 ] && shift && args=("$@")
  for ((r = s - spares; r < s; r++)); do ENV_OF_RANK[r]=STRATA_SPARE=1; done
  [ "$spares" -eq 0 ] || taker=$((s - spares))
  echo "   aggregator $victim killed $ms ms after the first protected clock"
  start_ranks "$w" "$s" env STRATA_LR="$w" STRATA_PROTECT_EVERY=2 \
    STRATA_PROTECT_PARITY="$m" STRATA_TIMEOUT_MS=20000 "${envs[@]}" \
    "${prog[@]}" --takeover "${args[@]}"
  [ "$spares" -eq 0 ] || ENV_OF_RANK=()
  wait_log 0 "every shard protected at clock" 60
  sleep "$((ms / 1000)).$(printf %03d $((ms % 1000)))"
  kill -KILL "${PIDS[$victim]}" || fail "aggregator $victim was gone before the kill"
  within 120 wait_ranks
  expect_rank "$victim" 137 ""
  local line="shard $victim taken over by aggregator rank $taker, resumed at clock ([0-9]+) \(protected at ([0-9]+)"
  expect_rank 0 0 "aggregator rank $victim .*; $line: clocks [0-9]+..-?[0-9]+ of it lost\), [0-9.]+ ms after the loss"
  grep -qE "shard $victim rebuilt at clock [0-9]+ by aggregator rank $taker in [0-9.]+ ms: [0-9]+ bytes, its CRC32C matches" "$LDIR/0.log" ||
    fail "the lost shard was not rebuilt exactly: $(cat "$LDIR/0.log")"
  grep -qE "shard $taker: the first clock of the shard taken over \([0-9]+\) applied" "$LDIR/$taker.log" ||
    fail "the taker never applied a clock of the shard: $(cat "$LDIR/$taker.log")"
  local said
  said=$(grep -oE "$line" "$LDIR/0.log")
  for ((r = 1; r < s; r++)); do
    [ "$r" -eq "$victim" ] || expect_rank "$r" 0 ""
  done
  for ((r = s; r < s + w; r++)); do
    expect_rank "$r" 0 "worker $((r - s)): $done"
    # The worker's own account of the takeover, the coordinator's clocks.
    grep -qF "aggregator rank $victim lost: $said" "$LDIR/$r.log" &&
      grep -qE "worker $((r - s)): shard $victim taken over by aggregator rank $taker, resumed at clock [0-9]+ \(protected at [0-9]+\): [0-9]+ of its [1-9][0-9]* (partitions|elements) without" "$LDIR/$r.log" ||
      fail "worker rank $r did not resume as the coordinator said ($said): $(cat "$LDIR/$r.log")"
    # What it logged of the broken link does not deny the takeover.
    ! grep -q "taken over only once" "$LDIR/$r.log" &&
      grep -qE "lost aggregator rank $victim .*said LOST, its shard may be taken over by a survivor" "$LDIR/$r.log" ||
      fail "worker rank $r misreported the loss it outlived: $(cat "$LDIR/$r.log")"
  done
  echo "   $said: $(grep -ohE "[0-9]+ of its [0-9]+ (partitions|elements) without (clocks|rounds) [0-9.-]+" "$LDIR/$s.log")"
  [ -n "${KEEP:-}" ] || rm -rf "$LDIR"
}
