#!/usr/bin/env bash
# The verbs targets of the transport issue, side by side in ONE soft-RoCE VM
# run (only ratios within one run mean anything under TCG):
#   bandwidth: strata-bench-transport --provider verbs vs perftest's
#              ib_write_bw on rxe0, 64 KiB .. 4 MiB (target >= 90 %);
#   latency:   t_typical of ib_write_lat vs strata's write ping-pong
#              (median one-way), 8 .. 512 bytes (target <= 1.2x).
#
#   scripts/bench-verbs-vm.sh BUILD_DIR [ROUNDS]      (default 5 rounds)
#
# Method, the same for both tools:
# - server and client are separate processes pinned to the VM's two vCPUs
#   (taskset -c 0 / -c 1): unpinned, two busy-polling processes sometimes
#   share one vCPU and every exchange waits for a time slice (~4 ms);
# - perftest connects through rdma_cm (-R) to 198.18.0.1, as strata does;
# - the same sizes and iteration counts (-n / --iters): 128 MiB per
#   bandwidth size (at least 32 writes), 1000 ping-pongs per latency size;
#   128 writes in flight (perftest's tx-depth, strata's --window);
# - both sides busy-poll, as perftest does (its ib_write_bw server too,
#   measured: 60 % of a vCPU); strata --poll spin;
# - every round runs both tools on every size, the order alternating by
#   round; the table shows medians over the rounds. `uptime` of the host
#   before and after is printed: other load on the host slows TCG.
set -euo pipefail

bw_sizes="65536 262144 1048576 4194304"
lat_sizes="8 64 512"

bw_iters() { # SIZE: 128 MiB, at least 32 writes
    local n=$(((128 << 20) / $1))
    echo $((n > 32 ? n : 32))
}

# TOOL ARGS...: a perftest server on vCPU 0 and its client on vCPU 1, the
# client retried until the server listens (TCG starts it slowly).
perftest() {
    local tool=$1 srv i out
    shift
    taskset -c 0 "$tool" "$@" >/dev/null 2>&1 &
    srv=$!
    for i in $(seq 30); do
        sleep 1
        if out=$(timeout 300 taskset -c 1 "$tool" "$@" "$SOFTROCE_ADDR" 2>&1); then
            wait "$srv" || true
            printf '%s\n' "$out"
            return 0
        fi
    done
    kill "$srv" 2>/dev/null || true
    wait "$srv" 2>/dev/null || true
    echo "bench-verbs-vm: $tool $* did not run" >&2
}

# ARGS...: a strata server on vCPU 0 and a client on vCPU 1 with ARGS; the
# client's output.
strata() {
    local srv log addr i
    log=$(mktemp)
    taskset -c 0 "$bench" --provider verbs --server --poll spin \
        --bind "$SOFTROCE_ADDR:0" --sizes 8:4M >"$log" 2>&1 &
    srv=$!
    for i in $(seq 600); do
        addr=$(awk '/^listening on/ {print $3}' "$log")
        [ -z "$addr" ] || break
        sleep 0.1
    done
    timeout 600 taskset -c 1 "$bench" --provider verbs --connect "$addr" \
        --poll spin "$@" 2>&1 || echo "bench-verbs-vm: strata $* failed" >&2
    wait "$srv" || true
    rm -f "$log"
}

perftest_bw() {
    perftest ib_write_bw -R -d rxe0 -s "$1" -n "$(bw_iters "$1")" -t 128 \
        --report_gbits -F | awk -v s="$1" '$1 == s {print s, $4}'
}
strata_bw() {
    strata --bw-only --sizes "$1:$1" --iters "$(bw_iters "$1")" \
        --window 128 | awk -v s="$1" '$1 == s {print s, $3}'
}
perftest_lat() {
    perftest ib_write_lat -R -d rxe0 -s "$1" -n 1000 -F |
        awk -v s="$1" '$1 == s {print s, $5}'
}
strata_lat() {
    strata --lat-only --sizes "$1:$1" --iters 1000 |
        awk -v s="$1" '$1 == s {print s, $6}'
}

