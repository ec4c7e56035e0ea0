/* The settings mechanism on a module's own table: which STRATA_* names a load
 * judges (all, or only its own), and finding a module's rows among others'.
 * The full table's behaviour is tests/unit/engine/test_config.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/support/test_log.h"
#include "util/settings.h"

extern char **environ;

static bool even_ok(const char *v)
{
    return strlen(v) % 2 == 0;
}

static const util_setting_syntax_t even = {even_ok, "an even number of chars"};

enum { T_NUM, T_MODE, T_WORD, T__COUNT };

#define T_ROWS                                                                 \
    UTIL_SETTING(T_NUM, INT, "1", 0, 100, 0, NULL, NULL, "a number")           \
    UTIL_SETTING(T_MODE, ENUM, "a", 0, 0, 0, "a|b", NULL, "a mode")            \
    UTIL_SETTING(T_WORD, STRING, "", 0, 0, 0, NULL, &even, "a word")

static const util_setting_t rows[T__COUNT] = {
#define UTIL_SETTING(...) UTIL_SETTING_ROW(__VA_ARGS__),
    T_ROWS
#undef UTIL_SETTING
};

/* Another module's table around ours. */
static const util_setting_t all_rows[] = {
    UTIL_SETTING_ROW(OTHER, INT, "0", 0, 9, 0, NULL, NULL, "another's"),
#define UTIL_SETTING(...) UTIL_SETTING_ROW(__VA_ARGS__),
    T_ROWS
#undef UTIL_SETTING
};

static char conf_path[64];

static void clear_strata_env(void)
{
    for (char **e = environ; *e;) {
        if (strncmp(*e, "STRATA_", 7) != 0) {
            e++;
            continue;
        }
        char name[256];
        snprintf(name, sizeof(name), "%.*s", (int)strcspn(*e, "="), *e);
        unsetenv(name);
        e = environ;
    }
}

static int setup(void **state)
{
    clear_strata_env();
    return test_log_setup(state);
}

static int teardown(void **state)
{
    clear_strata_env();
    if (conf_path[0])
        unlink(conf_path);
    conf_path[0] = '\0';
    return test_log_teardown(state);
}

static void write_conf(const char *text)
{
    snprintf(conf_path, sizeof(conf_path), "/tmp/strata-test-settings-XXXXXX");
    int fd = mkstemp(conf_path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    setenv("STRATA_CONFIG", conf_path, 1);
}

static void own_scope_leaves_other_names_alone(void **state)
{
    (void)state;
    setenv("STRATA_BOGUS", "1", 1);
    setenv("STRATA_OTHER", "not a number", 1);
    setenv("STRATA_T_NUM", "5", 1);
    util_settings_t *s = NULL;
    assert_int_equal(util_settings_load(rows, T__COUNT, UTIL_SETTINGS_OWN, &s),
                     STRATA_OK);
    assert_int_equal(util_settings_int(s, T_NUM), 5);
    assert_int_equal(util_settings_source(s, T_NUM), UTIL_SETTING_SRC_ENV);
    assert_int_equal(util_settings_source(s, T_MODE), UTIL_SETTING_SRC_DEFAULT);
    assert_int_equal(test_log.errors, 0);
    util_settings_free(s);
}

static void own_scope_judges_its_rows(void **state)
{
    (void)state;
    setenv("STRATA_BOGUS", "1", 1);
    setenv("STRATA_T_WORD", "odd", 1);
    util_settings_t *s = NULL;
    assert_int_equal(util_settings_load(rows, T__COUNT, UTIL_SETTINGS_OWN, &s),
                     STRATA_ERR_CONFIG);
    assert_null(s);
    test_log_expect("STRATA_T_WORD=odd (environment): expected an even");
}

static void all_scope_refuses_other_names(void **state)
{
    (void)state;
    setenv("STRATA_T_NUMM", "1", 1);
    util_settings_t *s = NULL;
    assert_int_equal(util_settings_load(rows, T__COUNT, UTIL_SETTINGS_ALL, &s),
                     STRATA_ERR_CONFIG);
    assert_null(s);
    test_log_expect("unknown setting (did you mean STRATA_T_NUM?)");
}

static void file_in_both_scopes(void **state)
{
    (void)state;
    write_conf("t_mode = B\nbogus = 1\nno equals sign\nSTRATA_CONFIG=x\n");
    util_settings_t *s = NULL;
    assert_int_equal(util_settings_load(rows, T__COUNT, UTIL_SETTINGS_OWN, &s),
                     STRATA_OK);
    assert_int_equal(util_settings_int(s, T_MODE), 1);
    assert_int_equal(util_settings_source(s, T_MODE), UTIL_SETTING_SRC_FILE);
    assert_int_equal(test_log.errors, 0);
    util_settings_free(s);

    s = NULL;
    assert_int_equal(util_settings_load(rows, T__COUNT, UTIL_SETTINGS_ALL, &s),
                     STRATA_ERR_CONFIG);
    assert_null(s);
    test_log_expect_n(3, "key 'STRATA_CONFIG' is not allowed in a file");
}

/* A directory opens and reads as an empty file: every setting fell back to
 * its default without a word. */
static void config_not_a_file_is_an_error(void **state)
{
    (void)state;
    setenv("STRATA_CONFIG", "/tmp", 1);
    util_settings_t *s = NULL;
    assert_int_equal(util_settings_load(rows, T__COUNT, UTIL_SETTINGS_OWN, &s),
                     STRATA_ERR_CONFIG);
    assert_null(s);
    test_log_expect("STRATA_CONFIG=/tmp: is a directory, not a regular file");
}

static void a_module_finds_its_rows_among_others(void **state)
{
    (void)state;
    util_settings_t *all = NULL, *own = NULL;
    size_t n = sizeof(all_rows) / sizeof(all_rows[0]);
    assert_int_equal(util_settings_defaults(all_rows, (int)n, &all), STRATA_OK);
    assert_int_equal(util_settings_defaults(rows, T__COUNT, &own), STRATA_OK);
    assert_int_equal(util_settings_block(all, rows, T__COUNT), 1);
    assert_int_equal(util_settings_block(own, rows, T__COUNT), 0);
    assert_int_equal(util_settings_block(own, all_rows, (int)n), -1);
    assert_int_equal(util_settings_block(all, &rows[1], 1), 2);

    assert_int_equal(util_settings_set(all, "t_num", "42"), STRATA_OK);
    int k = util_settings_block(all, rows, T__COUNT);
    assert_int_equal(util_settings_int(all, k + T_NUM), 42);
    assert_int_equal(util_settings_key(all, "STRATA_T_NUM"), k + T_NUM);
    assert_int_equal(util_settings_key(all, "t_num"), k + T_NUM);
    assert_int_equal(util_settings_key(all, "nope"), -1);
    assert_int_equal(test_log.errors, 0);
    util_settings_free(all);
    util_settings_free(own);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(own_scope_leaves_other_names_alone,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(own_scope_judges_its_rows, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(all_scope_refuses_other_names, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(file_in_both_scopes, setup, teardown),
        cmocka_unit_test_setup_teardown(config_not_a_file_is_an_error, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_module_finds_its_rows_among_others,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
