/* The API for bindings that needs no job: the log handler and level, and
 * the text of the last error (per thread without a context). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <strata/strata.h>

#include "util/log.h"

typedef struct lines {
    int n, errors;
    char last[1024];
} lines_t;

static void capture(void *arg, strata_log_level_t level, const char *line)
{
    lines_t *l = arg;
    l->n++;
    l->errors += level == STRATA_LOG_ERROR;
    snprintf(l->last, sizeof(l->last), "%s", line);
}

static strata_status_t init_bogus(void)
{
    const char *bad[] = {"STRATA_NO_SUCH_KNOB=1", NULL};
    strata_ctx_t *ctx = NULL;
    return strata_init_with(bad, &ctx);
}

static void handler_gets_lines_and_last_error_names_the_failure(void **state)
{
    (void)state;
    lines_t l = {0};
    strata_log_set_handler(capture, &l);
    assert_int_equal(init_bogus(), STRATA_ERR_CONFIG);
    strata_log_set_handler(NULL, NULL);
    assert_true(l.errors >= 1);
    assert_non_null(strstr(l.last, "STRATA_NO_SUCH_KNOB"));
    assert_non_null(strstr(l.last, "ERROR")); /* the whole line */

    char buf[256];
    size_t n = strata_last_error(NULL, buf, sizeof(buf));
    assert_true(n > 0 && n == strlen(buf));
    assert_non_null(strstr(buf, "STRATA_NO_SUCH_KNOB=1"));
    assert_null(strstr(buf, "ERROR")); /* the message, not the line */

    char small[8];
    assert_int_equal(strata_last_error(NULL, small, sizeof(small)), n);
    assert_int_equal(strlen(small), 7);
    assert_int_equal(strata_last_error(NULL, NULL, 0), n);
}

static void level_drops_lines_below_it(void **state)
{
    (void)state;
    lines_t l = {0};
    strata_log_set_handler(capture, &l);
    strata_log_set_level(STRATA_LOG_ERROR);
    util_warn("a warning nobody should see");
    assert_int_equal(l.n, 0);
    strata_log_set_level(STRATA_LOG_WARN);
    util_warn("a warning");
    assert_int_equal(l.n, 1);
    strata_log_set_handler(NULL, NULL);
}

static void *fail_elsewhere(void *arg)
{
    (void)arg;
    util_error("the other thread's failure");
    return NULL;
}

static void last_error_is_the_calling_threads(void **state)
{
    (void)state;
    lines_t l = {0};
    strata_log_set_handler(capture, &l); /* keep stderr quiet */
    util_error("this thread's failure");
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, fail_elsewhere, NULL), 0);
    pthread_join(t, NULL);
    strata_log_set_handler(NULL, NULL);
    char buf[128];
    strata_last_error(NULL, buf, sizeof(buf));
    assert_string_equal(buf, "this thread's failure");
}

static void setting_needs_a_context(void **state)
{
    (void)state;
    lines_t l = {0};
    strata_log_set_handler(capture, &l);
    char buf[16];
    assert_int_equal(strata_setting(NULL, "policy", buf, sizeof(buf), NULL),
                     STRATA_ERR_INVALID);
    strata_log_set_handler(NULL, NULL);
    assert_int_equal(l.errors, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(handler_gets_lines_and_last_error_names_the_failure),
        cmocka_unit_test(level_drops_lines_below_it),
        cmocka_unit_test(last_error_is_the_calling_threads),
        cmocka_unit_test(setting_needs_a_context),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
