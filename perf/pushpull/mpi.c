/* The Open MPI side of strata-bench-pushpull. */
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "perf/pushpull/bench.h"

static MPI_Comm perf_workers = MPI_COMM_NULL;
static char perf_mpi_lib[MPI_MAX_LIBRARY_VERSION_STRING];

bool perf_pp_mpi_start(int *argc, char ***argv)
{
    if (!getenv("OMPI_COMM_WORLD_SIZE"))
        return false;
    if (MPI_Init(argc, argv) != MPI_SUCCESS)
        return false;
    int len = 0;
    MPI_Get_library_version(perf_mpi_lib, &len);
    perf_mpi_lib[strcspn(perf_mpi_lib, ",\n")] = '\0';
    return true;
}

void perf_pp_mpi_end(void)
{
    if (perf_workers != MPI_COMM_NULL)
        MPI_Comm_free(&perf_workers);
    MPI_Finalize();
}

int perf_pp_mpi_rank(void)
{
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

/* One host: one processor name and one network namespace (containers of
 * a node share the name, and reach each other only over the network). */
bool perf_pp_mpi_one_host(void)
{
    char name[MPI_MAX_PROCESSOR_NAME + 64] = "", first[sizeof(name)];
    int len = 0, same;
    MPI_Get_processor_name(name, &len);
    name[len++] = '/';
    ssize_t n = readlink("/proc/self/ns/net", name + len,
                         sizeof(name) - (size_t)len - 1);
    name[len + (n > 0 ? n : 0)] = '\0';
    memcpy(first, name, sizeof(first));
    MPI_Bcast(first, (int)sizeof(first), MPI_CHAR, 0, MPI_COMM_WORLD);
    int mine = strcmp(first, name) == 0;
    MPI_Allreduce(&mine, &same, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    return same;
}

void perf_pp_mpi_bcast(void *buf, size_t len)
{
    MPI_Bcast(buf, (int)len, MPI_BYTE, 0, MPI_COMM_WORLD);
}

void perf_pp_mpi_split(bool worker)
{
    MPI_Comm_split(MPI_COMM_WORLD, worker, perf_pp_mpi_rank(), &perf_workers);
}

void perf_pp_mpi_barrier(void)
{
    MPI_Barrier(perf_workers);
}

double perf_pp_mpi_max(double v)
{
    double m = v;
    MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, perf_workers);
    return m;
}

void perf_pp_mpi_sum_world(double *v, int n)
{
    MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

double perf_pp_mpi_allreduce_us(float *send, float *recv, size_t count,
                                int warmup, int iters)
{
    for (int i = 0; i < warmup; i++)
        MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, perf_workers);
    MPI_Barrier(perf_workers);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++)
        MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, perf_workers);
    double us = (MPI_Wtime() - t0) * 1e6 / iters;
    return perf_pp_mpi_max(us);
}

const char *perf_pp_mpi_version(void)
{
    return perf_mpi_lib[0] ? perf_mpi_lib : "Open MPI";
}
