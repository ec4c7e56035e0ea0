/*
 * For cmocka tests: capture what the library logs, to check that an error
 * was logged once, by the function that detected it, naming what was wrong.
 * Include after <cmocka.h>; use test_log_setup / test_log_teardown as the
 * setup and teardown of the tests that check messages.
 */
#ifndef STRATA_TESTS_SUPPORT_TEST_LOG_H
#define STRATA_TESTS_SUPPORT_TEST_LOG_H

#include <string.h>

#include "util/log.h"

typedef struct test_log {
    int errors;      /* error lines since the last check */
    char last[1024]; /* the last line of any level */
} test_log_t;

static test_log_t test_log;

static void test_log_capture(void *arg, util_log_level_t level,
                             const char *line)
{
    (void)arg;
    test_log.errors += level == UTIL_LOG_ERROR;
    strncpy(test_log.last, line, sizeof(test_log.last) - 1);
}

static inline int test_log_setup(void **state)
{
    (void)state;
    memset(&test_log, 0, sizeof(test_log));
    util_log_set_sink(test_log_capture, NULL);
    return 0;
}

static inline int test_log_teardown(void **state)
{
    (void)state;
    util_log_set_sink(NULL, NULL);
    return 0;
}

/* Exactly n error lines were logged since the last check, the last one
 * containing text; then forgets them. */
static inline void test_log_expect_n(int n, const char *text)
{
    if (test_log.errors != n)
        fail_msg("%d errors logged, expected %d (last: %s)", test_log.errors, n,
                 test_log.last);
    if (!strstr(test_log.last, text))
        fail_msg("expected \"%s\" in: %s", text, test_log.last);
    test_log.errors = 0;
}

static inline void test_log_expect(const char *text)
{
    test_log_expect_n(1, text);
}

#endif /* STRATA_TESTS_SUPPORT_TEST_LOG_H */
