/* Provider selection and the argument checks common to every provider. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "transport/transport.h"
#include "util/log.h"

static char last_error[1024];

static void capture(void *arg, util_log_level_t level, const char *line)
{
    (void)arg;
    if (level == UTIL_LOG_ERROR)
        snprintf(last_error, sizeof(last_error), "%s", line);
}

static int setup(void **state)
{
    (void)state;
    util_log_set_sink(capture, NULL);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    util_log_set_sink(NULL, NULL);
    return 0;
}

static eng_config_t *config(const char *key, const char *value)
{
    eng_config_t *cfg = NULL;
    assert_int_equal(eng_config_defaults(&cfg), STRATA_OK);
    if (key)
        assert_int_equal(eng_config_set(cfg, key, value), STRATA_OK);
    return cfg;
}

static void unknown_provider_is_named(void **state)
{
    (void)state;
    eng_config_t *cfg = config(NULL, NULL);
    tp_ctx_t *ctx = NULL;
    last_error[0] = 0;
    assert_int_equal(tp_open("carrier-pigeon", cfg, &ctx), STRATA_ERR_INVALID);
    assert_null(ctx);
    assert_non_null(strstr(last_error, "carrier-pigeon"));
    assert_int_equal(tp_open(NULL, cfg, &ctx), STRATA_ERR_INVALID);
    assert_int_equal(tp_open("tcp", NULL, &ctx), STRATA_ERR_INVALID);
    assert_false(tp_available("carrier-pigeon"));
    assert_false(tp_available(NULL));
    eng_config_free(cfg);
}

/* This machine has no RDMA device: verbs is either not compiled in or has
 * no device, and says which. */
static void verbs_without_device_is_a_clear_error(void **state)
{
    (void)state;
    if (tp_available("verbs"))
        skip();
    eng_config_t *cfg = config(NULL, NULL);
    tp_ctx_t *ctx = NULL;
    last_error[0] = 0;
    strata_status_t st = tp_open("verbs", cfg, &ctx);
    assert_true(st == STRATA_ERR_UNSUPPORTED || st == STRATA_ERR_NO_DEVICE);
    assert_null(ctx);
    assert_true(strstr(last_error, "not compiled in") ||
                strstr(last_error, "device"));
    eng_config_free(cfg);
}

static void select_follows_the_setting(void **state)
{
    (void)state;
    static const char *const names[] = {"tcp", "shm", "verbs"};
    for (int i = 0; i < 3; i++) {
        eng_config_t *cfg = config("STRATA_TRANSPORT", names[i]);
        assert_string_equal(tp_select(cfg, true), names[i]);
        assert_string_equal(tp_select(cfg, false), names[i]);
        eng_config_free(cfg);
    }
}

static void select_auto(void **state)
{
    (void)state;
    eng_config_t *cfg = config("STRATA_TRANSPORT", "auto");
    const char *remote = tp_available("verbs") ? "verbs" : "tcp";
    assert_string_equal(tp_select(cfg, false), remote);
    assert_string_equal(tp_select(NULL, false), remote);
    const char *local = tp_available("shm") ? "shm" : remote;
    assert_string_equal(tp_select(cfg, true), local);
    eng_config_free(cfg);
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
