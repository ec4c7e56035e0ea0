/* Top-k: the exact reference, DGC's sampled threshold, error feedback and
 * scatter-add. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "agg_test.h"
#include "util/log.h"

static strata_topk_t *tk;

static int setup(void **state)
{
    (void)state;
    return strata_topk_create(1 << 20, 42, &tk) != STRATA_OK;
}

static int teardown(void **state)
{
    (void)state;
    strata_topk_destroy(tk);
    return 0;
}

static void exact_by_hand(void **state)
{
    (void)state;
    const float x[8] = {0.5f, -3, 2, 0, -2, 7, 2, NAN};
    strata_sparse_t out[8];
    /* NaN ranks first, then 7, -3; the three of magnitude 2 tie and the
     * lower indices win. */
    assert_int_equal(strata_topk_exact(tk, x, 8, 5, out), STRATA_OK);
    const uint32_t want[5] = {1, 2, 4, 5, 7};
    for (int i = 0; i < 5; i++)
        assert_int_equal(out[i].index, want[i]);
    assert_true(out[0].value == -3 && out[3].value == 7 && isnan(out[4].value));
    assert_int_equal(strata_topk_exact(tk, x, 8, 0, out), STRATA_OK);
    assert_int_equal(strata_topk_exact(tk, x, 8, 8, out), STRATA_OK);
    for (uint32_t i = 0; i < 8; i++)
        assert_int_equal(out[i].index, i);
}

static void k_rounds_up(void **state)
{
    (void)state;
    assert_int_equal(strata_topk_k(0, 0.5), 0);
    assert_int_equal(strata_topk_k(1000, 0.004), 4);
    assert_int_equal(strata_topk_k(1001, 0.004), 5);
    assert_int_equal(strata_topk_k(10, 1e-9), 1);
    assert_int_equal(strata_topk_k(10, 1.0), 10);
}

/* Without sampling the threshold is exact: sparsify equals the exact top-k,
 * and the sent elements leave the residual. */
static void unsampled_is_exact(void **state)
{
    (void)state;
    size_t n = 5000, k = strata_topk_k(n, 0.01);
    float *r = malloc(n * 4), *copy = malloc(n * 4);
    strata_sparse_t *a = malloc(k * 8), *b = malloc(k * 8);
    test_fill(STRATA_FP32, r, n, 3);
    memcpy(copy, r, n * 4);
    size_t m;
    assert_int_equal(strata_topk_exact(tk, r, n, k, a), STRATA_OK);
    assert_int_equal(strata_topk_sparsify(tk, r, NULL, n, 0.01, 1.0, b, &m),
                     STRATA_OK);
    assert_int_equal(m, k);
    for (size_t i = 0; i < k; i++) {
        assert_int_equal(a[i].index, b[i].index);
        assert_true(r[b[i].index] == 0.0f);
        copy[b[i].index] = 0.0f;
    }
    assert_memory_equal(r, copy, n * 4);
    free(r), free(copy), free(a), free(b);
}

/* Sampled: about k entries, increasing indices, none beyond k, and a
 * threshold separates them from what stays behind (up to the last entry
 * sent: DGC sends the first k that pass). */
static void sampled_threshold(void **state)
{
    (void)state;
    const struct {
        size_t n;
        double ratio, sample;
        int kind; /* 0 uniform, 1 heavy-tailed, 2 many ties */
    } cases[] = {
        {100000, 0.004, 0.008, 0}, {100000, 0.015, 0.01, 1},
        {1 << 20, 0.001, 0.01, 1}, {50000, 0.35, 0.01, 2},
        {3000, 0.01, 0.5, 0},      {200, 0.25, 0.01, 0},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(*cases); c++) {
        size_t n = cases[c].n, k = strata_topk_k(n, cases[c].ratio), m;
        float *r = malloc(n * 4);
        strata_sparse_t *out = malloc(k * 8);
        uint64_t s = c + 1;
        for (size_t i = 0; i < n; i++) {
            double u = (double)(test_rand(&s) >> 11) * 0x1p-53;
            r[i] = cases[c].kind == 0   ? (float)(u - 0.5)
                   : cases[c].kind == 1 ? (float)(0.01 / (u + 1e-4))
                                        : (float)(int)(u * 4);
        }
        assert_int_equal(strata_topk_sparsify(tk, r, NULL, n, cases[c].ratio,
                                              cases[c].sample, out, &m),
                         STRATA_OK);
        assert_true(m <= k);
        if (cases[c].kind != 2 && (double)m < 0.5 * (double)k)
            fail_msg("case %zu: %zu of k %zu sent", c, m, k);
        float least = INFINITY;
        for (size_t i = 0; i < m; i++) {
            if (i)
                assert_true(out[i].index > out[i - 1].index);
            least = fminf(least, fabsf(out[i].value));
            assert_true(r[out[i].index] == 0.0f);
        }
        size_t end = m == k ? out[m - 1].index : n;
        for (size_t i = 0; i < end; i++)
            if (fabsf(r[i]) > least)
                fail_msg("case %zu: %g left at %zu, %g sent", c, r[i], i,
                         (double)least);
        free(r), free(out);
    }
}

