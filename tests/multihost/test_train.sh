#!/usr/bin/env bash
# strata-train --job across 3 emulated hosts under a launcher other than
# strata-train's own (bug: it forced shm, launched only through strata-run
# and watched its workers through a board in /dev/shm): aggregators on h0
# and h1, a worker beside the one on h1 and one alone on h2, every rank
# strata-train. The workers' results must reach rank 0 over the job, and
# rank 0 must report a model that learned, with every step's push counted.
#   test_train.sh BUILD LAUNCH   (LAUNCH: env or mpirun)
BUILD=$1 LAUNCH=$2
source "$(dirname "$0")/common.sh" 3 -- "$@"
export PATH=$BUILD/bin:$PATH
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Loading Fashion-MNIST takes every rank a few seconds on a loaded machine.
log=$("$MHRUN" --launch "$LAUNCH" --spmd -n 2 -a 2 --map 0,1,1,2 --timeout 150 \
  -e STRATA_JOIN_TIMEOUT_MS=90000 -- "$BUILD/bin/strata-train" --job \
  --speeds 1,2 --policy bsp --hidden 64 --budget 3 --eval-every 1 \
  --base-ms 4 --json "$out/r.json" 2>&1) || fail "the job failed: $log"
line=$(grep '"policy": "bsp"' "$out/r.json") || fail "rank 0 wrote no result: $log"
num() { sed -n "s/.*\"$1\": \([0-9.e+]*\).*/\1/p" <<<"$line"; }
grep -q '"ok": true' <<<"$line" || fail "rank 0 lacks a worker's results: $line $log"
awk -v a="$(num final_acc)" 'BEGIN { exit !(a >= 0.6) }' ||
  fail "final accuracy $(num final_acc), expected >= 0.6: $log"
steps=$(num steps) pushed=$(num bytes_pushed)
model=$(((784 * 64 + 64 + 64 * 10 + 10) * 4))
[ "$steps" -gt 10 ] || fail "only $steps steps: $log"
[ "$pushed" -eq $((steps * model)) ] ||
  fail "$pushed bytes pushed for $steps steps of $model bytes: $log"
expect_count 1 '^\[(0|mpirun) h0\] bsp ' "$log" "rank 0's result line"
echo "strata-train --job across 3 hosts under $LAUNCH: $steps steps, accuracy $(num final_acc)"
