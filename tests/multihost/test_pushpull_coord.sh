#!/usr/bin/env bash
# strata-bench-pushpull across hosts under mpirun with a fixed STRATA_COORD
# (what the bench asks for on several hosts): every size is a new job on
# the same coordinator address, and each must run.
#   test_pushpull_coord.sh BUILD
BUILD=$1
source "$(dirname "$0")/common.sh" 3 -- "$@"
export PATH=$BUILD/bin:$PATH
out=$("$MHRUN" --launch mpirun --spmd -n 3 -a 1 --map 0,0,1,2 --timeout 150 \
  -- "$BUILD/bin/strata-bench-pushpull" --min-bytes 4K --max-bytes 128K \
  --iters 5 --blocks 2 2>&1) || fail "pushpull under mpirun: $out"
expect_count 6 '^\[mpirun h0\] +[0-9]+ +3 +1 +(shm|tcp|mixed) ' "$out" "pushpull rows"
echo "strata-bench-pushpull: 6 sizes, 6 jobs on one STRATA_COORD across 3 hosts"
