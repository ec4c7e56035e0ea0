/* Provider selection and the argument checks common to every provider. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "tests/support/test_log.h"
#include "tests/support/test_tp_params.h"
#include "transport/transport.h"
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
    test_log_stop();
    return 0;
}

/* The parameters with key set to value; their strings live in *s_out. */
static tp_params_t params_with(const char *key, const char *value,
                               util_settings_t **s_out)
{
    const char *kv[] = {key, value, NULL};
    tp_params_t params;
    assert_int_equal(test_tp_params(kv, 30000, s_out, &params), STRATA_OK);
    return params;
}

static void unknown_provider_is_named(void **state)
{
    (void)state;
    util_settings_t *s;
    tp_params_t params = params_with(NULL, NULL, &s);
    tp_ctx_t *ctx = NULL;
    test_log.last_error[0] = 0;
    assert_int_equal(tp_open("carrier-pigeon", &params, &ctx),
                     STRATA_ERR_INVALID);
    assert_null(ctx);
    assert_non_null(strstr(test_log.last_error, "carrier-pigeon"));
    assert_int_equal(tp_open(NULL, &params, &ctx), STRATA_ERR_INVALID);
    assert_int_equal(tp_open("tcp", NULL, &ctx), STRATA_ERR_INVALID);
    assert_false(tp_available("carrier-pigeon"));
    assert_false(tp_available(NULL));
    util_settings_free(s);
}

/* This machine has no RDMA device: verbs is either not compiled in or has
 * no device, and says which. */
static void verbs_without_device_is_a_clear_error(void **state)
{
    (void)state;
    if (tp_available("verbs"))
        skip();
    util_settings_t *s;
    tp_params_t params = params_with(NULL, NULL, &s);
    tp_ctx_t *ctx = NULL;
    test_log.last_error[0] = 0;
    strata_status_t st = tp_open("verbs", &params, &ctx);
    assert_true(st == STRATA_ERR_UNSUPPORTED || st == STRATA_ERR_NO_DEVICE);
    assert_null(ctx);
    assert_true(strstr(test_log.last_error, "not compiled in") ||
                strstr(test_log.last_error, "device"));
    util_settings_free(s);
}

static void select_follows_the_setting(void **state)
{
    (void)state;
    static const char *const names[] = {"tcp", "shm", "verbs"};
    for (int i = 0; i < 3; i++) {
        util_settings_t *s;
        tp_params_t params = params_with("STRATA_TRANSPORT", names[i], &s);
        assert_string_equal(tp_select(&params, true), names[i]);
        assert_string_equal(tp_select(&params, false), names[i]);
        util_settings_free(s);
    }
}

static void select_auto(void **state)
{
    (void)state;
    util_settings_t *s;
    tp_params_t params = params_with("STRATA_TRANSPORT", "auto", &s);
    const char *remote = tp_available("verbs") ? "verbs" : "tcp";
    assert_string_equal(tp_select(&params, false), remote);
    assert_string_equal(tp_select(NULL, false), remote);
    const char *local = tp_available("shm") ? "shm" : remote;
    assert_string_equal(tp_select(&params, true), local);
    util_settings_free(s);
}

static void null_arguments_are_refused(void **state)
{
    (void)state;
    tp_mr_t *mr = NULL;
    tp_listener_t *l = NULL;
    tp_ep_t *ep = NULL;
    int n = -1;
    char buf[8];
    assert_int_equal(tp_mr_reg(NULL, buf, 8, 0, &mr), STRATA_ERR_INVALID);
    assert_int_equal(tp_listen(NULL, NULL, &l), STRATA_ERR_INVALID);
    assert_int_equal(tp_connect(NULL, "x", NULL, &ep), STRATA_ERR_INVALID);
    assert_int_equal(tp_progress(NULL, NULL, 0, &n), STRATA_ERR_INVALID);
    assert_int_equal(tp_write(NULL, NULL, 0, NULL, 0, 0, 0, 0, NULL),
                     STRATA_ERR_INVALID);
    assert_int_equal(tp_send(NULL, buf, 1, NULL), STRATA_ERR_INVALID);
    tp_close(NULL);
    tp_ep_close(NULL);
    tp_mr_dereg(NULL);
    tp_listener_close(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(unknown_provider_is_named),
        cmocka_unit_test(verbs_without_device_is_a_clear_error),
        cmocka_unit_test(select_follows_the_setting),
        cmocka_unit_test(select_auto),
        cmocka_unit_test(null_arguments_are_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
