/* axpy and SGD: the scalar reference against worked examples, every SIMD
 * path against the scalar reference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include "agg_test.h"
#include "tests/support/test_log.h"
#include "util/log.h"

#define N 1037

static void sgd_matches_pytorch_by_hand(void **state)
{
    (void)state;
    /* torch.optim.SGD([w], lr=0.5, momentum=0.9, weight_decay=0.1),
     * w = 2, grads 1 then 3 (all exact in binary):
     *   step 1: g = 1 + 0.2 = 1.2, v = 1.2, w = 2 - 0.6 = 1.4
     *   step 2: g = 3 + 0.14 = 3.14, v = 1.08 + 3.14 = 4.22, w = 1.4 - 2.11 */
    strata_sgd_t p = {
        .lr = 0.5f, .momentum = 0.9f, .weight_decay = 0.1f, .grad_scale = 1.0f};
    float w = 2.0f, v = 0.0f, g1 = 1.0f, g2 = 3.0f;
    assert_int_equal(strata_sgd_update(&p, STRATA_FP32, &w, &v, &g1, 1),
                     STRATA_OK);
    assert_float_equal(w, 1.4f, 1e-6);
    assert_float_equal(v, 1.2f, 1e-6);
    assert_int_equal(strata_sgd_update(&p, STRATA_FP32, &w, &v, &g2, 1),
                     STRATA_OK);
    assert_float_equal(v, 4.22f, 1e-5);
    assert_float_equal(w, 1.4f - 2.11f, 1e-5);
    /* Nesterov: d = g + mu * v */
    p.nesterov = true;
    w = 2.0f, v = 0.0f;
    assert_int_equal(strata_sgd_update(&p, STRATA_FP32, &w, &v, &g1, 1),
                     STRATA_OK);
    assert_float_equal(w, 2.0f - 0.5f * (1.2f + 0.9f * 1.2f), 1e-6);
    /* No momentum needs no buffer; grad_scale applies first; fp16 grads. */
    strata_sgd_t plain = {.lr = 0.25f, .grad_scale = 0.5f};
    uint16_t h = agg_f32_to_f16(4.0f);
    w = 1.0f;
    assert_int_equal(strata_sgd_update(&plain, STRATA_FP16, &w, NULL, &h, 1),
                     STRATA_OK);
    assert_true(w == 0.5f);
    uint16_t b = agg_f32_to_bf16(-8.0f);
    assert_int_equal(strata_sgd_update(&plain, STRATA_BF16, &w, NULL, &b, 1),
                     STRATA_OK);
    assert_true(w == 1.5f);
}

static void axpy_by_hand(void **state)
{
    (void)state;
    float y[3] = {1, 2, 3}, x[3] = {1, -1, 0.5f};
    uint16_t hx[3], bx[3];
    for (int i = 0; i < 3; i++)
        hx[i] = agg_f32_to_f16(x[i]), bx[i] = agg_f32_to_bf16(x[i]);
    assert_int_equal(strata_axpy(STRATA_FP32, y, x, 3, 2.0f), STRATA_OK);
    assert_int_equal(strata_axpy(STRATA_FP16, y, hx, 3, 2.0f), STRATA_OK);
    assert_int_equal(strata_axpy(STRATA_BF16, y, bx, 3, -1.0f), STRATA_OK);
    assert_true(y[0] == 4.0f && y[1] == -1.0f && y[2] == 4.5f);
}

static void fill_f32(float *p, size_t n, uint64_t seed)
{
    test_fill(STRATA_FP32, p, n, seed);
}

