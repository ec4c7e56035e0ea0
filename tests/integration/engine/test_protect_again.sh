#!/usr/bin/env bash
# Protection goes on after a takeover by a spare: 3 aggregators and a spare
# (rank 3), one parity fragment (m = 1). Aggregator A (1 or 2, random) is
# SIGKILLed at a random moment once a clock is protected: the spare
# rebuilds its shard and takes it over, holding A's place in the stripes
# from then on, and every shard is protected again at a later clock. Then
# the other, B, is SIGKILLed: the survivors (the spare sending the
# fragments of both its places) rebuild B's shard, rank 0 takes it over
# (the spare has no room left), and every worker ends exact, each lost
# shard without its own clocks P..R-1. One spare and m = 1 are enough for
# two losses one after the other: after the first takeover every live
# aggregator holds one place but the spare, whose own place has no data,
# so B's loss erases one fragment of each stripe. (The spare itself lost
# second would erase two: that fails, named; not tested here.)
RUN=$1 EXACT=$2
SEED=${STRATA_TEST_SEED:-} # common.sh unsets every STRATA_ variable
source "$(dirname "$0")/common.sh"
export STRATA_TRANSPORT=tcp STRATA_LOG=info
[ -n "$RUN" ] || fail "usage: $0 STRATA_RUN EXACT"

seeded

pause() { sleep "0.$(printf %03d $((RANDOM % 300)))"; }

W=2 S=4 STEPS=1500
A=$((1 + RANDOM % 2)) B=$((3 - A))
echo "-- aggregator $A, then $B killed, each once a clock is protected: the spare takes $A, rank 0 takes $B, every worker exact"
ENV_OF_RANK=([3]=STRATA_SPARE=1)
start_ranks $W $S env STRATA_LR=$W STRATA_PROTECT_EVERY=2 STRATA_PROTECT_PARITY=1 \
  STRATA_TIMEOUT_MS=20000 "$EXACT" --steps $STEPS --sleep --takeover --spares 1
ENV_OF_RANK=()
wait_log 0 "every shard protected at clock" 60
pause
kill -KILL "${PIDS[$A]}" || fail "aggregator $A was gone before the kill"
wait_log 0 "every shard protected again at clock [0-9]+ after the takeover by a spare" 120
pause
kill -KILL "${PIDS[$B]}" || fail "aggregator $B was gone before the kill (the job ended first?)"
within 120 wait_ranks
expect_rank "$A" 137 ""
expect_rank "$B" 137 ""
for pair in "$A 3" "$B 0"; do
  read -r v t <<<"$pair"
  line="shard $v taken over by aggregator rank $t, resumed at clock ([0-9]+) \(protected at ([0-9]+)"
  expect_rank 0 0 "aggregator rank $v .*; $line: clocks [0-9]+..-?[0-9]+ of it lost\), [0-9.]+ ms after the loss"
  grep -qE "shard $v rebuilt at clock [0-9]+ by aggregator rank $t in [0-9.]+ ms: [0-9]+ bytes, its CRC32C matches" "$LDIR/0.log" ||
    fail "shard $v was not rebuilt exactly: $(cat "$LDIR/0.log")"
  said=$(grep -oE "$line" "$LDIR/0.log")
  for ((r = S; r < S + W; r++)); do
    grep -qF "aggregator rank $v lost: $said" "$LDIR/$r.log" ||
      fail "worker rank $r did not resume shard $v as the coordinator said ($said): $(cat "$LDIR/$r.log")"
  done
  echo "   $said"
done
grep -q "shard 3: holds the place of shard $A in the protection" "$LDIR/3.log" ||
  fail "the spare did not take shard $A's place: $(cat "$LDIR/3.log")"
# The second rebuild used a clock agreed after the first takeover.
p1=$(grep -oE "shard $A taken over by aggregator rank 3, resumed at clock [0-9]+" "$LDIR/0.log" | grep -oE "[0-9]+$")
p2=$(grep -oE "shard $B rebuilt at clock [0-9]+" "$LDIR/0.log" | grep -oE "[0-9]+$")
[ "$p2" -gt "$p1" ] || fail "shard $B was rebuilt at clock $p2, not after the first takeover's resume clock $p1"
for r in 0 3; do expect_rank "$r" 0 ""; done
for ((r = S; r < S + W; r++)); do expect_rank "$r" 0 "worker $((r - S)): $STEPS steps exact"; done
[ -n "${KEEP:-}" ] || rm -rf "$LDIR"
echo "two losses one after the other, the first taken over by a spare: both shards rebuilt and taken over, exact"
