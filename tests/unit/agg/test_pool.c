/* The reduction pool: same results as one thread, for every pool size,
 * after idle periods (workers asleep), and from several pools at once. Run
 * under TSan too. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "agg_test.h"

#define NSRC 4
#define BIG ((size_t)1 << 19) /* fp32 elements: 10 MiB moved, many chunks */

typedef struct data {
    float *src[NSRC], *ref, *out;
} data_t;

static void data_init(data_t *d, size_t n, uint64_t seed)
{
    for (int j = 0; j < NSRC; j++) {
        d->src[j] = malloc(n * 4);
        test_fill(STRATA_FP32, d->src[j], n, seed + (uint64_t)j);
    }
    d->ref = malloc(n * 4);
    d->out = malloc(n * 4);
    test_fill(STRATA_FP32, d->ref, n, seed + 100);
    memcpy(d->out, d->ref, n * 4);
}

static void data_free(data_t *d)
{
    for (int j = 0; j < NSRC; j++)
        free(d->src[j]);
    free(d->ref);
    free(d->out);
}

static void reduce_and_compare(strata_reduce_pool_t *pool, data_t *d, size_t n,
                               bool acc)
{
    const void *srcs[NSRC] = {d->src[0], d->src[1], d->src[2], d->src[3]};
    if (acc) {
        assert_int_equal(
            strata_reduce_acc(STRATA_FP32, d->ref, srcs, NSRC, n, 0.5),
            STRATA_OK);
        assert_int_equal(
            strata_reduce_acc_mt(pool, STRATA_FP32, d->out, srcs, NSRC, n, 0.5),
            STRATA_OK);
    } else {
        assert_int_equal(strata_reduce(STRATA_FP32, d->ref, srcs, NSRC, n, 0.5),
                         STRATA_OK);
        assert_int_equal(
            strata_reduce_mt(pool, STRATA_FP32, d->out, srcs, NSRC, n, 0.5),
            STRATA_OK);
    }
    size_t i = test_first_diff(STRATA_FP32, d->ref, d->out, n);
    if (i < n)
        fail_msg("%u threads, %zu elements: element %zu differs",
                 strata_reduce_pool_threads(pool), n, i);
}

static void every_pool_size(void **state)
{
    (void)state;
    data_t d;
    data_init(&d, BIG + 13, 1);
    for (unsigned t = 1; t <= 4; t++) {
        strata_reduce_pool_t *pool;
        assert_int_equal(strata_reduce_pool_create(t, &pool), STRATA_OK);
        assert_int_equal(strata_reduce_pool_threads(pool), t);
        for (size_t n = BIG + 13; n > 100; n /= 7)
            reduce_and_compare(pool, &d, n, n & 1);
        strata_reduce_pool_destroy(pool);
    }
    assert_int_equal(strata_reduce_pool_threads(NULL), 1);
    reduce_and_compare(NULL, &d, BIG, false);
    data_free(&d);
}

static void after_idle_periods(void **state)
{
    (void)state;
    data_t d;
    data_init(&d, BIG, 2);
    strata_reduce_pool_t *pool;
    assert_int_equal(strata_reduce_pool_create(3, &pool), STRATA_OK);
    for (int i = 0; i < 4; i++) {
        /* long enough for the workers to stop spinning and sleep */
        nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
        reduce_and_compare(pool, &d, BIG, i & 1);
    }
    strata_reduce_pool_destroy(pool);
    /* A pool destroyed while its workers still spin. */
    assert_int_equal(strata_reduce_pool_create(2, &pool), STRATA_OK);
    reduce_and_compare(pool, &d, BIG, false);
    strata_reduce_pool_destroy(pool);
    data_free(&d);
}

typedef struct chunked {
    const agg_ops_t *ops;
    float *dst;
    const void *srcs[NSRC];
    size_t count, chunk;
} chunked_t;

static void stream_chunk(void *arg, size_t c)
{
    const chunked_t *j = arg;
    size_t off = c * j->chunk;
    size_t n = j->count - off < j->chunk ? j->count - off : j->chunk;
    j->ops->reduce[STRATA_FP32](j->dst, j->srcs, NSRC, off, n, 0.5,
                                AGG_REDUCE_STREAM | AGG_REDUCE_ACC);
}

/* Streamed stores from several threads into chunks that share cache lines
 * (1001 elements: no chunk starts on a line), as large reductions do. */
static void streamed_chunks_in_parallel(void **state)
{
    (void)state;
    data_t d;
    data_init(&d, BIG, 3);
    strata_reduce_pool_t *pool;
    assert_int_equal(strata_reduce_pool_create(2, &pool), STRATA_OK);
    chunked_t j = {.ops = agg_ops(), .dst = d.out, .count = BIG, .chunk = 1001};
    for (int k = 0; k < NSRC; k++)
        j.srcs[k] = d.src[k];
    agg_ops_scalar.reduce[STRATA_FP32](d.ref, j.srcs, NSRC, 0, BIG, 0.5,
                                       AGG_REDUCE_ACC);
    assert_int_equal(agg_pool_for(pool, (BIG + 1000) / 1001, stream_chunk, &j),
                     STRATA_OK);
    assert_int_equal(test_first_diff(STRATA_FP32, d.ref, d.out, BIG), BIG);
    strata_reduce_pool_destroy(pool);
    data_free(&d);
}

static void *hammer(void *arg)
{
    data_t *d = arg;
    strata_reduce_pool_t *pool;
    if (strata_reduce_pool_create(2, &pool) != STRATA_OK)
        return "create";
    const void *srcs[NSRC] = {d->src[0], d->src[1], d->src[2], d->src[3]};
    for (int i = 0; i < 20; i++)
        if (strata_reduce_mt(pool, STRATA_FP32, d->out, srcs, NSRC, BIG / 4,
                             1.0) != STRATA_OK)
            return "reduce";
    strata_reduce_pool_destroy(pool);
    return NULL;
}

/* Many back-to-back jobs on two pools at once (races show under TSan). */
static void two_pools_at_once(void **state)
{
    (void)state;
    data_t d[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        data_init(&d[i], BIG / 4, 10 + (uint64_t)i);
        assert_int_equal(pthread_create(&th[i], NULL, hammer, &d[i]), 0);
    }
    for (int i = 0; i < 2; i++) {
        void *err;
        pthread_join(th[i], &err);
        if (err)
            fail_msg("thread %d: %s failed", i, (char *)err);
        const void *srcs[NSRC] = {d[i].src[0], d[i].src[1], d[i].src[2],
                                  d[i].src[3]};
        strata_reduce(STRATA_FP32, d[i].ref, srcs, NSRC, BIG / 4, 1.0);
        assert_int_equal(
            test_first_diff(STRATA_FP32, d[i].ref, d[i].out, BIG / 4), BIG / 4);
        data_free(&d[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_pool_size),
        cmocka_unit_test(after_idle_periods),
        cmocka_unit_test(streamed_chunks_in_parallel),
        cmocka_unit_test(two_pools_at_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
