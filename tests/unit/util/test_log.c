/* Logging: levels, line format, rank, one line per message. */
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/log.h"

typedef struct captured {
    int count;
    util_log_level_t level;
    char line[4096];
} captured_t;

static void capture(void *arg, util_log_level_t level, const char *line)
{
    captured_t *c = arg;
    c->count++;
    c->level = level;
    strncpy(c->line, line, sizeof(c->line) - 1);
}

static int setup(void **state)
{
    static captured_t c;
    memset(&c, 0, sizeof(c));
    util_log_set_sink(capture, &c);
    util_log_set_rank(-1);
    *state = &c;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    util_log_set_sink(NULL, NULL);
    return 0;
}

static void assert_matches(const char *text, const char *pattern)
{
    regex_t re;
    assert_int_equal(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB), 0);
    int rc = regexec(&re, text, 0, NULL, 0);
    regfree(&re);
    if (rc != 0)
        fail_msg("'%s' does not match /%s/", text, pattern);
}

static void levels_filter(void **state)
{
    captured_t *c = *state;
    util_log_set_level(UTIL_LOG_WARN);
    util_info("hidden");
    util_debug("hidden");
    assert_int_equal(c->count, 0);
    util_warn("shown");
    util_error("shown");
    assert_int_equal(c->count, 2);
    util_log_set_level(UTIL_LOG_TRACE);
    util_trace("shown");
    assert_int_equal(c->count, 3);
    assert_int_equal(c->level, UTIL_LOG_TRACE);
}

static void line_format(void **state)
{
    captured_t *c = *state;
    util_log_set_level(UTIL_LOG_INFO);
    util_info("hello %d", 42);
    assert_matches(c->line, "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:"
                            "[0-9]{2}\\.[0-9]{6}Z strata\\[[0-9]+\\] INFO  "
                            "tests/unit/util/test_log\\.c:[0-9]+: hello 42$");
}

static void rank_once_known(void **state)
{
    captured_t *c = *state;
    util_log_set_level(UTIL_LOG_INFO);
    util_log_set_rank(7);
    util_error("boom");
    assert_matches(c->line, " strata\\[[0-9]+\\] rank 7 ERROR ");
}

static void one_line_per_message(void **state)
{
    captured_t *c = *state;
    util_log_set_level(UTIL_LOG_INFO);
    util_error("two\nlines");
    assert_null(strchr(c->line, '\n'));
    char big[8192];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    util_error("%s", big);
    assert_int_equal(c->count, 2);
    assert_null(strchr(c->line, '\n'));
    assert_true(strlen(c->line) > 1000);
}

static void level_from_environment(void **state)
{
    captured_t *c = *state;
    setenv("STRATA_LOG", "debug", 1);
    atomic_store(&util_log_threshold, -1); /* as before the first message */
    util_trace("hidden");
    util_debug("shown");
    assert_int_equal(c->count, 1);
    setenv("STRATA_LOG", "nonsense", 1); /* falls back to warn */
    atomic_store(&util_log_threshold, -1);
    util_info("hidden");
    util_warn("shown");
    assert_int_equal(c->count, 2);
    unsetenv("STRATA_LOG");
}

static void parse_levels(void **state)
{
    (void)state;
    assert_int_equal(util_log_parse_level("error"), UTIL_LOG_ERROR);
    assert_int_equal(util_log_parse_level("WARN"), UTIL_LOG_WARN);
    assert_int_equal(util_log_parse_level("trace"), UTIL_LOG_TRACE);
    assert_int_equal(util_log_parse_level("loud"), -1);
    assert_int_equal(util_log_parse_level(NULL), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(levels_filter, setup, teardown),
        cmocka_unit_test_setup_teardown(line_format, setup, teardown),
        cmocka_unit_test_setup_teardown(rank_once_known, setup, teardown),
        cmocka_unit_test_setup_teardown(one_line_per_message, setup, teardown),
        cmocka_unit_test_setup_teardown(level_from_environment, setup,
                                        teardown),
        cmocka_unit_test(parse_levels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
