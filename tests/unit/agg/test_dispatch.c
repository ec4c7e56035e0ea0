/* Choice of the kernels: STRATA_SIMD, STRATA_REDUCE_THREADS, CPUs that lack
 * a path (simulated by masking features), and the lazy configuration. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "agg_test.h"
#include "tests/support/test_log.h"
#include "util/log.h"

static int setup(void **state)
{
    (void)state;
    test_log_start();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    agg_cpu_mask(0);
    test_log_stop();
    return 0;
}

static strata_status_t init_with(const char *key, const char *value)
{
    util_settings_t *s;
    assert_int_equal(util_settings_defaults(agg_settings, AGG_SET__COUNT, &s),
                     STRATA_OK);
    assert_int_equal(util_settings_set(s, key, value), STRATA_OK);
    agg_params_t params;
    assert_int_equal(agg_params_read(s, &params), STRATA_OK);
    strata_status_t st = agg_init(&params);
    util_settings_free(s);
    return st;
}

static void assert_error_mentions(const char *a, const char *b)
{
    if (!strstr(test_log.last_error, a) || !strstr(test_log.last_error, b))
        fail_msg("error '%s' lacks '%s' or '%s'", test_log.last_error, a, b);
}

/* Run in a child so that the lazy, once-only configuration starts afresh. */
static void in_child(void (*fn)(void))
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        fn();
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void child_lazy_scalar(void)
{
    setenv("STRATA_SIMD", "scalar", 1);
    setenv("STRATA_REDUCE_THREADS", "3", 1);
    if (strcmp(strata_simd_name(), "scalar") != 0 || agg_reduce_threads() != 3)
        _exit(1);
}

static void child_lazy_bad_config(void)
{
    float x = 1, y;
    const void *srcs[1] = {&x};
    setenv("STRATA_SIMD", "sse9", 1);
    if (strata_reduce(STRATA_FP32, &y, srcs, 1, 1, 1.0) != STRATA_ERR_CONFIG ||
        strata_simd_name() != NULL || test_log.errors < 2 ||
        !strstr(test_log.last_error, "configuration is invalid"))
        _exit(1);
}

/* A plain kernel call reads the kernels' settings and judges nothing else:
 * an unknown STRATA_* variable, or a bad value of another module's setting,
 * is not its business (strata_init reports them). */
static void child_lazy_ignores_other_settings(void)
{
    float x = 1, y;
    const void *srcs[1] = {&x};
    setenv("STRATA_BOGUS", "1", 1);
    setenv("STRATA_TIMEOUT_MS", "abc", 1);
    setenv("STRATA_SIMD", "scalar", 1);
    if (strata_reduce(STRATA_FP32, &y, srcs, 1, 1, 1.0) != STRATA_OK ||
        y != 1 || strcmp(strata_simd_name(), "scalar") != 0 ||
        test_log.errors != 0)
        _exit(1);
}

static void lazy_configuration(void **state)
{
    (void)state;
    in_child(child_lazy_scalar);
    in_child(child_lazy_bad_config);
    in_child(child_lazy_ignores_other_settings);
}

static void simd_setting_selects(void **state)
{
    (void)state;
    const char *isas[] = {"scalar", "avx2", "avx512"};
    for (int i = 0; i < 3; i++) {
        if (!strata_simd_supported(isas[i]))
            continue;
        assert_int_equal(init_with("SIMD", isas[i]), STRATA_OK);
        assert_string_equal(strata_simd_name(), isas[i]);
        assert_int_equal(agg_ops()->isa, i);
    }
    assert_int_equal(init_with("SIMD", "auto"), STRATA_OK);
    const agg_ops_t *best = agg_ops();
    for (size_t t = 0; t < agg_impl_count(); t++)
        if (agg_impl_supported(agg_impl(t)))
            assert_true(agg_impl(t)->isa <= best->isa);
    assert_int_equal(test_log.errors, 0);
}

static void unsupported_simd_is_a_config_error(void **state)
{
    (void)state;
    assert_int_equal(init_with("SIMD", "scalar"), STRATA_OK);
    agg_cpu_mask(AGG_CPU_AVX512 | AGG_CPU_AVX512_BF16 | AGG_CPU_AVX512_FP16);
    assert_int_equal(strata_simd_supported("avx512"), 0);
    assert_int_equal(init_with("SIMD", "avx512"), STRATA_ERR_CONFIG);
    assert_error_mentions("STRATA_SIMD=avx512", "no avx512");
    assert_string_equal(strata_simd_name(), "scalar"); /* unchanged */
    agg_cpu_mask(~0u);
    assert_int_equal(init_with("SIMD", "avx2"), STRATA_ERR_CONFIG);
    assert_error_mentions("STRATA_SIMD=avx2", "no avx2");
    assert_int_equal(init_with("SIMD", "auto"), STRATA_OK);
    assert_string_equal(strata_simd_name(), "scalar");
    assert_int_equal(test_log.errors, 2);
}

static void simd_select_api(void **state)
{
    (void)state;
    assert_int_equal(strata_simd_select("neon"), STRATA_ERR_INVALID);
    assert_error_mentions("strata_simd_select(\"neon\")", "unknown");
    assert_int_equal(strata_simd_select(NULL), STRATA_ERR_INVALID);
    agg_cpu_mask(AGG_CPU_AVX2 | AGG_CPU_AVX512);
    assert_int_equal(strata_simd_select("avx2"), STRATA_ERR_UNSUPPORTED);
    assert_error_mentions("strata_simd_select(\"avx2\")", "cannot run");
    assert_int_equal(strata_simd_select("auto"), STRATA_OK);
    assert_string_equal(strata_simd_name(), "scalar");
    agg_cpu_mask(0);
    assert_int_equal(strata_simd_select("auto"), STRATA_OK);
    assert_int_equal(strata_simd_supported("scalar"), 1);
    assert_int_equal(strata_simd_supported("bogus"), 0);
    assert_int_equal(strata_simd_supported(NULL), 0);
}

static void reduce_threads_setting(void **state)
{
    (void)state;
    assert_int_equal(init_with("REDUCE_THREADS", "3"), STRATA_OK);
    assert_int_equal(agg_reduce_threads(), 3);
    strata_reduce_pool_t *pool;
    assert_int_equal(strata_reduce_pool_create(0, &pool), STRATA_OK);
    assert_int_equal(strata_reduce_pool_threads(pool), 3);
    strata_reduce_pool_destroy(pool);
    assert_int_equal(init_with("REDUCE_THREADS", "0"), STRATA_OK);
    assert_true(agg_reduce_threads() >= 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(lazy_configuration, setup, teardown),
        cmocka_unit_test_setup_teardown(simd_setting_selects, setup, teardown),
        cmocka_unit_test_setup_teardown(unsupported_simd_is_a_config_error,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(simd_select_api, setup, teardown),
        cmocka_unit_test_setup_teardown(reduce_threads_setting, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
