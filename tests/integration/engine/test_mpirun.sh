#!/usr/bin/env bash
# The same integer-exact job launched by mpirun (ranks from OMPI_COMM_WORLD_*)
# and the coordinator found through STRATA_COORD_FILE, over the transport
# given.
MPIRUN=$1 EXACT=$2 TRANSPORT=$3
RUN=unused
source "$(dirname "$0")/common.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
out=$("$MPIRUN" "${root[@]}" --oversubscribe -np 6 \
  -x STRATA_NUM_AGGREGATORS=2 -x STRATA_COORD_FILE="$dir/coord" \
  -x STRATA_HOST=127.0.0.1 -x STRATA_JOB_SECRET=mpirun-test-secret \
  -x STRATA_LR=4 -x STRATA_PARTITION_BYTES -x STRATA_TIMEOUT_MS \
  -x STRATA_TRANSPORT="$TRANSPORT" -x STRATA_LOG=info \
  --mca btl self,vader "$EXACT" --steps 4 2>&1) || fail "mpirun: $out"
[ "$(grep -c 'steps exact' <<<"$out")" -eq 4 ] || fail "not every worker was exact: $out"
[ "$(grep -c "joined as worker over $TRANSPORT\$" <<<"$out")" -eq 4 ] ||
  fail "not every worker joined over $TRANSPORT: $out"
echo "exact under mpirun: 4 workers, 2 aggregators over $TRANSPORT"
