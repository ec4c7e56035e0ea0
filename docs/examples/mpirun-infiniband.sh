#!/usr/bin/env bash
# A Strata job on an InfiniBand cluster with Open MPI's mpirun: 16 workers and
# 4 aggregators, one rank per slot of a hostfile, data over verbs.
#
#   mpirun-infiniband.sh HOSTFILE PROGRAM [ARGS]
#   mpirun-infiniband.sh hosts ./train --epochs 10
#   mpirun-infiniband.sh hosts strata-train --job --scenario gssp16 --policy gssp
#
# HOSTFILE is Open MPI's, "node01 slots=4" per line: 5 such nodes make the 20
# ranks. Ranks fill the slots of each host in turn, so ranks 0..3, the
# aggregators (STRATA_NUM_AGGREGATORS=4), run on the first host, where rank 0
# also coordinates, listening on port 29500. PROGRAM calls strata_init() and,
# when it is an aggregator, strata_serve() (or use strata-agg on those ranks
# with an MPMD command line). The environment chooses the rest as usual:
# STRATA_TRANSPORT=tcp runs the job over Ethernet, OMPI_MCA_* configure
# mpirun.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 HOSTFILE PROGRAM [ARGS]" >&2; exit 2; }
hostfile=$1
shift
head_node=$(awk '!/^[[:space:]]*(#|$)/ { print $1; exit }' "$hostfile")

# Every rank must present the job's secret: a fresh one per job, in a file
# only this user can read, on the shared home directory.
umask 077
secret=$(mktemp "$HOME/.strata-secret.XXXXXX")
trap 'rm -f "$secret"' EXIT
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$secret"

mpirun --hostfile "$hostfile" --map-by slot --bind-to none \
  -x STRATA_NUM_AGGREGATORS=4 \
  -x STRATA_COORD="$head_node:29500" \
  -x STRATA_JOB_SECRET_FILE="$secret" \
  -x STRATA_TRANSPORT="${STRATA_TRANSPORT:-verbs}" \
  -x STRATA_IB_DEVICE="${STRATA_IB_DEVICE:-mlx5_0}" \
  -x STRATA_POLICY="${STRATA_POLICY:-bsp}" \
  -x STRATA_METRICS="$PWD/strata-metrics.json" \
  --mca btl self,vader,tcp \
  "$@"

# The same job, aggregators as strata-agg daemons (MPMD):
#   mpirun -np 4 --host node01:4 -x ... strata-agg : \
#          -np 16 --host node02:4,node03:4,node04:4,node05:4 -x ... ./train
