/* strata-bench-pushpull built without Open MPI: no MPI baseline. */
#include "perf/pushpull/bench.h"

bool perf_pp_mpi_start(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    return false;
}

void perf_pp_mpi_end(void)
{
}

int perf_pp_mpi_rank(void)
{
    return 0;
}

bool perf_pp_mpi_one_host(void)
{
    return true;
}

void perf_pp_mpi_bcast(void *buf, size_t len)
{
    (void)buf, (void)len;
}

void perf_pp_mpi_split(bool worker)
{
    (void)worker;
}

void perf_pp_mpi_barrier(void)
{
}

double perf_pp_mpi_max(double v)
{
    return v;
}

void perf_pp_mpi_sum_world(double *v, int n)
{
    (void)v, (void)n;
}

double perf_pp_mpi_allreduce_us(float *send, float *recv, size_t count,
                                int warmup, int iters)
{
    (void)send, (void)recv, (void)count, (void)warmup, (void)iters;
    return 0;
}

const char *perf_pp_mpi_version(void)
{
    return "not compiled in (Open MPI was not found by CMake)";
}
