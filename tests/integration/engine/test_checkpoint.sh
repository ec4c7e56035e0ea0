#!/usr/bin/env bash
# STRATA_CHECKPOINT_DIR: a job checkpoints its shards every K clocks, a job
# started again resumes exactly from the newest complete checkpoint, a
# corrupt or torn file is refused by name and the one before it used,
# another layout's files are not taken, and a directory that cannot be
# written is a clear error.
RUN=$1 EXACT=$2
source "$(dirname "$0")/common.sh"
export STRATA_TRANSPORT=tcp
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT

# ckjob ARGS...: a job of 2 workers and 2 aggregators checkpointing to $DIR
# every 2 clocks; its output in $OUT.
ckjob() {
  OUT=$(env STRATA_LR=2 STRATA_LOG=info STRATA_CHECKPOINT_DIR="$DIR" \
    STRATA_CHECKPOINT_EVERY=2 "$RUN" -n 2 -a 2 -- "$EXACT" "$@" 2>&1) ||
    fail "checkpointed job $*: $OUT"
  [ "$(grep -c 'steps exact' <<<"$OUT")" -eq 2 ] ||
    fail "not every worker reported exact results ($*): $OUT"
}
f() { echo "$DIR/strata-shard-$1-of-2.$2.ckpt"; }
# newest [BELOW]: the newest clock (below BELOW) both shards have a file of,
# 0 if none. A checkpoint is skipped while the previous one is still being
# written, so which clocks have files depends on the disk and the load.
newest() {
  local c
  for c in $( (cd "$DIR" && ls) | sed -n 's/^strata-shard-0-of-2\.\([0-9]*\)\.ckpt$/\1/p' | sort -rn); do
    if [ "$c" -lt "${1:-999999}" ] && [ -f "$(f 1 "$c")" ]; then
      echo "$c"
      return
    fi
  done
  echo 0
}

ckjob --steps 5
C1=$(newest)
[ "$C1" -ge 2 ] || fail "no complete checkpoint after 5 clocks: $(ls "$DIR") $OUT"

# Resumed from C1: the workers' initial model has C1 clocks of updates; the
# clocks count on, so the first checkpoint of the job is C1 + 2 (the writer
# is idle then).
ckjob --steps 3 --resume "$C1"
grep -q "resuming from $(f 0 "$C1")" <<<"$OUT" || fail "shard 0 did not say it resumed: $OUT"
C2=$((C1 + 2))
[ "$(newest)" -eq "$C2" ] || fail "no checkpoint of clock $C2: $(ls "$DIR")"

# A bit flipped in shard 1's newest: refused by name, C1 used instead
# (the job of 3 steps from C1 left its files).
printf '\x55' | dd of="$(f 1 "$C2")" bs=1 seek=100 conv=notrunc status=none
ckjob --steps 1 --resume "$C1"
grep -q "checkpoint $(f 1 "$C2") refused: corrupt" <<<"$OUT" ||
  fail "the corrupt file was not refused by name: $OUT"
grep -q "resuming from $(f 0 "$C1") (clock $C1), the checkpoint before the refused $(f 1 "$C2")" <<<"$OUT" ||
  fail "shard 0 did not resume from clock $C1 naming the refused file: $OUT"

# Torn (shard 0's file of C1 cut short): back to the one before, if any.
truncate -s -7 "$(f 0 "$C1")"
C0=$(newest "$C1")
ckjob --steps 2 --resume "$C0"
grep -q "checkpoint $(f 0 "$C1") refused: torn" <<<"$OUT" || fail "the torn file was not refused: $OUT"

# Another layout: nothing taken, the initial model used.
STRATA_PARTITION_BYTES=8192 ckjob --steps 1
grep -q "refused: another layout" <<<"$OUT" || fail "another layout's checkpoint was taken: $OUT"
grep -q "none complete for all 2 shards" <<<"$OUT" || fail "no word of starting afresh: $OUT"

# One partition, two aggregators: shard 1 has no model, writes no file, and
# the checkpoint is complete without it.
rm -f "$DIR"/*
STRATA_PARTITION_BYTES=1M ckjob --steps 3
[ "$(ls "$DIR")" = "$(basename "$(f 0 2)")" ] || fail "expected shard 0's file of clock 2 alone: $(ls "$DIR")"
STRATA_PARTITION_BYTES=1M ckjob --steps 1 --resume 2
grep -q "resuming from $(f 0 2)" <<<"$OUT" || fail "the shard without partitions was waited for: $OUT"

out=$(env STRATA_LR=2 STRATA_CHECKPOINT_DIR="$DIR/none" "$RUN" -n 1 -a 1 -- "$EXACT" --steps 1 2>&1) &&
  fail "a missing checkpoint directory was accepted: $out"
grep -q "STRATA_CHECKPOINT_DIR=$DIR/none is not a directory" <<<"$out" ||
  fail "the missing directory was not named: $out"
echo "checkpoints written every 2 clocks, resumed exactly, corrupt and torn files refused"
