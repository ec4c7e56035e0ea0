/* Shared by the single- and multi-threaded reduction entry points. */
#ifndef STRATA_AGG_REDUCE_H
#define STRATA_AGG_REDUCE_H

#include <stdbool.h>
#include <stddef.h>

#include <strata/strata_agg.h>

#include "agg/agg.h"

/* A destination this large would leave the caches before anyone reads it
 * (the sources stream through them as well), so it is written around them.
 * Smaller ones, such as a partition the update reads next, stay cached. */
#define AGG_STREAM_BYTES (16u << 20)

/* Checks the arguments of an SGD update, logging what is wrong as fn. */
strata_status_t agg_sgd_check(const char *fn, const strata_sgd_t *sgd,
                              strata_dtype_t grad_dtype, const float *master,
                              const float *momentum_buf,
                              const void *const *grads, size_t ngrads,
                              size_t count);

/* Checks the arguments of a reduction, logging what is wrong as fn. */
strata_status_t agg_reduce_check(const char *fn, strata_dtype_t dtype,
                                 const void *dst, const void *const *srcs,
                                 size_t nsrc, size_t count);

/* The start every reduction entry point shares: the arguments checked, then
 * the kernel of the table in use for dtype and its flags. STRATA_OK with
 * *kernel_out NULL: count is 0, nothing to do. */
strata_status_t agg_reduce_prepare(const char *fn, bool acc,
                                   strata_dtype_t dtype, const void *dst,
                                   const void *const *srcs, size_t nsrc,
                                   size_t count, agg_reduce_fn *kernel_out,
                                   unsigned *flags_out);

#endif /* STRATA_AGG_REDUCE_H */
