#!/usr/bin/env bash
# The documented cluster launches, run as a user runs them, on emulated hosts:
# docs/examples/slurm-infiniband.sbatch submitted with sbatch to a real Slurm
# (munged, slurmctld, one slurmd per host: tests/multihost/slurm), and
# docs/examples/mpirun-infiniband.sh with a hostfile of the hosts. The
# examples are unmodified; the test chooses only what a user chooses: the
# node count (and task count), the program (strata-train --job on a small
# model), and tcp for the data, since the emulated hosts have no InfiniBand.
# Rank 0 must report every worker's results, with a model that learned, and
# every host must have run ranks.
#   test_examples.sh BUILD slurm|mpirun [quick|gssp16]
#     quick   2 hosts, 4 aggregators and 2 workers (bsp)
#     gssp16  4 hosts, strata-train's gssp16 scenario: 4 aggregators and 16
#             workers in four speed tiers (gssp)
BUILD=$1 LAUNCH=$2 SIZE=${3:-quick}
case "$SIZE" in
quick) HOSTS=2 ;;
gssp16) HOSTS=4 ;;
*) echo "test_examples.sh: size '$SIZE': quick or gssp16" >&2; exit 2 ;;
esac
source "$(dirname "$0")/common.sh" "$HOSTS" -- "$@"
if [ "$LAUNCH" = slurm ] && [ -z "${MH_SLURM_DIR:-}" ]; then
  exec "$(dirname "$0")/slurm" -- "$0" "$@"
fi
examples=$(cd "$(dirname "$0")/../../docs/examples" && pwd)
export PATH=$BUILD/bin:$PATH
out=$(mktemp -d /tmp/strata-examples.XXXXXX)
trap 'rm -rf "$out"' EXIT
chmod 755 "$out"
# The examples keep the job secret under $HOME, the shared home directory.
export HOME=$out STRATA_TRANSPORT=tcp STRATA_IB_DEVICE=
# Loading Fashion-MNIST takes each rank seconds on a loaded machine.
export STRATA_JOIN_TIMEOUT_MS=120000
train=(strata-train --job --hidden 32 --budget 3 --eval-every 1 --base-ms 4
  --json "$out/r.json")
if [ "$SIZE" = quick ]; then
  train+=(--speeds "1,2" --policy bsp) ranks=6
else
  train+=(--scenario gssp16 --policy gssp) ranks=20
fi
per_host=$((ranks / HOSTS))

case "$LAUNCH" in
slurm)
  rc=0
  (cd "$out" && timeout 400 "$NSC" exec 0 sbatch --wait --quiet --nodes="$HOSTS" \
    --ntasks="$ranks" --output="$out/job.out" \
    "$examples/slurm-infiniband.sbatch" "${train[@]}") || rc=$?
  log=$(cat "$out/job.out" 2>/dev/null)
  [ "$rc" -eq 0 ] || fail "sbatch --wait exited $rc: $log"
  # Each slurmd started its share of the job's tasks.
  for ((k = 0; k < HOSTS; k++)); do
    grep -q "launch task StepId=[0-9]*\.0 " "$MH_SLURM_DIR/slurmd.h$k.log" ||
      fail "slurmd on h$k launched no task: $(cat "$MH_SLURM_DIR/slurmd.h$k.log")"
  done
  ;;
mpirun)
  for ((k = 0; k < HOSTS; k++)); do echo "h$k slots=$per_host"; done >"$out/hosts"
  # Open MPI reaches the emulated hosts through nscluster's rsh agent and
  # their fabric; a user's cluster has ssh and its own interfaces.
  log=$(cd "$out" && OMPI_MCA_plm_rsh_agent=$(dirname "$NSC")/mh-rsh \
    OMPI_MCA_oob_tcp_if_include=198.18.1.0/24 \
    OMPI_MCA_btl_tcp_if_include=198.18.1.0/24 OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 400 "$NSC" exec 0 \
    "$examples/mpirun-infiniband.sh" "$out/hosts" "${train[@]}" 2>&1) ||
    fail "mpirun-infiniband.sh failed: $log"
  ;;
*) fail "launcher '$LAUNCH': slurm or mpirun" ;;
esac

line=$(grep '"policy": "' "$out/r.json" 2>/dev/null) || fail "rank 0 wrote no result: $log"
num() { sed -n "s/.*\"$1\": \([0-9.e+]*\).*/\1/p" <<<"$line"; }
grep -q '"ok": true' <<<"$line" || fail "rank 0 lacks a worker's results: $line $log"
awk -v a="$(num final_acc)" 'BEGIN { exit !(a >= 0.5) }' ||
  fail "final accuracy $(num final_acc), expected >= 0.5: $log"
# Every host ran ranks: each rank's metrics name its host.
for ((k = 0; k < HOSTS; k++)); do
  grep -q "\"host\": \"h${k}[/\"]" "$out"/strata-metrics*.json ||
    fail "no rank ran on h$k: $(cat "$out"/strata-metrics*.json) $log"
done
left=$(find "$out" -name '*secret*')
[ -z "$left" ] || fail "the job secret was left behind: $left"
echo "$LAUNCH example, $ranks ranks on $HOSTS hosts: $(num steps) steps, accuracy $(num final_acc)"
