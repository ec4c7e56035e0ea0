/* strata_init with a configuration that does not load: STRATA_ERR_CONFIG,
 * the error logged, and nothing freed that was never allocated. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <strata/strata.h>

#include "tests/support/test_log.h"

/* Leaves the stack below the caller full of non-zero bytes, so that a
 * pointer read before it is written is not NULL by luck. */
static __attribute__((noinline)) void dirty_stack(void)
{
    volatile unsigned char junk[16384];
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = 0xa5;
}

static void bad_environment_is_a_config_error(void **state)
{
    (void)state;
    setenv("STRATA_BOGUS", "1", 1);
    strata_ctx_t *ctx = NULL;
    dirty_stack();
    assert_int_equal(strata_init(&ctx), STRATA_ERR_CONFIG);
    assert_null(ctx);
    test_log_expect("STRATA_BOGUS=1");
    unsetenv("STRATA_BOGUS");
}

static void bad_setting_is_a_config_error(void **state)
{
    (void)state;
    const char *settings[] = {"STRATA_TIMEOUT_MS=abc", NULL};
    strata_ctx_t *ctx = NULL;
    dirty_stack();
    assert_int_equal(strata_init_with(settings, &ctx), STRATA_ERR_CONFIG);
    assert_null(ctx);
    test_log_expect("STRATA_TIMEOUT_MS=abc");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(bad_environment_is_a_config_error,
                                        test_log_setup, test_log_teardown),
        cmocka_unit_test_setup_teardown(bad_setting_is_a_config_error,
                                        test_log_setup, test_log_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
