#!/usr/bin/env bash
# A transport test program with its peer in another process that it did not
# fork: the program serves peers (TP_TEST_SERVE) in one process and runs its
# tests against them (TP_TEST_PEER) in another, over the provider named by
# TP_TEST_PROVIDER. This is the "peer runs elsewhere" mode that
# tests/softroce/run-2vm-tests uses between two VMs, run here on one host.
#
#   remote_pair.sh PROGRAM
set -uo pipefail
prog=${1:?usage: remote_pair.sh PROGRAM}
log=$(mktemp)
trap 'rm -f "$log"; [ -z "${srv:-}" ] || kill "$srv" 2>/dev/null' EXIT
TP_TEST_SERVE=127.0.0.1:0 "$prog" 2>"$log" &
srv=$!
for ((i = 0; i < 300; i++)); do
    at=$(sed -n 's/.*serving peers at //p' "$log")
    [ -z "$at" ] || break
    kill -0 "$srv" 2>/dev/null || break
    sleep 0.1
done
[ -n "$at" ] || { echo "FAIL: $prog did not start serving peers:"; cat "$log"; exit 1; }
TP_TEST_PEER=$at "$prog"
rc=$?
# The tests told the server "end" as they exited: it exits by itself.
for ((i = 0; i < 100; i++)); do
    kill -0 "$srv" 2>/dev/null || break
    sleep 0.1
done
kill -0 "$srv" 2>/dev/null && {
    echo "FAIL: the peer server was still running 10 s after the tests ended"
    kill "$srv"
}
wait "$srv"
src=$?
srv=""
cat "$log"
[ "$src" -eq 0 ] || { echo "FAIL: the peer server exited $src"; exit 1; }
exit "$rc"
