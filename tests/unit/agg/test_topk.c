/* Top-k: the exact reference, DGC's sampled threshold, error feedback and
 * scatter-add. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

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
    assert_int_equal(strata_sparse_scatter_add(d, 6, e, 4, 0.5f), STRATA_OK);
    const float want[6] = {0.5f, 1, 1.25f, 1, 1, 4};
    assert_memory_equal(d, want, sizeof(d));
    /* A bad index (a corrupt message) changes nothing. */
    const strata_sparse_t bad[2] = {{1, 9}, {6, 1}};
    assert_int_equal(strata_sparse_scatter_add(d, 6, bad, 2, 1.0f),
                     STRATA_ERR_RANGE);
    assert_memory_equal(d, want, sizeof(d));
    assert_int_equal(strata_sparse_scatter_add(d, 6, NULL, 0, 1.0f), STRATA_OK);
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
        cmocka_unit_test(bad_arguments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
