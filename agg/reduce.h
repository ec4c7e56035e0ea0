/* Shared by the single- and multi-threaded reduction entry points. */
#ifndef STRATA_AGG_REDUCE_H
#define STRATA_AGG_REDUCE_H

#include <stdbool.h>
#include <stddef.h>

#include <strata/strata_agg.h>

/* Reductions that touch at least this many bytes (sources and destination)
 * store the destination around the caches: it would not fit them anyway. */
#define AGG_STREAM_BYTES (8u << 20)

/* Checks the arguments of a reduction, logging what is wrong as fn. */
strata_status_t agg_reduce_check(const char *fn, strata_dtype_t dtype,
                                 const void *dst, const void *const *srcs,
                                 size_t nsrc, size_t count);

#endif /* STRATA_AGG_REDUCE_H */
