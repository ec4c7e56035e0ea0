/* strata-bench-reduce built without Open MPI: no MPI baseline. */
#include "perf/reduce/bench_reduce.h"

bool perf_mpi_init(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    return false;
}

void perf_mpi_finalize(void)
{
}

const char *perf_mpi_version(void)
{
    return "not compiled in (Open MPI was not found by CMake)";
}

bool perf_mpi_supports(strata_dtype_t dtype)
{
    (void)dtype;
    return false;
}

void perf_mpi_reduce_pairwise(strata_dtype_t dtype, void *dst,
                              const void *const *srcs, size_t nsrc,
                              size_t count)
{
    (void)dtype, (void)dst, (void)srcs, (void)nsrc, (void)count;
}