/* Nothing is lost: after any number of steps, what was sent plus the
 * residual is the sum of the gradients (exact with integer gradients). */
static void error_feedback_conserves(void **state)
{
    (void)state;
    size_t n = 20000, k = strata_topk_k(n, 0.01), m;
    float *r = calloc(n, 4), *g = malloc(n * 4);
    double *sum = calloc(n, 8), *sent = calloc(n, 8);
    strata_sparse_t *out = malloc(k * 8);
    uint64_t s = 9;
    for (int step = 0; step < 20; step++) {
        for (size_t i = 0; i < n; i++) {
            g[i] = (float)((int)(test_rand(&s) % 201) - 100);
            sum[i] += g[i];
        }
        assert_int_equal(strata_topk_sparsify(tk, r, g, n, 0.01, 0.01, out, &m),
                         STRATA_OK);
        assert_true(m > 0 && m <= k);
        for (size_t i = 0; i < m; i++)
            sent[out[i].index] += out[i].value;
    }
    for (size_t i = 0; i < n; i++)
        if (sent[i] + r[i] != sum[i])
            fail_msg("element %zu: sent %g + residual %g != %g", i, sent[i],
                     (double)r[i], sum[i]);
    free(r), free(g), free(sum), free(sent), free(out);
}

static void scatter_add(void **state)
{
    (void)state;
    float d[6] = {1, 1, 1, 1, 1, 1};
    const strata_sparse_t e[4] = {{5, 2}, {0, -1}, {5, 4}, {2, 0.5f}};
    assert_int_equal(strata_sparse_scatter_add(STRATA_FP32, d, 6, e, 4, 0.5f),
                     STRATA_OK);
    const float want[6] = {0.5f, 1, 1.25f, 1, 1, 4};
    assert_memory_equal(d, want, sizeof(d));
    /* A bad index (a corrupt message) changes nothing. */
    const strata_sparse_t bad[2] = {{1, 9}, {6, 1}};
    assert_int_equal(strata_sparse_scatter_add(STRATA_FP32, d, 6, bad, 2, 1.0f),
                     STRATA_ERR_RANGE);
    assert_memory_equal(d, want, sizeof(d));
    assert_int_equal(
        strata_sparse_scatter_add(STRATA_FP32, d, 6, NULL, 0, 1.0f), STRATA_OK);
}

/* Into fp16 and bf16 models: each entry added in fp32 and rounded once, bit
 * for bit what strata_reduce_acc does with the same entries as a dense
 * source. */
static void scatter_add_16bit(void **state)
{
    (void)state;
    const strata_dtype_t types[] = {STRATA_FP16, STRATA_BF16, STRATA_FP64};
    enum { N = 64, M = 9 };
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        strata_dtype_t dt = types[t];
        uint16_t sparse[N * 4], dense[N * 4], src[N * 4];
        test_fill(dt, sparse, N, 3 + t);
        memcpy(dense, sparse, sizeof(sparse));
        memset(src, 0, sizeof(src));
        strata_sparse_t e[M];
        for (uint32_t i = 0; i < M; i++) {
            e[i] = (strata_sparse_t){i * 7, (float)(i % 5) * 0.75f - 1.5f};
            test_store(dt, src, e[i].index, e[i].value);
        }
        assert_int_equal(strata_sparse_scatter_add(dt, sparse, N, e, M, 0.5f),
                         STRATA_OK);
        const void *srcs[1] = {src};
        assert_int_equal(strata_reduce_acc(dt, dense, srcs, 1, N, 0.5f),
                         STRATA_OK);
        assert_int_equal(test_first_diff(dt, sparse, dense, N), N);
        const strata_sparse_t bad[1] = {{N, 1}};
        assert_int_equal(strata_sparse_scatter_add(dt, sparse, N, bad, 1, 1),
                         STRATA_ERR_RANGE);
        assert_int_equal(test_first_diff(dt, sparse, dense, N), N);
    }
    float d[1] = {0};
    assert_int_equal(
        strata_sparse_scatter_add((strata_dtype_t)9, d, 1, NULL, 0, 1),
        STRATA_ERR_INVALID);
}

/* A dense flush sends the residual rounded to the partition's dtype and
 * keeps exactly what the rounding left out. */
