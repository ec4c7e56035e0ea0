/*
 * For cmocka tests: capture what the library logs, to check that an error
 * was logged once, by the function that detected it, naming what was wrong
 * (and to keep the expected complaints of a test off its output). Include
 * after <cmocka.h>; use test_log_setup / test_log_teardown as the setup and
 * teardown of the tests that check messages, or test_log_start /
 * test_log_stop around the part of a test that does.
 */
#ifndef STRATA_TESTS_SUPPORT_TEST_LOG_H
#define STRATA_TESTS_SUPPORT_TEST_LOG_H

#include <stdio.h>
#include <string.h>

#include "util/log.h"

#define TEST_LOG_KEEP 8 /* error and warning lines kept, the first ones */

typedef struct test_log {
    int errors;                       /* error lines since the reset */
    int warnings;                     /* warning lines */
    char last[1024];                  /* the last line of any level */
    char last_error[1024];            /* the last error line */
    char error[TEST_LOG_KEEP][1024];  /* the first error lines */
    char warning[TEST_LOG_KEEP][512]; /* the first warning lines */
} test_log_t;

static test_log_t test_log;

static void test_log_capture(void *arg, util_log_level_t level,
                             const char *line)
{
    (void)arg;
    if (level == UTIL_LOG_ERROR) {
        if (test_log.errors < TEST_LOG_KEEP)
            snprintf(test_log.error[test_log.errors], sizeof(test_log.error[0]),
                     "%s", line);
        test_log.errors++;
        snprintf(test_log.last_error, sizeof(test_log.last_error), "%s", line);
    } else if (level == UTIL_LOG_WARN) {
        if (test_log.warnings < TEST_LOG_KEEP)
            snprintf(test_log.warning[test_log.warnings],
                     sizeof(test_log.warning[0]), "%s", line);
        test_log.warnings++;
    }
    snprintf(test_log.last, sizeof(test_log.last), "%s", line);
}

/* Forget what was captured so far. */
static inline void test_log_reset(void)
{
    memset(&test_log, 0, sizeof(test_log));
}

/* Capture from now on (and forget what was captured before). */
static inline void test_log_start(void)
{
    test_log_reset();
    util_log_set_sink(test_log_capture, NULL);
}

/* Log to stderr again. */
static inline void test_log_stop(void)
{
    util_log_set_sink(NULL, NULL);
}

static inline int test_log_setup(void **state)
{
    (void)state;
    test_log_start();
    return 0;
}

static inline int test_log_teardown(void **state)
{
    (void)state;
    test_log_stop();
    return 0;
}

/* Exactly n error lines were logged since the last check, the last line
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
