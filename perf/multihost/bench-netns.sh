#!/usr/bin/env bash
# The BSP push-pull round across emulated hosts with shaped links, against the
# link bound and against MPI_Allreduce over the same links in the same run.
#
#   perf/multihost/bench-netns.sh BUILD [--workers W] [--aggs 1,2]
#       [--rates 1gbit,10gbit] [--sizes 1M:16M] [--rounds R] [--iters N]
#       [--min-workers N] [--partition-bytes P] [--stage-model 1,0]
#       [--optimizer sum|sgd] [--momentum M] [--colocate 0,1] [--out DIR]
#
# Hosts: aggregators a on host a (one per host), the W workers on hosts of
# their own after them; with --colocate 1, W hosts only and aggregator a on
# worker a's host (as BytePS's colocated mode: S = W puts on every host link
# the 2(W-1)/W x bytes a ring allreduce puts there); links (both directions) shaped with tbf, 20 ms
# queues, one rate at a time. Each round runs every (rate, S) in turn
# (alternating, so that load on the machine spreads over all of them):
# strata-bench-pushpull under mpirun (Strata's round among the W workers and
# S aggregators, then MPI_Allreduce of the same bytes among the W workers
# over btl tcp on the same links), and iperf3 between two hosts once per
# rate. The table gives medians over the rounds:
#   bound_us   the link bound: the bytes the busiest link carries in one
#              direction per round, max(W/S, 1) x bytes, over the rate
#              (colocated: max(S+W-2, S)/S x bytes, a worker's pushes to
#              the other hosts' aggregators and its aggregator's models to
#              the other hosts' workers; the local ones go over shm) (tbf
#              shapes each direction on its own, so pushes and pulls of
#              different partitions may overlap; a round that pushes
#              everything, then pulls, takes at least twice this)
#   eff        bound_us / strata_us
#   path_us    the same bytes over what one iperf3 stream carried on that
#              path in this run (tbf counts headers, so at most about 0.95
#              of the rate; unshaped, or where the processors bind, less)
#   path_eff   path_us / strata_us
#   vs_mpi     mpi_us / strata_us (above 1: Strata faster)
#   vs_S1      strata_us with one aggregator / strata_us with S
# --min-workers: STRATA_MIN_WORKERS of every rank (default: the engine's, 1).
# A job that may go on without a worker reduces a clock only once every
# worker's whole clock landed, so its pulls cannot overlap its pushes;
# --min-workers W (fail on a lost worker, as MPI does) lets them.
# --partition-bytes: strata-bench-pushpull's (default: the engine's pick for
# the size and S); a run per value measures the partition rule.
# --stage-model: STRATA_STAGE_MODEL of every rank (default 1: models are
# written ahead of PUSHED and committed after, docs/policies.md); 0 measures
# the round without; with both (1,0) the runs alternate and the table's rate
# column says which (1gbit-stage0).
# --optimizer: strata-bench-pushpull's (default sum: the workers get the
# sum); --momentum: STRATA_MOMENTUM of every rank (sgd only).
# --colocate: 0 (default) aggregators on hosts of their own, 1 on the
# workers' hosts (S <= W), 0,1 both, alternating; the table's rate column
# says which (1gbit-coloc).
# Needs root (emulated hosts); the figures are only comparable within a run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
nsc=$here/../../tests/multihost/nscluster
[ $# -ge 1 ] || { sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;$d' >&2; exit 2; }
BUILD=$(cd "$1" && pwd)
shift
W=2 aggs=1,2 rates=1gbit,10gbit sizes=1M:16M rounds=3 iters="" out="" minw=1
part="" stage=1 optimizer=sum momentum=0 coloc=0
args=("$@")
while [ $# -gt 0 ]; do
    case "$1" in
    --workers) W=$2; shift 2 ;;
    --aggs) aggs=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --min-workers) minw=$2; shift 2 ;;
    --partition-bytes) part=$2; shift 2 ;;
    --stage-model) stage=$2; shift 2 ;;
    --optimizer) optimizer=$2; shift 2 ;;
    --momentum) momentum=$2; shift 2 ;;
    --colocate) coloc=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "bench-netns: unknown option $1" >&2; exit 2 ;;
    esac