inside() { # BUILD ROUNDS OUT: runs in the VM
    local rounds=$2 out=$3 r s first second
    bench=$1/bin/strata-bench-transport
    export STRATA_JOB_SECRET=bench-verbs-vm
    for r in $(seq "$rounds"); do
        if [ $((r % 2)) = 1 ]; then first=perftest second=strata; else
            first=strata second=perftest; fi
        for s in $bw_sizes; do
            ${first}_bw "$s" >>"$out/$first-bw.txt"
            ${second}_bw "$s" >>"$out/$second-bw.txt"
        done
        for s in $lat_sizes; do
            ${first}_lat "$s" >>"$out/$first-lat.txt"
            ${second}_lat "$s" >>"$out/$second-lat.txt"
        done
        echo "bench-verbs-vm: round $r of $rounds done" >&2
    done
}

if [ "${1:-}" = --inside ]; then
    shift
    inside "$@"
    exit 0
fi

build=$(cd "${1:?usage: bench-verbs-vm.sh BUILD_DIR [ROUNDS]}" && pwd)
rounds=${2:-5}
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$build/bin/strata-bench-transport" ] || {
    echo "no $build/bin/strata-bench-transport: build first" >&2
    exit 1
}
out=$(mktemp -d "${TMPDIR:-/tmp}/bench-verbs.XXXXXX")
echo "bench-verbs-vm: $rounds rounds; raw figures in $out" >&2
echo "host before: $(uptime)"
"$here/../tests/softroce/softroce-vm" --timeout 7200 --rw "$out" -- \
    "$here/bench-verbs-vm.sh" --inside "$build" "$rounds" "$out"
echo "host after:  $(uptime)"

# FILE SIZE: the median of SIZE's figures in FILE; best: the smallest.
median() {
    awk -v s="$2" '$1 == s {print $2}' "$1" 2>/dev/null | sort -g |
        awk '{a[NR] = $1} END {if (NR) print a[int((NR + 1) / 2)]}'
}
best() { awk -v s="$2" '$1 == s {print $2}' "$1" 2>/dev/null | sort -g | head -1; }
row() { # SIZE PERFTEST STRATA KIND: a line of the table
    awk -v s="$1" -v p="${2:-0}" -v t="${3:-0}" -v k="$4" 'BEGIN {
        r = k == "bw" ? (p > 0 ? 100 * t / p : 0) : (p > 0 ? t / p : 0)
        printf "%10s %12.3f %12.3f %9s", s, p, t,
               k == "bw" ? sprintf("%.0f%%", r) : sprintf("%.2fx", r) }'
}

printf '\nwrite bandwidth, Gb/s (median of %s rounds; target >= 90%%)\n' "$rounds"
printf '%10s %12s %12s %9s\n' bytes ib_write_bw strata ratio
for s in $bw_sizes; do
    row "$s" "$(median "$out/perftest-bw.txt" "$s")" \
        "$(median "$out/strata-bw.txt" "$s")" bw
    echo
done
# Under TCG a busy-polling ping-pong sometimes runs at one exchange per
# guest timer tick (~4 ms) for a whole run, with either tool: the best
# round shows each tool outside that mode.
printf '\none-way write latency, us (target <= 1.2x): median of %s rounds | best round\n' "$rounds"
printf '%10s %12s %12s %9s | %12s %12s %9s\n' bytes ib_write_lat strata ratio \
    ib_write_lat strata ratio
for s in $lat_sizes; do
    row "$s" "$(median "$out/perftest-lat.txt" "$s")" \
        "$(median "$out/strata-lat.txt" "$s")" lat
    printf ' |'
    row "" "$(best "$out/perftest-lat.txt" "$s")" \
        "$(best "$out/strata-lat.txt" "$s")" lat | cut -c11- # ends the line
done
