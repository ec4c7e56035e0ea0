#!/usr/bin/env bash
# GSSP with regrouping, exact: every push of every worker applied once
# whatever groups it went through. Fast and slow halves swap speeds midway,
# so the coordinator groups them once ({0,1} fast, {2,3} slow) and then
# swaps them; also apply-on-arrival inside groups, an inter-group bound,
# three groups of six workers, manual groups scaled by group size, and
# GDTopK's sparse pushes and dense flushes.
RUN=$1 EXACT=$2 TRANSPORT=$3
source "$(dirname "$0")/common.sh"
export STRATA_TRANSPORT=$TRANSPORT STRATA_POLICY=gssp

# gssp W S [VAR=VALUE...] -- ARGS: every worker exact; output in $OUT.
gssp() {
  local w=$1 s=$2; shift 2
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  OUT=$(env STRATA_LR="$w" STRATA_LOG=info "${envs[@]}" "$RUN" -n "$w" -a "$s" -- \
    "$EXACT" "$@" 2>&1) || fail "$w workers, ${envs[*]} $*: $OUT"
  [ "$(grep -c 'every push applied once' <<<"$OUT")" -eq "$w" ] ||
    fail "not every worker was exact: $OUT"
}

# groups_of W: the distinct groups worker W was in at its epoch ends.
groups_of() {
  sed -n "s/^worker $1: .*groups //p" <<<"$OUT" | tr ',' '\n' | sort -u | wc -l
}

# Timing decides the classes (noisy on a loaded machine): checked are that
# the halves were regrouped at least twice, moving workers.
for extra in "" STRATA_INTRA_STALENESS=2 STRATA_INTER_STALENESS=1; do
  gssp 4 2 $extra -- --steps 40 --swap-at 16
  grep -q "regroup 2 done" <<<"$OUT" || fail "$extra: no second regroup: $OUT"
  moved=0
  for w in 0 1 2 3; do [ "$(groups_of $w)" -lt 2 ] || moved=$((moved + 1)); done
  [ $moved -ge 2 ] || fail "$extra: only $moved workers moved: $OUT"
done
dense=$(sed -n 's/^worker 0: .*(\([0-9]*\) bytes pushed).*/\1/p' <<<"$OUT")

# GDTopK: sparse pushes through the regroups, exact at the end (what was
# sent plus the residual is every gradient), far fewer bytes.
gssp 4 2 STRATA_GDTOPK=1 STRATA_TOPK_FLUSH_EPOCHS=5 -- --steps 40 --swap-at 16 --topk
sparse=$(sed -n 's/^worker 0: .*(\([0-9]*\) bytes pushed).*/\1/p' <<<"$OUT")
[ "$sparse" -lt $((dense / 3)) ] ||
  fail "GDTopK pushed $sparse bytes, dense $dense: $OUT"
# The dense flush after every epoch empties the residual: in one
# synchronous group, with it four zero-gradient steps show every update;
# without it (a flush every 100 epochs) they do not.
gssp 4 2 STRATA_GROUPING=manual:0,0,0,0 STRATA_GDTOPK=1 -- \
  --steps 40 --topk --slow-ms 1 --drain 4
if env STRATA_LR=4 STRATA_GROUPING=manual:0,0,0,0 STRATA_GDTOPK=1 \
  STRATA_TOPK_FLUSH_EPOCHS=100 "$RUN" -n 4 -a 2 -- "$EXACT" --steps 40 \
  --topk --slow-ms 1 --drain 4 >/dev/null 2>&1; then
  fail "without a flush the residual still reached the model in 4 steps"
fi

gssp 6 2 STRATA_GROUPS=3 -- --steps 24 --swap-at 8
gssp 4 1 STRATA_GROUPING=manual:0,0,1,1 STRATA_GSSP_SCALE=group STRATA_LR=2 -- --steps 16
grep -q "regroup" <<<"$OUT" && fail "manual groups were regrouped: $OUT"
echo "gssp regroups with every push applied once over $TRANSPORT"
