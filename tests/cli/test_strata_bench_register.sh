#!/usr/bin/env bash
# strata-bench-register: two workers register and commit 100,000 tensors and
# take a step. Registration was quadratic (a name compared with every name
# before it: about 100 s for 100,000 tensors); the ctest timeout, far above
# what linear registration takes on a loaded machine, catches its return.
# A duplicate name is still refused, by name.
set -u
run=$1 tool=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
for v in $(env | grep -o '^STRATA_[A-Z0-9_]*'); do unset "$v"; done
export STRATA_TIMEOUT_MS=60000

out=$("$run" -n 2 -a 2 -- "$tool" --tensors 100000 2>&1) ||
  fail "100,000 tensors: exit $?: $out"
[ "$(grep -c '100000 tensors: registered in' <<<"$out")" -eq 2 ] ||
  fail "not both workers registered 100,000 tensors: $out"
echo "$out"
echo "strata-bench-register: 100,000 tensors registered and committed"
