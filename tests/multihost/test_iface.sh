#!/usr/bin/env bash
# The data network chosen on purpose. Every host has a management port
# mgmt0 (198.18.2.0/24) listed before the fabric eth0 (198.18.1.0/24):
#   - with STRATA_COORD on the fabric, listeners advertise the interface
#     that routes to the coordinator, never the first one listed;
#   - with a coordinator file (no address to route to) and mgmt0 without a
#     carrier, they skip it; STRATA_IFNAME takes names, prefixes and CIDRs,
#     and one that matches nothing is an error naming it;
#   - STRATA_HOST set alike on every rank (mpirun -x) breaks no rank it
#     does not fit;
#   - a data connection that never comes up is named, with its address.
#   test_iface.sh BUILD
BUILD=$1
source "$(dirname "$0")/common.sh" 3 --mgmt -- "$@"
export PATH=$BUILD/bin:$PATH STRATA_LR=2 STRATA_LOG=info
exact=("$BUILD/tests/strata-test-exact" --steps 2)

run() { "$MHRUN" -n 2 -a 2 --map 0,1,2,2 --timeout 60 "$@" -- "${exact[@]}" 2>&1; }
advertised() { # the addresses listeners advertised
  grep -oE '(aggregator listening on tcp|coordinator listening on) [0-9.]+' <<<"$1" |
    awk '{print $NF}' | sort -u | tr '\n' ' '
}
fabric_only() {
  local a
  a=$(advertised "$1")
  [ -n "$a" ] && ! grep -q '198\.18\.2\.' <<<"$a" || fail "$2: advertised $a: $1"
  expect_count 2 'steps exact' "$1" "$2"
}

out=$(run) || fail "route to the coordinator: $out"
fabric_only "$out" "route to the coordinator"
for spec in eth =eth0 198.18.1.0/24 ^mgmt; do
  out=$(run --coord file -e STRATA_IFNAME=$spec) || fail "STRATA_IFNAME=$spec: $out"
  fabric_only "$out" "STRATA_IFNAME=$spec"
done

for k in 0 1 2; do "$NSC" link $k down mgmt0; done # UP, NO-CARRIER
out=$(run --coord file) || fail "mgmt0 without a carrier: $out"
fabric_only "$out" "mgmt0 without a carrier"
out=$(run --coord file -e STRATA_IFNAME=mgmt) && fail "STRATA_IFNAME=mgmt without carriers ran: $out"
grep -q 'STRATA_IFNAME=mgmt matches no interface that is up with a carrier here (.*mgmt0 198.18.2.1 (down or no carrier)' <<<"$out" ||
  fail "STRATA_IFNAME matching nothing was not named: $out"

out=$(run -e STRATA_HOST=198.18.1.1) || fail "STRATA_HOST of h0 on every rank: $out"
expect_count 2 'steps exact' "$out" "STRATA_HOST of h0 on every rank"
grep -q '^\[1 h1\].*STRATA_HOST=198.18.1.1 is not an address of this host (h1)' <<<"$out" ||
  fail "aggregator 1 did not say STRATA_HOST does not fit: $out"

# h0's aggregator advertises its mgmt0, which h2 cannot reach.
"$NSC" link 0 up mgmt0
out=$("$MHRUN" -n 1 -a 1 --map 0,2 --timeout 60 -e STRATA_TIMEOUT_MS=4000 \
  -e STRATA_IFNAME=mgmt -- "${exact[@]}" 2>&1) && fail "an unreachable aggregator: $out"
grep -qE '^\[1 h2\].*aggregator rank 0 \(198\.18\.2\.1:[0-9]+\) over tcp' <<<"$out" ||
  fail "the worker did not name the aggregator's address: $out"
echo "listeners advertise the fabric; STRATA_IFNAME, STRATA_HOST and unreachable addresses are named"
