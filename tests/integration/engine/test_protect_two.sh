#!/usr/bin/env bash
# Two aggregators lost at once with STRATA_PROTECT_PARITY=2: both shards are
# rebuilt exactly from the fragments the survivors hold (any two of a
# stripe's fragments may be missing), each is taken over by a survivor of
# its own, and every worker ends exact, each lost shard without its own
# clocks P..R-1. A third aggregator lost before they were taken over is
# more than the parity rebuilds: the job fails naming the three.
RUN=$1 EXACT=$2
SEED=${STRATA_TEST_SEED:-} # common.sh unsets every STRATA_ variable
source "$(dirname "$0")/common.sh"
export STRATA_TRANSPORT=tcp STRATA_LOG=info
[ -n "$RUN" ] || fail "usage: $0 STRATA_RUN EXACT"

seeded

# start W S STEPS: W workers and S aggregators with 2 parity fragments every
# 2 clocks, exact --takeover; waits for the first protected clock.
start() {
  ENV_OF_RANK=()
  start_ranks "$1" "$2" env STRATA_LR="$1" STRATA_PROTECT_EVERY=2 \
    STRATA_PROTECT_PARITY=2 STRATA_TIMEOUT_MS=20000 \
    "$EXACT" --steps "$3" --sleep --takeover
  wait_log 0 "every shard protected at clock" 60
}

# at_once V...: aggregators V... SIGKILLed while the workers are stopped,
# so that the coordinator sees every loss before any takeover (one needs
# every worker's LOST); the workers go on once it logged each. Without
# the stop a small shard can be rebuilt and taken over in 2 ms, before
# the coordinator sees the other process die: a later loss, no longer
# protected, not two at once.
at_once() {
  local v r pids=()
  for ((r = S; r < S + W; r++)); do kill -STOP "${PIDS[$r]}"; done
  for v in "$@"; do pids+=("${PIDS[$v]}"); done
  kill -KILL "${pids[@]}" || fail "aggregator $* was gone before the kill"
  for v in "$@"; do
    wait_log 0 "aggregator rank $v \(pid [0-9]+ on [^)]*\) disconnected" 60
  done
  for ((r = S; r < S + W; r++)); do kill -CONT "${PIDS[$r]}"; done
}

# victims S N: N distinct aggregator ranks but 0 (the coordinator), random.
victims() {
  local s=$1 n=$2 v picked=()
  while [ "${#picked[@]}" -lt "$n" ]; do
    v=$((1 + RANDOM % (s - 1)))
    [[ " ${picked[*]} " == *" $v "* ]] || picked+=("$v")
  done
  echo "${picked[@]}"
}

echo "-- two aggregators of 4 killed at once at a random moment: both shards taken over, every worker exact"
W=2 S=4
read -r A B <<<"$(victims $S 2)"
ms=$((RANDOM % 600))
echo "   aggregators $A and $B killed $ms ms after the first protected clock"
start $W $S 400
sleep "$((ms / 1000)).$(printf %03d $((ms % 1000)))"
at_once "$A" "$B"
within 120 wait_ranks
expect_rank "$A" 137 ""
expect_rank "$B" 137 ""
takers=()
for v in $A $B; do
  line="shard $v taken over by aggregator rank ([0-9]+), resumed at clock ([0-9]+) \(protected at ([0-9]+)"
  expect_rank 0 0 "aggregator rank $v .*; $line: clocks [0-9]+..-?[0-9]+ of it lost\), [0-9.]+ ms after the loss"
  said=$(grep -oE "$line" "$LDIR/0.log")
  t=$(sed -E "s/.*aggregator rank ([0-9]+),.*/\1/" <<<"$said")
  [ "$t" != "$A" ] && [ "$t" != "$B" ] || fail "shard $v was taken over by a lost aggregator: $said"
  takers+=("$t")
  grep -qE "shard $v rebuilt at clock [0-9]+ by aggregator rank $t in [0-9.]+ ms: [0-9]+ bytes, its CRC32C matches" "$LDIR/0.log" ||
    fail "shard $v was not rebuilt exactly: $(cat "$LDIR/0.log")"
  grep -qE "shard $t: the first clock of the shard taken over \([0-9]+\) applied" "$LDIR/$t.log" ||
    fail "aggregator $t never applied a clock of shard $v: $(cat "$LDIR/$t.log")"
  for ((r = S; r < S + W; r++)); do
    # The worker's own account of each takeover, the coordinator's clocks.
    grep -qF "aggregator rank $v lost: $said" "$LDIR/$r.log" &&
      grep -qE "worker $((r - S)): shard $v taken over by aggregator rank $t, resumed at clock [0-9]+ \(protected at [0-9]+\): [0-9]+ of its [1-9][0-9]* partitions without" "$LDIR/$r.log" ||
      fail "worker rank $r did not resume shard $v as the coordinator said ($said): $(cat "$LDIR/$r.log")"
  done
  echo "   $said"
done
[ "${takers[0]}" != "${takers[1]}" ] || fail "both shards went to aggregator ${takers[0]}: $(cat "$LDIR/0.log")"
for ((r = 1; r < S; r++)); do
  [ "$r" -eq "$A" ] || [ "$r" -eq "$B" ] || expect_rank "$r" 0 ""
done
for ((r = S; r < S + W; r++)); do expect_rank "$r" 0 "worker $((r - S)): 400 steps exact"; done
[ -n "${KEEP:-}" ] || rm -rf "$LDIR"

echo "-- three aggregators of 5 killed at once: more than 2 parity fragments rebuild, the job fails naming them"
W=2 S=5
read -r A B C <<<"$(victims $S 3)"
start $W $S 1000000
at_once "$A" "$B" "$C"
within 90 wait_ranks
names=$(printf '%s\n' "$A" "$B" "$C" | sort -n | tr '\n' ' ')
read -r X Y Z <<<"$names"
expect_rank 0 3 "aggregator ranks $X, $Y and $Z lost before their shards were taken over: 2 parity fragments \(STRATA_PROTECT_PARITY\) rebuild at most 2"
for ((r = S; r < S + W; r++)); do expect_rank "$r" 3 "the job failed: .*aggregator ranks $X, $Y and $Z lost"; done
grep -q "taken over by aggregator rank" "$LDIR/0.log" && fail "a shard was taken over: $(cat "$LDIR/0.log")"
[ -n "${KEEP:-}" ] || rm -rf "$LDIR"
echo "two aggregators lost at once: both shards rebuilt and taken over, exact; a third loss named"