static void every_path_matches_scalar(void **state)
{
    (void)state;
    float *w[2], *v[2], *g = malloc(N * 4 + 64);
    for (int k = 0; k < 2; k++)
        w[k] = malloc(N * 4 + 64), v[k] = malloc(N * 4 + 64);
    const strata_sgd_t params[] = {
        {.lr = 0.01f, .grad_scale = 1.0f},
        {.lr = 0.1f,
         .momentum = 0.9f,
         .weight_decay = 5e-4f,
         .grad_scale = 0.25f},
        {.lr = 0.3f,
         .momentum = 0.5f,
         .weight_decay = 0.1f,
         .grad_scale = 1.0f / 3.0f,
         .nesterov = true},
    };
    for (size_t t = 0; t < agg_impl_count(); t++) {
        const agg_ops_t *ops = agg_impl(t);
        if (ops == &agg_ops_scalar || !agg_impl_supported(ops))
            continue;
        for (int dt = 0; dt < AGG_NDTYPES; dt++) {
            if (dt == STRATA_FP64)
                continue;
            for (size_t n = 0; n < N; n += n < 70 ? 1 : 97) {
                size_t sh = n % 5; /* misaligned, differently per buffer */
                char *gs = (char *)g + sh * strata_dtype_size(dt);
                test_fill(dt, gs, n, n);
                for (int k = 0; k < 2; k++) {
                    fill_f32(w[k] + sh, n, n + 1);
                    fill_f32(v[k] + (n % 3), n, n + 2);
                }
                const strata_sgd_t *p = &params[n % 3];
                const void *grads[1] = {gs};
                agg_ops_scalar.sgd[dt](p, w[0] + sh, v[0] + n % 3, grads, 1, 0,
                                       n);
                ops->sgd[dt](p, w[1] + sh, v[1] + n % 3, grads, 1, 0, n);
                agg_ops_scalar.axpy[dt](v[0], gs, n, -0.3f);
                ops->axpy[dt](v[1], gs, n, -0.3f);
                size_t i =
                    test_first_diff(STRATA_FP32, w[0] + sh, w[1] + sh, n);
                size_t j = test_first_diff(STRATA_FP32, v[0], v[1], n + 3);
                if (i < n || j < n + 3)
                    fail_msg("%s %s n %zu: master %zu, momentum/axpy %zu",
                             ops->name, strata_dtype_name(dt), n, i, j);
            }
        }
    }
    for (int k = 0; k < 2; k++)
        free(w[k]), free(v[k]);
    free(g);
}

/* The fused sum and update: every path against the scalar reference over
 * 1..7 gradients and a sub-range, against strata_reduce + strata_sgd_update
 * bit for bit, and over a pool. */
static void fused_sum_and_update(void **state)
{
    (void)state;
    enum { M = 3001, G = 7 };
    const size_t es_max = 4;
    float *w[3], *v[3], *sum = malloc(M * 4);
    void *g[G];
    for (int k = 0; k < 3; k++)
        w[k] = malloc(M * 4), v[k] = malloc(M * 4);
    for (int j = 0; j < G; j++)
        g[j] = malloc(M * es_max);
    const strata_sgd_t p = {.lr = 0.05f,
                            .momentum = 0.9f,
                            .weight_decay = 1e-4f,
                            .grad_scale = 0.125f};
    strata_reduce_pool_t *pool;
    assert_int_equal(strata_reduce_pool_create(2, &pool), STRATA_OK);
    for (int dt = 0; dt < AGG_NDTYPES; dt++) {
        if (dt == STRATA_FP64)
            continue;
        for (size_t n = 1; n <= G; n++) {
            for (size_t j = 0; j < n; j++)
                test_fill(dt, g[j], M, 40 + j);
            for (int k = 0; k < 3; k++) {
                fill_f32(w[k], M, 7);
                fill_f32(v[k], M, 8);
            }
            const void *const *gr = (const void *const *)g;
            agg_ops_scalar.sgd[dt](&p, w[0], v[0], gr, n, 0, M);
            for (size_t t = 0; t < agg_impl_count(); t++) {
                const agg_ops_t *ops = agg_impl(t);
                if (!agg_impl_supported(ops))
                    continue;
                memcpy(w[1], w[2], M * 4), memcpy(v[1], v[2], M * 4);
                ops->sgd[dt](&p, w[1], v[1], gr, n, 0, 1000);
                ops->sgd[dt](&p, w[1], v[1], gr, n, 1000, M - 1000);
                assert_int_equal(test_first_diff(STRATA_FP32, w[0], w[1], M),
                                 M);
                assert_int_equal(test_first_diff(STRATA_FP32, v[0], v[1], M),
                                 M);
            }
            memcpy(w[1], w[2], M * 4), memcpy(v[1], v[2], M * 4);
            assert_int_equal(
                strata_sgd_update_sum_mt(pool, &p, dt, w[1], v[1], gr, n, M),
                STRATA_OK);
            assert_int_equal(test_first_diff(STRATA_FP32, w[0], w[1], M), M);
            if (dt != STRATA_FP32)
                continue;
            /* Unfused: sum into fp32, then update. */
            assert_int_equal(strata_reduce(STRATA_FP32, sum, gr, n, M, 1.0),
                             STRATA_OK);
            assert_int_equal(
                strata_sgd_update(&p, STRATA_FP32, w[2], v[2], sum, M),
                STRATA_OK);
            assert_int_equal(test_first_diff(STRATA_FP32, w[0], w[2], M), M);
            assert_int_equal(test_first_diff(STRATA_FP32, v[0], v[2], M), M);
        }
    }
    strata_reduce_pool_destroy(pool);
    for (int k = 0; k < 3; k++)
        free(w[k]), free(v[k]);
    for (int j = 0; j < G; j++)
        free(g[j]);
    free(sum);
}

