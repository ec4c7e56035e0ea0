/*
 * strata-bench-pushpull: one BSP push-reduce-pull round of the engine among
 * W workers and S aggregators, against MPI_Allreduce of the same bytes among
 * the same worker processes. The MPI side is one file, replaced by a stub
 * when Open MPI was not found, or not used when not launched by mpirun.
 */
#ifndef STRATA_PERF_PUSHPULL_BENCH_H
#define STRATA_PERF_PUSHPULL_BENCH_H

#include <stdbool.h>
#include <stddef.h>

/* MPI_Init when launched by mpirun (OMPI_COMM_WORLD_SIZE is set) and MPI is
 * compiled in; false otherwise (no MPI baseline). */
bool perf_pp_mpi_start(int *argc, char ***argv);
void perf_pp_mpi_end(void);
int perf_pp_mpi_rank(void);
/* Every rank on one host. */
bool perf_pp_mpi_one_host(void);
/* rank 0's len bytes to everyone. */
void perf_pp_mpi_bcast(void *buf, size_t len);
/* Separate the workers' communicator (collective over the world). */
void perf_pp_mpi_split(bool worker);
/* Among workers. */
void perf_pp_mpi_barrier(void);
double perf_pp_mpi_max(double v);
/* Element-wise sums of v[0..n-1] over every rank, into v (collective over
 * the world). */
void perf_pp_mpi_sum_world(double *v, int n);
/* Microseconds per MPI_Allreduce (sum of count floats), slowest worker. */
double perf_pp_mpi_allreduce_us(float *send, float *recv, size_t count,
                                int warmup, int iters);
/* "Open MPI v4.1.4", or why there is no baseline. */
const char *perf_pp_mpi_version(void);

#endif /* STRATA_PERF_PUSHPULL_BENCH_H */
