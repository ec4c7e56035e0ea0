/*
 * The memory roofline of strata-bench-reduce: memcpy and the STREAM-style
 * a[i] += b[i], as fast as the compiler makes them for this CPU (one clone
 * per instruction set, chosen by the loader), split into contiguous pieces
 * over a thread pool.
 */
#include <string.h>

#include "agg/agg.h"
#include "perf/reduce/bench_reduce.h"

#define PERF_PIECE (1u << 20) /* bytes per piece handed to a thread */

__attribute__((target_clones("avx512f", "avx2", "default"))) static void
perf_add(float *restrict a, const float *restrict b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        a[i] += b[i];
}

typedef struct perf_stream {
    char *dst;
    const char *src;
    size_t bytes;
} perf_stream_t;

static size_t perf_piece(const perf_stream_t *s, size_t c, size_t *len_out)
{
    size_t off = c * PERF_PIECE;
    *len_out = s->bytes - off < PERF_PIECE ? s->bytes - off : PERF_PIECE;
    return off;
}

static void perf_copy_piece(void *arg, size_t c)
{
    const perf_stream_t *s = arg;
    size_t len, off = perf_piece(s, c, &len);
    memcpy(s->dst + off, s->src + off, len);
}

static void perf_add_piece(void *arg, size_t c)
{
    const perf_stream_t *s = arg;
    size_t len, off = perf_piece(s, c, &len);
    perf_add((float *)(s->dst + off), (const float *)(s->src + off),
             len / sizeof(float));
}

static void perf_stream_run(strata_reduce_pool_t *pool, void *dst,
                            const void *src, size_t bytes, agg_task_fn fn)
{
    perf_stream_t s = {dst, src, bytes};
    (void)agg_pool_for(pool, (bytes + PERF_PIECE - 1) / PERF_PIECE, fn, &s);
}

void perf_roofline_copy(strata_reduce_pool_t *pool, void *dst, const void *src,
                        size_t bytes)
{
    perf_stream_run(pool, dst, src, bytes, perf_copy_piece);
}

void perf_roofline_add(strata_reduce_pool_t *pool, float *a, const float *b,
                       size_t bytes)
{
    perf_stream_run(pool, a, b, bytes, perf_add_piece);
}
