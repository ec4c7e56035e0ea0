#!/usr/bin/env bash
# GSSP with regrouping, exact: every push of every worker applied once
# whatever groups it went through. Fast and slow halves swap speeds midway,
# so the coordinator groups them once ({0,1} fast, {2,3} slow) and then
# swaps them; also apply-on-arrival inside groups, an inter-group bound,
# three groups of six workers, and manual groups scaled by group size.
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
gssp 6 2 STRATA_GROUPS=3 -- --steps 24 --swap-at 8
gssp 4 1 STRATA_GROUPING=manual:0,0,1,1 STRATA_GSSP_SCALE=group STRATA_LR=2 -- --steps 16
grep -q "regroup" <<<"$OUT" && fail "manual groups were regrouped: $OUT"
echo "gssp regroups with every push applied once over $TRANSPORT"
