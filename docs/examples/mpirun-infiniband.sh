#!/usr/bin/env bash
# A Strata job on an InfiniBand cluster with Open MPI's mpirun: 16 workers and
# 4 aggregators over 5 nodes (4 ranks per node), data over verbs.
#
# Ranks 0..3 are the aggregators (STRATA_NUM_AGGREGATORS=4); rank 0, on the
# first host, also coordinates, listening on port 29500 of that host. The
# job secret is a file only this user can read, on the shared home directory.
# PROGRAM calls strata_init() and, when it is an aggregator, strata_serve()
# (or use strata-agg on those ranks with an MPMD command line).
set -euo pipefail

hosts=node01:4,node02:4,node03:4,node04:4,node05:4
secret=$HOME/.strata/job-secret
mkdir -p "$(dirname "$secret")"
umask 077
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$secret"

mpirun -np 20 --host "$hosts" --map-by ppr:4:node --bind-to none \
  -x STRATA_NUM_AGGREGATORS=4 \
  -x STRATA_COORD=node01:29500 \
  -x STRATA_JOB_SECRET_FILE="$secret" \
  -x STRATA_TRANSPORT=verbs \
  -x STRATA_IB_DEVICE=mlx5_0 \
  -x STRATA_POLICY=bsp \
  -x STRATA_METRICS="$PWD/strata-metrics.json" \
  --mca btl self,vader,tcp \
  ./train --epochs 10 "$@"

# The same job, aggregators as strata-agg daemons (MPMD):
#   mpirun -np 4 --host node01:4 -x ... strata-agg : \
#          -np 16 --host node02:4,node03:4,node04:4,node05:4 -x ... ./train
