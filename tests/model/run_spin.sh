#!/usr/bin/env bash
# Model-checks a Promela model exhaustively with spin and fails on any error.
#   run_spin.sh CC MODEL.pml [-DNAME=VALUE...]
# spin -a generates the verifier (pan.c) in a scratch directory, CC compiles
# it for a safety search (assertions and invalid end states: a process
# blocked for good, i.e. a lost wake-up), and pan must report no error, no
# truncated search, and leave no trail.
set -euo pipefail
cc=$1 model=$(realpath "$2")
shift 2
command -v spin >/dev/null ||
  { echo "spin not found: install it (scripts/install-deps.sh)" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
spin -a "$@" "$model" >spin.log || { cat spin.log; exit 1; }
"$cc" -O2 -w -DSAFETY -DNOBOUNDCHECK -o pan pan.c
./pan -m100000 -w24 >pan.log 2>&1 || true
grep -E "errors:|states, stored|elapsed" pan.log
if ! grep -q "errors: 0" pan.log || grep -q "max search depth too small" pan.log ||
   ls ./*.trail >/dev/null 2>&1; then
  cat pan.log
  for t in ./*.trail; do
    [ -e "$t" ] || continue
    echo "---- counterexample ($*):"
    spin -t -p "$@" "$model" | tail -60
  done
  exit 1
fi
