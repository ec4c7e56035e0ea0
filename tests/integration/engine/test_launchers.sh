#!/usr/bin/env bash
# The launchers a cluster uses besides mpirun, imitated: every rank started
# by hand with only the variables srun (Slurm, or PMIx) or torchrun would
# give it, and the integer-exact job of 2 workers and 2 aggregators runs.
EXACT=$1
RUN=unused
source "$(dirname "$0")/common.sh"
for v in OMPI_COMM_WORLD_RANK PMIX_RANK SLURM_PROCID SLURM_NTASKS \
  SLURM_LOCALID RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT; do
  unset "$v"
done
export STRATA_NUM_AGGREGATORS=2 STRATA_HOST=127.0.0.1 STRATA_LR=2 \
  STRATA_JOB_SECRET=launcher-test-secret
N=4

slurm() { echo "SLURM_PROCID=$1 SLURM_NTASKS=$N SLURM_LOCALID=$1 STRATA_COORD_FILE=$2/coord"; }
pmix() { echo "PMIX_RANK=$1 SLURM_NTASKS=$N STRATA_COORD_FILE=$2/coord"; }
# torchrun: the coordinator listens on MASTER_PORT+1, a port free a moment ago.
torchrun() { echo "RANK=$1 WORLD_SIZE=$N LOCAL_RANK=$1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT"; }

# launch VARS: the N ranks of a job, each with the variables `VARS rank dir`
# prints; every rank must succeed and both workers be exact.
launch() {
  local dir pids=() r
  dir=$(mktemp -d)
  for ((r = 0; r < N; r++)); do
    # shellcheck disable=SC2046 # the variables split into words on purpose
    env $("$1" "$r" "$dir") "$EXACT" --steps 3 >"$dir/$r.log" 2>&1 &
    pids+=($!)
  done
  for ((r = 0; r < N; r++)); do
    wait "${pids[$r]}" || fail "$1: rank $r failed: $(cat "$dir/$r.log")"
  done
  [ "$(cat "$dir"/*.log | grep -c 'steps exact')" -eq 2 ] ||
    fail "$1: not every worker was exact: $(cat "$dir"/*.log)"
  rm -rf "$dir"
}

launch slurm
launch pmix
PORT=$(python3 -c 'import socket; s = socket.socket()
s.bind(("127.0.0.1", 0)); print(s.getsockname()[1] - 1)')
launch torchrun
echo "exact under srun-style (Slurm, PMIx) and torchrun-style launches"