static void residual_flush_keeps_the_rounding(void **state)
{
    (void)state;
    enum { N = 4096 };
    const strata_dtype_t types[] = {STRATA_FP32, STRATA_FP64, STRATA_FP16,
                                    STRATA_BF16};
    float *r = malloc(N * sizeof(float)), *was = malloc(N * sizeof(float));
    double *dst = malloc(N * sizeof(double));
    assert_non_null(r), assert_non_null(was), assert_non_null(dst);
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        strata_dtype_t dt = types[t];
        test_fill(STRATA_FP32, r, N, 11 + t);
        r[0] = 1e6f;    /* beyond fp16: sent as Inf, nothing kept */
        r[1] = 1.0001f; /* not a 16-bit value */
        r[2] = -3e-8f;  /* below fp16's subnormals */
        memcpy(was, r, N * sizeof(float));
        double *stored = malloc(N * sizeof(double));
        assert_non_null(stored);
        assert_int_equal(strata_master_store(dt, stored, r, N), STRATA_OK);
        assert_int_equal(strata_residual_flush(dt, dst, r, N), STRATA_OK);
        /* the master copy's model is what the flush sends */
        assert_int_equal(test_first_diff(dt, stored, dst, N), N);
        free(stored);
        for (size_t i = 0; i < N; i++) {
            double sent = test_get(dt, dst, i), want = was[i];
            if (dt == STRATA_FP16)
                want = agg_f16_to_f32(agg_f32_to_f16(was[i]));
            else if (dt == STRATA_BF16)
                want = agg_bf16_to_f32(agg_f32_to_bf16(was[i]));
            if (!isfinite(sent)) { /* Inf, NaN, or an overflow: all sent */
                assert_true(isnan(sent) ? isnan(want) : sent == want);
                assert_true(r[i] == 0);
                continue;
            }
            if (sent != want || sent + (double)r[i] != (double)was[i])
                fail_msg("%s element %zu: sent %g (want %g) + residual %g != "
                         "%g",
                         strata_dtype_name(dt), i, sent, want, (double)r[i],
                         (double)was[i]);
        }
        if (dt != STRATA_FP32 && dt != STRATA_FP64)
            assert_true(r[1] != 0);
    }
    assert_int_equal(strata_residual_flush(STRATA_FP16, NULL, r, 1),
                     STRATA_ERR_INVALID);
    free(r), free(was), free(dst);
}

/* GDTopK on a 16-bit partition: fp16 gradients widened into an fp32
 * residual, sparse sends, and every fourth step a dense fp16 flush; what
 * was sent plus the residual is every gradient, exactly. */
static void error_feedback_on_fp16(void **state)
{
    (void)state;
    enum { N = 5000, STEPS = 12 };
    uint16_t *g = malloc(N * 2), *flush = malloc(N * 2);
    float *r = calloc(N, sizeof(float));
    double *sum = calloc(N, sizeof(double)), *sent = calloc(N, sizeof(double));
    strata_sparse_t *out = malloc(N * sizeof(*out));
    assert_non_null(g), assert_non_null(flush), assert_non_null(r);
    assert_non_null(sum), assert_non_null(sent), assert_non_null(out);
    uint64_t s = 5;
    for (int step = 0; step < STEPS; step++) {
        for (size_t i = 0; i < N; i++) {
            float v = (float)((int)(test_rand(&s) % 2001) - 1000) / 64;
            g[i] = agg_f32_to_f16(v);
            sum[i] += agg_f16_to_f32(g[i]);
        }
        assert_int_equal(strata_axpy(STRATA_FP16, r, g, N, 1.0f), STRATA_OK);
        if (step % 4 == 3) {
            assert_int_equal(strata_residual_flush(STRATA_FP16, flush, r, N),
                             STRATA_OK);
            for (size_t i = 0; i < N; i++)
                sent[i] += agg_f16_to_f32(flush[i]);
            continue;
        }
        size_t m;
        assert_int_equal(
            strata_topk_sparsify(tk, r, NULL, N, 0.02, 0.05, out, &m),
            STRATA_OK);
        for (size_t i = 0; i < m; i++)
            sent[out[i].index] += out[i].value;
    }
    for (size_t i = 0; i < N; i++)
        if (sent[i] + r[i] != sum[i])
            fail_msg("element %zu: sent %g + residual %g != %g", i, sent[i],
                     (double)r[i], sum[i]);
    free(g), free(flush), free(r), free(sum), free(sent), free(out);
}

static void bad_arguments(void **state)
{
    (void)state;
    float r[4] = {0};
    strata_sparse_t out[4];
    size_t m;
    strata_topk_t *small;
    assert_int_equal(strata_topk_create(3, 1, &small), STRATA_OK);
    assert_int_equal(strata_topk_sparsify(small, r, NULL, 4, 0.5, 1, out, &m),
                     STRATA_ERR_RANGE);
    assert_int_equal(strata_topk_sparsify(small, r, NULL, 3, 0.0, 1, out, &m),
                     STRATA_ERR_INVALID);
    assert_int_equal(strata_topk_sparsify(small, r, NULL, 3, 1.5, 1, out, &m),
                     STRATA_ERR_INVALID);
    assert_int_equal(strata_topk_exact(small, r, 3, 4, out),
                     STRATA_ERR_INVALID);
    assert_int_equal(strata_topk_sparsify(small, r, NULL, 0, 0.5, 1, out, &m),
                     STRATA_OK);
    assert_int_equal(m, 0);
    strata_topk_destroy(small);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exact_by_hand),
        cmocka_unit_test(k_rounds_up),
        cmocka_unit_test(unsampled_is_exact),
        cmocka_unit_test(sampled_threshold),
        cmocka_unit_test(error_feedback_conserves),
        cmocka_unit_test(scatter_add),
        cmocka_unit_test(scatter_add_16bit),
        cmocka_unit_test(residual_flush_keeps_the_rounding),
        cmocka_unit_test(error_feedback_on_fp16),
        cmocka_unit_test(bad_arguments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
