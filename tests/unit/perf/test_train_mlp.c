/* The MLP: its gradient against finite differences, its layout, and that
 * SGD on it learns. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "perf/train/mlp.h"

#define N 6

static const perf_mlp_dims_t small = {7, 5, 4};

/* Inputs and parameters away from the ReLU's kink, so that central
 * differences see a smooth function. */
static void small_problem(float *params, float *x, uint8_t *y)
{
    perf_mlp_init(&small, 3, params);
    size_t count = perf_mlp_param_count(&small);
    for (size_t i = 0; i < count; i++)
        params[i] += 0.1f * ((float)(int)(i * 37 % 11) - 5.0f) / 5.0f;
    for (int i = 0; i < N * 7; i++)
        x[i] = sinf((float)i * 1.3f);
    for (int i = 0; i < N; i++)
        y[i] = (uint8_t)(i % 4);
}

static void gradient_matches_finite_differences(void **state)
{
    (void)state;
    size_t count = perf_mlp_param_count(&small);
    float *p = malloc(count * sizeof(float));
    float *g = malloc(count * sizeof(float));
    float x[N * 7];
    uint8_t y[N];
    small_problem(p, x, y);
    perf_mlp_work_t *w;
    assert_int_equal(perf_mlp_work_create(&small, N, &w), STRATA_OK);
    double loss = perf_mlp_loss_grad(w, p, x, y, N, g);
    assert_float_equal(loss, perf_mlp_loss(w, p, x, y, N, NULL), 1e-6);
    const float eps = 1e-2f;
    for (size_t i = 0; i < count; i++) {
        float keep = p[i];
        p[i] = keep + eps;
        double up = perf_mlp_loss(w, p, x, y, N, NULL);
        p[i] = keep - eps;
        double down = perf_mlp_loss(w, p, x, y, N, NULL);
        p[i] = keep;
        double fd = (up - down) / (2.0 * eps);
        double err = fabs(fd - g[i]) / fmax(1e-3, fabs(fd) + fabs(g[i]));
        if (err > 1e-2)
            fail_msg("parameter %zu: gradient %g, finite difference %g", i,
                     (double)g[i], fd);
    }
    perf_mlp_work_free(w);
    free(p);
    free(g);
}

static void tensors_tile_the_buffer(void **state)
{
    (void)state;
    perf_mlp_dims_t d = {784, 256, 10};
    perf_mlp_tensor_t t[PERF_MLP_TENSORS];
    perf_mlp_tensors(&d, t);
    assert_string_equal(t[0].name, "fc1.weight");
    assert_int_equal(t[0].count, 256 * 784);
    assert_string_equal(t[3].name, "fc2.bias");
    size_t at = 0;
    for (int i = 0; i < PERF_MLP_TENSORS; i++) {
        assert_int_equal(t[i].offset, at);
        at += t[i].count;
    }
    assert_int_equal(at, perf_mlp_param_count(&d));
    assert_int_equal(at, 203530); /* 784-256-10: about 0.8 MB of fp32 */
}

static void same_seed_same_model(void **state)
{
    (void)state;
    size_t count = perf_mlp_param_count(&small);
    float *a = malloc(count * sizeof(float));
    float *b = malloc(count * sizeof(float));
    perf_mlp_init(&small, 9, a);
    perf_mlp_init(&small, 9, b);
    assert_memory_equal(a, b, count * sizeof(float));
    perf_mlp_init(&small, 10, b);
    assert_memory_not_equal(a, b, count * sizeof(float));
    free(a);
    free(b);
}

/* Four well-separated classes: a few SGD steps classify all of them. */
static void sgd_learns_a_separable_set(void **state)
{
    (void)state;
    perf_mlp_dims_t d = {4, 8, 4};
    size_t count = perf_mlp_param_count(&d);
    float *p = malloc(count * sizeof(float));
    float *g = malloc(count * sizeof(float));
    perf_mlp_init(&d, 1, p);
    float x[16] = {0};
    uint8_t y[4];
    for (int i = 0; i < 4; i++) {
        x[i * 4 + i] = 2.0f;
        y[i] = (uint8_t)i;
    }
    perf_mlp_work_t *w;
    assert_int_equal(perf_mlp_work_create(&d, 4, &w), STRATA_OK);
    double first = perf_mlp_loss_grad(w, p, x, y, 4, g);
    for (int step = 0; step < 200; step++) {
        perf_mlp_loss_grad(w, p, x, y, 4, g);
        perf_mlp_sgd(count, 0.5f, g, p);
    }
    size_t correct;
    double last = perf_mlp_loss(w, p, x, y, 4, &correct);
    assert_true(last < 0.1 * first);
    assert_int_equal(correct, 4);

    uint8_t pixels[16], labels[4];
    for (int i = 0; i < 16; i++)
        pixels[i] = x[i] > 0 ? 255 : 0;
    memcpy(labels, y, 4);
    perf_dataset_t ds = {4, 4, pixels, labels, 2.0f / 255.0f, 0.0f};
    double acc, loss;
    perf_mlp_evaluate(w, p, &ds, &acc, &loss);
    assert_float_equal(acc, 1.0, 1e-12);
    assert_float_equal(loss, last, 1e-5);
    perf_mlp_work_free(w);
    free(p);
    free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gradient_matches_finite_differences),
        cmocka_unit_test(tensors_tile_the_buffer),
        cmocka_unit_test(same_seed_same_model),
        cmocka_unit_test(sgd_learns_a_separable_set),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
