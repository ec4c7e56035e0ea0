/*
 * The memory roofline of strata-bench-reduce: memcpy and the STREAM-style
 * a[i] += b[i], as fast as the compiler makes them for this CPU (one clone
 * per instruction set, chosen by the loader), split into contiguous pieces
 * over a thread pool; and the read-only kernel, the traffic an N-source
 * reduction cannot avoid.
 */
#include <stdint.h>
#include <string.h>

#include "agg/agg.h"
#include "perf/reduce/bench_reduce.h"

#define PERF_PIECE (1u << 20) /* bytes per piece handed to a thread */
/* Below this many bytes moved, the reduce pool runs on its caller alone. */
#define PERF_POOL_MIN_BYTES (4u << 20)

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

/* ---- read-only: load N sources, store nothing ---- */

/* 64 bytes: one cache line, one AVX-512 register (two AVX2 ones). */
typedef uint64_t perf_line_t __attribute__((vector_size(64)));

/* What the loads fold into, kept so that the compiler cannot drop them. */
static volatile uint64_t perf_read_sink;

/*
 * ORs bytes [off, off + len) of every source into four accumulators, in the
 * order the reduction kernels read them: 256 bytes (four cache lines) of
 * each source in turn. OR costs less than any add, so this is the loads
 * alone.
 */
__attribute__((target_clones("avx512f", "avx2", "default"))) static uint64_t
perf_read(const char *const *srcs, size_t nsrc, size_t off, size_t len)
{
    perf_line_t acc[4] = {{0}};
    size_t i = off, end = off + len;
    for (; end - i >= sizeof(acc); i += sizeof(acc))
        for (size_t j = 0; j < nsrc; j++)
            for (int u = 0; u < 4; u++) {
                perf_line_t x;
                memcpy(&x, srcs[j] + i + u * sizeof(x), sizeof(x));
                acc[u] |= x;
            }
    uint64_t r = 0;
    for (; i < end; i++)
        for (size_t j = 0; j < nsrc; j++)
            r |= (uint8_t)srcs[j][i];
    for (int u = 0; u < 4; u++)
        for (size_t k = 0; k < 8; k++)
            r |= acc[u][k];
    return r;
}

typedef struct perf_read_job {
    const char *const *srcs;
    size_t nsrc, bytes, chunk;
} perf_read_job_t;

static void perf_read_piece(void *arg, size_t c)
{
    const perf_read_job_t *j = arg;
    size_t off = c * j->chunk;
    size_t len = j->bytes - off < j->chunk ? j->bytes - off : j->chunk;
    perf_read_sink = perf_read(j->srcs, j->nsrc, off, len);
}

void perf_roofline_read(strata_reduce_pool_t *pool, const void *const *srcs,
                        size_t nsrc, size_t bytes)
{
    /* Pieces as the reduce pool cuts them: PERF_PIECE / 2 over all the
     * sources, whole 4 KiB of each. */
    size_t chunk = (PERF_PIECE / 2 / nsrc) & ~(size_t)4095;
    perf_read_job_t j = {(const char *const *)srcs, nsrc, bytes,
                         chunk ? chunk : 4096};
    if ((nsrc + 1) * bytes < PERF_POOL_MIN_BYTES) /* as the reduce pool */
        pool = NULL;
    (void)agg_pool_for(pool, (bytes + j.chunk - 1) / j.chunk, perf_read_piece,
                       &j);
}
