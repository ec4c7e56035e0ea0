/* The Open MPI baseline of strata-bench-reduce: pairwise MPI_Reduce_local. */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "perf/reduce/bench_reduce.h"

static char perf_mpi_lib[MPI_MAX_LIBRARY_VERSION_STRING];

bool perf_mpi_init(int *argc, char ***argv)
{
    int err = MPI_Init(argc, argv);
    if (err != MPI_SUCCESS) {
        fprintf(stderr,
                "strata-bench-reduce: MPI_Init failed (%d): no "
                "Open MPI baseline\n",
                err);
        return false;
    }
    int len = 0;
    MPI_Get_library_version(perf_mpi_lib, &len);
    perf_mpi_lib[strcspn(perf_mpi_lib, ",\n")] = '\0';
    return true;
}

void perf_mpi_finalize(void)
{
    MPI_Finalize();
}

const char *perf_mpi_version(void)
{
    return perf_mpi_lib[0] ? perf_mpi_lib : "Open MPI";
}

bool perf_mpi_supports(strata_dtype_t dtype)
{
    return dtype == STRATA_FP32 || dtype == STRATA_FP64;
}

void perf_mpi_reduce_pairwise(strata_dtype_t dtype, void *dst,
                              const void *const *srcs, size_t nsrc,
                              size_t count)
{
    MPI_Datatype type = dtype == STRATA_FP64 ? MPI_DOUBLE : MPI_FLOAT;
    size_t es = strata_dtype_size(dtype);
    memcpy(dst, srcs[0], count * es);
    for (size_t j = 1; j < nsrc; j++) {
        for (size_t i = 0; i < count; i += INT_MAX) { /* int counts */
            size_t n = count - i < INT_MAX ? count - i : INT_MAX;
            MPI_Reduce_local((const char *)srcs[j] + i * es,
                             (char *)dst + i * es, (int)n, type, MPI_SUM);
        }
    }
}
