/*
 * Pieces of strata-bench-reduce that live in their own files: Open MPI's
 * MPI_Reduce_local baseline (bench_reduce_mpi.c, or bench_reduce_nompi.c
 * when Open MPI was not found) and the memory roofline (roofline.c).
 */
#ifndef STRATA_PERF_REDUCE_BENCH_REDUCE_H
#define STRATA_PERF_REDUCE_BENCH_REDUCE_H

#include <stdbool.h>
#include <stddef.h>

#include <strata/strata.h>
#include <strata/strata_agg.h>

/* ---- Open MPI baseline ---- */

/* Starts MPI (a singleton without mpirun is fine); false when this build
 * has no MPI or MPI fails to start (reason printed). */
bool perf_mpi_init(int *argc, char ***argv);
void perf_mpi_finalize(void);
/* E.g. "Open MPI v4.1.4"; "not compiled in" without MPI. */
const char *perf_mpi_version(void);
/* Whether MPI has a datatype for dtype (fp16 and bf16 it has not). */
bool perf_mpi_supports(strata_dtype_t dtype);
/* dst = src0, then dst = src_j + dst with MPI_Reduce_local(MPI_SUM) for
 * every further source: two buffers at a time, with Open MPI's own SIMD
 * operator. */
void perf_mpi_reduce_pairwise(strata_dtype_t dtype, void *dst,
                              const void *const *srcs, size_t nsrc,
                              size_t count);

/* ---- memory roofline ---- */

/* memcpy(dst, src, bytes) and a[i] += b[i] over bytes of fp32, split over
 * the pool's threads (NULL: the caller only). */
void perf_roofline_copy(strata_reduce_pool_t *pool, void *dst, const void *src,
                        size_t bytes);
void perf_roofline_add(strata_reduce_pool_t *pool, float *a, const float *b,
                       size_t bytes);
/* Loads bytes of each of srcs[0..nsrc-1] as a reduction reads them and
 * stores nothing: what reducing them into a destination cannot beat. */
void perf_roofline_read(strata_reduce_pool_t *pool, const void *const *srcs,
                        size_t nsrc, size_t bytes);

#endif /* STRATA_PERF_REDUCE_BENCH_REDUCE_H */
