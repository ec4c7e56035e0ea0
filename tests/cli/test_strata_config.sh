#!/usr/bin/env bash
# strata-config --dump: effective values with sources; a bad setting is a
# one-line error naming it, and a non-zero exit.
set -u
tool=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
for v in $(env | grep -o '^STRATA_[A-Z0-9_]*'); do unset "$v"; done

out=$("$tool" --dump) || fail "--dump on defaults exited $?"
grep -q '^STRATA_POLICY=bsp .*# default$' <<<"$out" || fail "no default policy in: $out"

out=$(STRATA_POLICY=gssp "$tool" --dump) || fail "--dump with a valid setting failed"
grep -q '^STRATA_POLICY=gssp .*# environment$' <<<"$out" || fail "environment source not shown"

conf=$(mktemp); trap 'rm -f "$conf"' EXIT
printf 'lr = 0.5\n' >"$conf"
out=$(STRATA_CONFIG=$conf "$tool" --dump) || fail "--dump with a file failed"
grep -q "^STRATA_LR=0.5 .*# file $conf\$" <<<"$out" || fail "file source not shown"

err=$(STRATA_BOGUS=1 "$tool" --dump 2>&1 >/dev/null); rc=$?
[ "$rc" -ne 0 ] || fail "STRATA_BOGUS=1 accepted"
[ "$(wc -l <<<"$err")" -eq 1 ] || fail "expected one line, got: $err"
grep -q 'STRATA_BOGUS=1' <<<"$err" || fail "error does not name STRATA_BOGUS: $err"

err=$(STRATA_IB_QPS=lots "$tool" --dump 2>&1 >/dev/null); rc=$?
[ "$rc" -ne 0 ] || fail "STRATA_IB_QPS=lots accepted"
grep -q 'STRATA_IB_QPS=lots.*expected an integer' <<<"$err" || fail "bad message: $err"

"$tool" --list | grep -q '^STRATA_PARTITION_BYTES$' || fail "--list lacks a setting"
echo "strata-config behaves"
