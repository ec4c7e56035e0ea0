#!/usr/bin/env bash
# The issue's transport targets side by side, on this host:
#   tcp write bandwidth vs a plain socket stream (iperf3) over loopback,
#   shm write bandwidth vs one core's memcpy of the same sizes.
# Runs each ROUNDS times interleaved (the machine is shared: compare medians).
# The benchmark sleeps on the wait fd when idle (--poll block), as iperf3
# sleeps in select(): with busy-polling on both sides, two processes on two
# cores starve each other as soon as anything else runs. Extra arguments go
# to strata-bench-transport (e.g. --poll spin).
# usage: perf/transport/compare-baselines.sh BUILD_DIR [ROUNDS [ARGS...]]
set -euo pipefail
build=$1 rounds=${2:-3}
shift $(( $# >= 2 ? 2 : 1 ))
[ $# -gt 0 ] || set -- --poll block
bench=$build/bin/strata-bench-transport
export STRATA_JOB_SECRET=${STRATA_JOB_SECRET:-compare-baselines}
command -v iperf3 >/dev/null || { echo "iperf3 is not installed" >&2; exit 1; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# The bandwidth column of one size in the benchmark's table.
bw_of() { awk -v b="$1" '$1 == b {print $3}'; }
sizes="65536 1048576 16777216 67108864"
declare -A tcp shm mc
ip=()
for r in $(seq "$rounds"); do
  port=$((20000 + RANDOM % 20000))
  iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
  sleep 0.3
  ip+=("$(iperf3 -c 127.0.0.1 -p "$port" -t 5 -f g | awk '/receiver/ {print $7}')")
  wait
  out=$("$bench" --provider tcp --loopback --bw-only --sizes 64K:64M "$@")
  for s in $sizes; do tcp[$s]+="$(bw_of "$s" <<<"$out") "; done
  out=$("$bench" --provider shm --loopback --bw-only --sizes 64K:64M --memcpy "$@")
  for s in $sizes; do
    shm[$s]+="$(bw_of "$s" <<<"$out") "
    mc[$s]+="$(awk -v b="$s" '$1 == b {print $9}' <<<"$out") "
  done
done
ipm=$(printf '%s\n' "${ip[@]}" | median)
printf 'iperf3 loopback, one stream (median of %s): %s Gb/s\n' "$rounds" "$ipm"
printf '%10s %10s %9s %10s %12s %10s\n' bytes tcp_Gb/s vs_iperf3 shm_Gb/s memcpy_Gb/s vs_memcpy
for s in $sizes; do
  t=$(tr ' ' '\n' <<<"${tcp[$s]}" | grep . | median)
  h=$(tr ' ' '\n' <<<"${shm[$s]}" | grep . | median)
  m=$(tr ' ' '\n' <<<"${mc[$s]}" | grep . | median)
  awk -v s="$s" -v t="$t" -v i="$ipm" -v h="$h" -v m="$m" 'BEGIN {
    printf "%10s %10.2f %8.0f%% %10.2f %12.2f %9.0f%%\n", s, t, 100*t/i, h, m, 100*h/m }'
done