done
IFS=, read -r -a agg_list <<<"$aggs"
IFS=, read -r -a rate_list <<<"$rates"
IFS=, read -r -a stage_list <<<"$stage"
IFS=, read -r -a coloc_list <<<"$coloc"
smax=0
for s in "${agg_list[@]}"; do [ "$s" -le "$smax" ] || smax=$s; done
for c in "${coloc_list[@]}"; do
    case "$c" in
    0) ;;
    1) [ "$smax" -le "$W" ] || { echo "bench-netns: --colocate 1 needs S <= W ($smax > $W)" >&2; exit 2; } ;;
    *) echo "bench-netns: --colocate '$c': 0 or 1" >&2; exit 2 ;;
    esac
done
if [ -z "${MH_CLUSTER:-}" ]; then
    exec "$nsc" --hosts $((smax + W)) -- "$0" "$BUILD" "${args[@]}"
fi

[ -n "$out" ] || out=$(mktemp -d /tmp/bench-netns.XXXXXX)
mkdir -p "$out"
export PATH=$BUILD/bin:$PATH
for v in $(env | grep -o '^STRATA_[A-Z0-9_]*' || true); do unset "$v"; done
echo "# bench-netns: $W workers, aggregators ${aggs}, rates ${rates}, sizes ${sizes}, $rounds rounds, STRATA_MIN_WORKERS=$minw, partition ${part:-auto}, STRATA_STAGE_MODEL=$stage, optimizer $optimizer, STRATA_MOMENTUM=$momentum, colocated $coloc"
echo "# load at start: $(uptime)"
echo "# raw results in $out"

iperf() { # RATE ROUND: iperf3 from the first worker's host to host 0
    local from=$smax
    "$nsc" exec 0 iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
    local srv=$!
    sleep 0.5
    "$nsc" exec "$from" iperf3 -c "$("$nsc" addr 0)" -p 5201 -t 3 -J >"$out/iperf-$1-$2.json" 2>/dev/null || true
    wait $srv 2>/dev/null || true
}

for ((round = 1; round <= rounds; round++)); do
    for rate in "${rate_list[@]}"; do
        "$nsc" unshape
        [ "$rate" = none ] || "$nsc" shape "$rate"
        [ "$round" -gt 1 ] || iperf "$rate" "$round"
        for s in "${agg_list[@]}"; do
            for co in "${coloc_list[@]}"; do
                for st in "${stage_list[@]}"; do
                    # workers on hosts smax.. (separate) or 0.. (colocated)
                    wbase=$smax
                    [ "$co" = 0 ] || wbase=0
                    map=""
                    for ((a = 0; a < s; a++)); do map+="$a,"; done
                    for ((w = 0; w < W; w++)); do map+="$((wbase + w)),"; done
                    tag=$rate
                    [ "$co" = 0 ] || tag+=-coloc
                    [ "${#stage_list[@]}" -eq 1 ] || tag+="-stage$st"
                    tag+="-S$s-r$round"
                    extra=()
                    [ -z "$iters" ] || extra=(--iters "$iters")
                    [ -z "$part" ] || extra+=(--partition-bytes "$part")
                    if ! "$here/../../tests/multihost/mhrun" --launch mpirun --spmd -n "$W" -a "$s" \
                        --map "${map%,}" --coord file --timeout 900 \
                        -e STRATA_MIN_WORKERS="$minw" -e STRATA_STAGE_MODEL="$st" \
                        -e STRATA_MOMENTUM="$momentum" -- \
                        "$BUILD/bin/strata-bench-pushpull" --aggregators "$s" \
                        --optimizer "$optimizer" \
                        --min-bytes "${sizes%%:*}" --max-bytes "${sizes##*:}" \
                        --json "$out/$tag.json" "${extra[@]}" >"$out/$tag.log" 2>&1; then
                        echo "# $tag failed: see $out/$tag.log" >&2
                        tail -5 "$out/$tag.log" >&2
                    fi
                done
            done
        done
    done
done
"$nsc" unshape
echo "# load at end: $(uptime)"
/usr/bin/python3 "$here/bench-netns-table.py" "$out" "$W"
