#!/usr/bin/env bash
# The verbs targets of the transport issue, side by side in ONE soft-RoCE VM
# run (only ratios within one run mean anything under TCG):
#   bandwidth: strata-bench-transport --provider verbs vs perftest's
#              ib_write_bw on rxe0, at 64 KiB .. 4 MiB (target >= 90 %);
#   latency:   8-byte writes, t_typical of ib_write_lat vs the median of
#              strata's write ping-pong (target <= 1.2x).
# Each round runs perftest, then strata, so both see the same conditions;
# the table shows the median of ROUNDS rounds.
#
#   scripts/bench-verbs-vm.sh BUILD_DIR [ROUNDS]      (default 3 rounds)
#
# perftest connects through rdma_cm (-R) at the VM's address, as Strata does.
# Both sides busy-poll (perftest's default; strata --poll spin).
set -euo pipefail

sizes="65536 262144 1048576 4194304"

inside() { # BUILD ROUNDS OUT: runs in the VM
    local build=$1 rounds=$2 out=$3 addr=$SOFTROCE_ADDR r s
    export STRATA_JOB_SECRET=bench-verbs-vm
    for r in $(seq "$rounds"); do
        for s in $sizes; do
            ib_write_bw -R -d rxe0 -s "$s" -D 2 --report_gbits -F \
                >/dev/null 2>&1 &
            sleep 2
            ib_write_bw -R -d rxe0 -s "$s" -D 2 --report_gbits -F "$addr" \
                2>&1 | awk -v s="$s" '$1 == s {print s, $4}' \
                >>"$out/perftest-bw.txt" || true
            wait
        done
        ib_write_lat -R -d rxe0 -s 8 -n 1000 -F >/dev/null 2>&1 &
        sleep 2
        ib_write_lat -R -d rxe0 -s 8 -n 1000 -F "$addr" 2>&1 |
            awk '$1 == 8 {print $5}' >>"$out/perftest-lat.txt" || true
        wait
        "$build/bin/strata-bench-transport" --provider verbs --loopback \
            --sizes 8:4M --quick --poll spin \
            --json "$out/strata-$r.json" >"$out/strata-$r.txt" 2>&1 || true
    done
}

if [ "${1:-}" = --inside ]; then
    shift
    inside "$@"
    exit 0
fi

build=$(cd "${1:?usage: bench-verbs-vm.sh BUILD_DIR [ROUNDS]}" && pwd)
rounds=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$build/bin/strata-bench-transport" ] || {
    echo "no $build/bin/strata-bench-transport: build first" >&2
    exit 1
}
out=$(mktemp -d "${TMPDIR:-/tmp}/bench-verbs.XXXXXX")
echo "bench-verbs-vm: $rounds rounds; raw output in $out" >&2
"$here/../tests/softroce/softroce-vm" --timeout 3600 --rw "$out" -- \
    "$here/bench-verbs-vm.sh" --inside "$build" "$rounds" "$out"

median() { sort -g | awk '{a[NR] = $1} END {if (NR) print a[int((NR + 1) / 2)]}'; }
# A column of strata's table for one size, over the rounds.
strata_col() { cat "$out"/strata-*.txt | awk -v b="$1" -v c="$2" '$1 == b {print $c}'; }

printf '\nwrite bandwidth, Gb/s (median of %s rounds)\n' "$rounds"
printf '%10s %12s %12s %8s\n' bytes ib_write_bw strata ratio
for s in $sizes; do
    p=$(awk -v s="$s" '$1 == s {print $2}' "$out/perftest-bw.txt" | median)
    t=$(strata_col "$s" 3 | median)
    awk -v s="$s" -v p="${p:-0}" -v t="${t:-0}" 'BEGIN {
        printf "%10s %12.3f %12.3f %7.0f%%\n", s, p, t, p > 0 ? 100 * t / p : 0 }'
done
p=$(median <"$out/perftest-lat.txt")
t=$(strata_col 8 6 | median)
printf '\n8-byte write latency, us (median of %s rounds)\n' "$rounds"
awk -v p="${p:-0}" -v t="${t:-0}" 'BEGIN {
    printf "ib_write_lat t_typical %.2f, strata %.2f: %.2fx\n", p, t,
           p > 0 ? t / p : 0 }'
