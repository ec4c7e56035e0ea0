#!/usr/bin/env bash
# GSSP with regrouping, exact: every push of every worker applied once
# whatever groups it went through. The engine measures every worker's steps
# (no epoch ends needed), probes, then groups the fast half and the slow half;
# worker 0 then slows down and moves into the slow group, whose members stay,
# and later speeds up and moves back. Also apply-on-arrival inside groups, an
# inter-group bound, three groups of six, manual groups scaled by group size,
# and GDTopK's sparse pushes and dense flushes.
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

# regroup_groups: the workers' groups after each regroup, in order, one
# line each ("0,1,1": worker 0 in group 0, workers 1 and 2 in group 1), as
# the coordinator logs them. The workers' own clocks do not line up across
# groups (the fast one runs ahead), so who shared a group when is read from
# the regroups, not from each worker's group at the same clock of its own.
regroup_groups() {
  sed -n "s/.*regroup [0-9]* done: .*workers' groups //p" <<<"$OUT"
}

# Timing decides the groups (noisy on a loaded machine): worker 0, fast,
# then slow from its step 18, fast again from 36, beside two slow workers.
# Checked: worker 0 was with neither slow worker before it slowed down,
# with one of them while slow, and with neither again at the end. Steps
# of 8 and 90 ms: a loaded 2-core machine stretches every step by its
# wake-up latency (tens of ms at load 8), and with 3 and 30 ms the fast
# worker measured as slow as the others (all in one group; 1 run in 10
# at load 6-11). --drain bounds the zero-gradient steps worker 0 takes at
# the end until the slow workers' last pushes reach it (it stops as soon
# as they have: a hang bound).
# Exactness must hold in every run; the groups follow measured speeds, which
# a loaded machine can still blur (three equally slow workers measured
# apart and put in three groups, once at load 23), so a run whose groups
# miss the pattern is run once more, and the pattern must show in one.
speeds=(--steps 54 --move-at 18,36 --fast-ms 8 --slow-ms 90 --drain 4000)
# regrouped: why the regroups miss the pattern (worker 0 apart from both
# slow workers, then with one of them, then apart again), or nothing.
regrouped() {
  regroup_groups | awk -F, '
    { joined = $1 != "-" && ($1 == $2 || $1 == $3) }
    state == 0 && !joined { state = 1; next }
    state == 1 && joined { state = 2; next }
    state == 2 && !joined { state = 3 }
    END {
      if (state == 0) print "worker 0 was never apart from the slow ones"
      else if (state == 1) print "worker 0 did not join the slow ones"
      else if (state == 2) print "worker 0 did not leave the slow ones"
    }'
}
for extra in "" STRATA_INTRA_STALENESS=2 STRATA_INTER_STALENESS=1; do
  for try in 1 2; do
    gssp 3 2 $extra -- "${speeds[@]}"
    why=$(regrouped)
    [ -z "$why" ] && break
    [ "$try" -eq 2 ] &&
      fail "$extra: $why (twice; regroups: $(regroup_groups | tr '\n' ' ')): $OUT"
    echo "$extra: $why; once more (groups follow measured speeds)" >&2
  done
done
dense=$(sed -n 's/^worker 0: .*(\([0-9]*\) bytes pushed).*/\1/p' <<<"$OUT")

# GDTopK: sparse pushes through the regroups, exact at the end (what was
# sent plus the residual is every gradient), far fewer bytes.
gssp 3 2 STRATA_GDTOPK=1 STRATA_TOPK_FLUSH_EPOCHS=5 -- "${speeds[@]}" --topk
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

gssp 6 2 STRATA_GROUPS=3 -- --steps 24 --move-at 8
gssp 4 1 STRATA_GROUPING=manual:0,0,1,1 STRATA_GSSP_SCALE=group STRATA_LR=2 -- --steps 16
grep -q "regroup" <<<"$OUT" && fail "manual groups were regrouped: $OUT"
echo "gssp regroups with every push applied once over $TRANSPORT"
