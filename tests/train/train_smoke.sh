#!/usr/bin/env bash
# A tiny strata-train run: it must learn, and write its JSON and plot; bad
# options, output paths and a bad data directory must fail with a message
# naming them.
set -euo pipefail
train=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$train" --policy local --budget 2 --eval-every 0.5 --base-ms 1 \
         --json "$out/r.json" --plot "$out/r.png" >"$out/log" 2>&1 ||
  { cat "$out/log"; fail "local run exited with $?"; }
cat "$out/log"
grep -q '"policy": "local"' "$out/r.json" || fail "no local result in JSON"
acc=$(sed -n 's/.*"final_acc": \([0-9.]*\).*/\1/p' "$out/r.json")
awk -v a="$acc" 'BEGIN { exit !(a >= 0.70) }' ||
  fail "final accuracy $acc after 2 s of SGD, expected >= 0.70"
[ "$(head -c 4 "$out/r.png" | od -An -c | tr -d ' ')" = "211PNG" ] ||
  fail "no PNG written"

set +e
"$train" --policy sgd >"$out/bad" 2>&1
rc=$?
set -e
[ $rc -eq 2 ] || fail "unknown policy: exit status $rc, expected 2"
grep -q "unknown policy 'sgd'" "$out/bad" || fail "unknown policy not named"

# Output paths are checked before the runs (they were written only after
# them: a typo cost every result, and a bad --plot put the PNG on stdout).
for opt in --json --plot; do
  set +e
  "$train" --policy local --budget 30 $opt "$out/no/such/dir/r" >"$out/bad" 2>&1
  rc=$?
  set -e
  [ $rc -eq 2 ] || fail "bad $opt path: exit status $rc, expected 2"
  grep -q -- "$opt $out/no/such/dir/r: cannot create: No such file" "$out/bad" ||
    { cat "$out/bad"; fail "bad $opt path not named"; }
  ! grep -q '^== local' "$out/bad" || fail "ran with a bad $opt path"
done

mkdir "$out/data"
printf 'not gzip' >"$out/data/t10k-images-idx3-ubyte.gz"
set +e
"$train" --policy local --budget 1 --data "$out/data" >"$out/bad" 2>&1
rc=$?
set -e
[ $rc -eq 1 ] || fail "bad data: exit status $rc, expected 1"
grep -q "t10k-images-idx3-ubyte.gz: bad IDX magic" "$out/bad" ||
  { cat "$out/bad"; fail "bad data file not named"; }
echo "PASS"