/* Large enough for the pool's threads to share it. */
static void fused_update_over_a_pool(void **state)
{
    (void)state;
    enum { M = 1 << 19, G = 3 };
    float *w[2], *v[2], *g[G];
    for (int k = 0; k < 2; k++) {
        w[k] = malloc(M * 4), v[k] = malloc(M * 4);
        fill_f32(w[k], M, 1);
        fill_f32(v[k], M, 2);
    }
    for (int j = 0; j < G; j++) {
        g[j] = malloc(M * 4);
        fill_f32(g[j], M, 3 + (uint64_t)j);
    }
    const strata_sgd_t p = {.lr = 0.1f, .momentum = 0.5f, .grad_scale = 1};
    const void *const *gr = (const void *const *)g;
    strata_reduce_pool_t *pool;
    assert_int_equal(strata_reduce_pool_create(2, &pool), STRATA_OK);
    for (int step = 0; step < 3; step++) {
        assert_int_equal(strata_sgd_update_sum_mt(NULL, &p, STRATA_FP32, w[0],
                                                  v[0], gr, G, M),
                         STRATA_OK);
        assert_int_equal(strata_sgd_update_sum_mt(pool, &p, STRATA_FP32, w[1],
                                                  v[1], gr, G, M),
                         STRATA_OK);
    }
    assert_int_equal(test_first_diff(STRATA_FP32, w[0], w[1], M), M);
    assert_int_equal(test_first_diff(STRATA_FP32, v[0], v[1], M), M);
    strata_reduce_pool_destroy(pool);
    for (int k = 0; k < 2; k++)
        free(w[k]), free(v[k]);
    for (int j = 0; j < G; j++)
        free(g[j]);
}

static void bad_arguments(void **state)
{
    (void)state;
    float w = 1, g = 1;
    double d = 1;
    strata_sgd_t p = {.lr = 1, .momentum = 0.9f, .grad_scale = 1};
    test_log_start();
    assert_int_equal(strata_sgd_update(&p, STRATA_FP32, &w, NULL, &g, 1),
                     STRATA_ERR_INVALID);
    assert_int_equal(strata_sgd_update(NULL, STRATA_FP32, &w, &w, &g, 1),
                     STRATA_ERR_INVALID);
    assert_int_equal(strata_sgd_update(&p, STRATA_FP64, &w, &w, &d, 1),
                     STRATA_ERR_INVALID);
    assert_int_equal(strata_axpy(STRATA_FP64, &w, &d, 1, 1.0f),
                     STRATA_ERR_INVALID);
    assert_int_equal(strata_axpy(STRATA_FP32, NULL, &g, 1, 1.0f),
                     STRATA_ERR_INVALID);
    const void *grads[3] = {&g, NULL, &g};
    assert_int_equal(
        strata_sgd_update_sum_mt(NULL, &p, STRATA_FP32, &w, &w, grads, 3, 1),
        STRATA_ERR_INVALID);
    assert_int_equal(
        strata_sgd_update_sum_mt(NULL, &p, STRATA_FP32, &w, &w, grads, 0, 1),
        STRATA_ERR_INVALID);
    assert_int_equal(test_log.errors, 7);
    assert_true(w == 1.0f);
    test_log_stop();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sgd_matches_pytorch_by_hand),
        cmocka_unit_test(axpy_by_hand),
        cmocka_unit_test(every_path_matches_scalar),
        cmocka_unit_test(fused_sum_and_update),
        cmocka_unit_test(fused_update_over_a_pool),
        cmocka_unit_test(bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
