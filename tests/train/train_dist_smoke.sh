#!/usr/bin/env bash
# A tiny distributed strata-train run: 2 workers at different speeds and 2
# aggregators over shm, under bsp, asp, esync and gssp. Each job must end on
# its own (the driver fails a job that outstays its budget), every worker
# must have trained and pushed through the engine, and the model must learn.
set -euo pipefail
train=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# A short timeout: a worker left blocked at the end of the budget would
# fail the job instead of waiting for the default 30 s.
STRATA_TIMEOUT_MS=5000 "$train" --speeds 1,2 --aggregators 2 \
    --compare bsp,asp,esync --budget 2 --eval-every 0.5 --base-ms 2 \
    --json "$out/r.json" --no-plot >"$out/log" 2>&1 ||
  { cat "$out/log"; fail "the comparison exited with $?"; }
cat "$out/log"
model=$((203530 * 4)) # bytes of the MLP's fp32 parameters
for p in bsp asp esync; do
  line=$(grep "\"policy\": \"$p\"" "$out/r.json") || fail "no $p in the JSON"
  num() { sed -n "s/.*\"$1\": \([0-9.e+]*\).*/\1/p" <<<"$line"; }
  grep -q '"ok": true' <<<"$line" || fail "$p: the job failed"
  awk -v a="$(num final_acc)" 'BEGIN { exit !(a >= 0.70) }' ||
    fail "$p: final accuracy $(num final_acc), expected >= 0.70"
  steps=$(num steps)
  pushed=$(num bytes_pushed)
  [ "$steps" -gt 10 ] || fail "$p: only $steps steps"
  if [ $p = esync ]; then
    # Whole models at the end of each round, rounds of several local steps.
    rounds=$((pushed / model))
    [ "$pushed" -eq $((rounds * model)) ] && [ "$rounds" -ge 4 ] &&
      [ "$rounds" -lt "$steps" ] ||
      fail "$p: $pushed bytes pushed in $steps steps: not rounds of models"
  else
    # Every step pushes the whole model through the engine.
    [ "$pushed" -eq $((steps * model)) ] ||
      fail "$p: $pushed bytes pushed for $steps steps of $model bytes"
  fi
done
grep -q "^bsp .*clocks g0=" "$out/log" || fail "no live bsp progress line"
grep -q "^asp .*clocks g0=.* g1=" "$out/log" ||
  fail "no per-worker clocks in asp's progress lines"
grep -q "^esync .* round [0-9]" "$out/log" || fail "no rounds in esync's lines"
# GSSP: the workers' epoch ends (every 31 steps on 2,000 samples) report
# their paces, and the engine splits the two into groups of their own.
STRATA_TIMEOUT_MS=5000 "$train" --speeds 1,2 --aggregators 2 --policy gssp \
    --groups 2 --train-size 2000 --budget 2 --eval-every 0.5 --base-ms 2 \
    --json "$out/g.json" --no-plot >"$out/glog" 2>&1 ||
  { cat "$out/glog"; fail "gssp exited with $?"; }
cat "$out/glog"
grep -q '"policy": "gssp".*"ok": true' "$out/g.json" || fail "gssp failed"
grep -q "^gssp .*clocks g0=[0-9]* g1=[0-9]*" "$out/glog" ||
  fail "gssp never split the workers into two groups"
echo "PASS"
