/* Configuration: sources, priorities, types, ranges and error messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/config.h"
#include "tests/support/test_log.h"
#include "util/log.h"

extern char **environ;

static char conf_path[64];

/* Each test starts with no STRATA_* variable, whatever ran before. */
static void clear_strata_env(void)
{
    for (;;) {
        char **e = environ;
        while (*e && strncmp(*e, "STRATA_", 7) != 0)
            e++;
        if (!*e)
            return;
        char name[256];
        size_t n = strcspn(*e, "=");
        snprintf(name, sizeof(name), "%.*s", (int)n, *e);
        unsetenv(name);
    }
}

static int setup(void **state)
{
    (void)state;
    clear_strata_env();
    test_log_start();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    test_log_stop();
    clear_strata_env();
    if (conf_path[0])
        unlink(conf_path);
    conf_path[0] = '\0';
    return 0;
}

static void write_conf(const char *text)
{
    snprintf(conf_path, sizeof(conf_path), "/tmp/strata-test-conf-XXXXXX");
    int fd = mkstemp(conf_path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    setenv("STRATA_CONFIG", conf_path, 1);
}

static void assert_error_mentions(int index, const char *a, const char *b,
                                  const char *c)
{
    const char *line = test_log.error[index];
    for (const char *want[] = {a, b, c}, **w = want; w < want + 3; w++)
        if (*w && !strstr(line, *w))
            fail_msg("error '%s' lacks '%s'", line, *w);
}

static eng_config_t *load_ok(void)
{
    eng_config_t *cfg = NULL;
    assert_int_equal(eng_config_load(&cfg), STRATA_OK);
    assert_int_equal(test_log.errors, 0);
    return cfg;
}

static void load_fails(void)
{
    eng_config_t *cfg = NULL;
    assert_int_equal(eng_config_load(&cfg), STRATA_ERR_CONFIG);
    assert_null(cfg);
    assert_true(test_log.errors > 0);
}

static void defaults(void **state)
{
    (void)state;
    eng_config_t *cfg = load_ok();
    /* auto: the engine picks at commit (eng_layout_auto_partition) */
    assert_int_equal(eng_config_int(cfg, ENG_CFG_PARTITION_BYTES), 0);
    assert_string_equal(eng_config_str(cfg, ENG_CFG_PARTITION_BYTES), "auto");
    assert_int_equal(eng_config_int(cfg, ENG_CFG_TIMEOUT_MS), 30000);
    assert_string_equal(eng_config_str(cfg, ENG_CFG_POLICY), "bsp");
    assert_int_equal(eng_config_int(cfg, ENG_CFG_POLICY), 0);
    assert_int_equal(eng_config_int(cfg, ENG_CFG_INTER_STALENESS), INT64_MAX);
    assert_true(eng_config_double(cfg, ENG_CFG_REGROUP_GAIN) == 0.1);
    assert_int_equal(eng_config_source(cfg, ENG_CFG_POLICY),
                     ENG_CFG_SRC_DEFAULT);
    assert_string_equal(eng_config_name(ENG_CFG_POLICY), "STRATA_POLICY");
    eng_config_free(cfg);
}

static void environment_sets_typed_values(void **state)
{
    (void)state;
    setenv("STRATA_POLICY", "GSSP", 1);
    setenv("STRATA_PARTITION_BYTES", "64KiB", 1);
    setenv("STRATA_STALENESS", "inf", 1);
    setenv("STRATA_TCP_CRC", "yes", 1);
    setenv("STRATA_REGROUP_GAIN", "0.9", 1);
    setenv("STRATA_GROUPING", "manual:0,0,1,1", 1);
    setenv("STRATA_IB_GID_INDEX", "mlx5_0:3,mlx5_1:5", 1);
    setenv("STRATA_COORD", "node1:29500", 1);
    eng_config_t *cfg = load_ok();
    assert_int_equal(eng_config_int(cfg, ENG_CFG_POLICY), 3);
    assert_int_equal(eng_config_int(cfg, ENG_CFG_PARTITION_BYTES), 65536);
    assert_int_equal(eng_config_int(cfg, ENG_CFG_STALENESS), INT64_MAX);
    assert_int_equal(eng_config_int(cfg, ENG_CFG_TCP_CRC), 1);
    assert_true(eng_config_double(cfg, ENG_CFG_REGROUP_GAIN) == 0.9);
    assert_string_equal(eng_config_str(cfg, ENG_CFG_GROUPING),
                        "manual:0,0,1,1");
    assert_int_equal(eng_config_source(cfg, ENG_CFG_POLICY), ENG_CFG_SRC_ENV);
    eng_config_free(cfg);
}

static void file_then_environment(void **state)
{
    (void)state;
    write_conf("# comment line\n"
               "\n"
               "  policy = ssp   # short key, trailing comment\n"
               "STRATA_STALENESS=3\n"
               "ib_qps=4\n");
    setenv("STRATA_IB_QPS", "2", 1); /* the environment wins */
    eng_config_t *cfg = load_ok();
    assert_string_equal(eng_config_str(cfg, ENG_CFG_POLICY), "ssp");
    assert_int_equal(eng_config_source(cfg, ENG_CFG_POLICY), ENG_CFG_SRC_FILE);
    assert_int_equal(eng_config_int(cfg, ENG_CFG_STALENESS), 3);
    assert_int_equal(eng_config_int(cfg, ENG_CFG_IB_QPS), 2);
    assert_int_equal(eng_config_source(cfg, ENG_CFG_IB_QPS), ENG_CFG_SRC_ENV);
    eng_config_free(cfg);
}

static void unknown_variable_is_named(void **state)
{
    (void)state;
    setenv("STRATA_BOGUS", "1", 1);
    load_fails();
    assert_int_equal(test_log.errors, 1);
    assert_error_mentions(0, "STRATA_BOGUS=1", "environment",
                          "unknown setting");
}

/* Bindings name their own settings STRATA_EXT_*: never read, never
 * refused. */
static void binding_settings_are_left_alone(void **state)
{
    (void)state;
    setenv("STRATA_EXT_PY_LIBRARY", "/somewhere/libstrata.so.0", 1);
    setenv("STRATA_EXT_ANYTHING", "x", 1);
    eng_config_t *cfg = load_ok();
    eng_config_free(cfg);
    assert_int_equal(test_log.errors, 0);
}

static void typo_gets_a_suggestion(void **state)
{
    (void)state;
    setenv("STRATA_POLCY", "bsp", 1);
    load_fails();
    assert_error_mentions(0, "STRATA_POLCY", "did you mean STRATA_POLICY?",
                          NULL);
}

static void malformed_values_name_key_value_and_expectation(void **state)
{
    (void)state;
    static const struct {
        const char *key, *value, *expected;
    } cases[] = {
        {"STRATA_IB_QPS", "abc", "an integer in [1, 64]"},
        {"STRATA_IB_QPS", "0", "an integer in [1, 64]"},
        {"STRATA_IB_QPS", "65", "an integer in [1, 64]"},
        {"STRATA_IB_QPS", "3x", "an integer in [1, 64]"},
        {"STRATA_POLICY", "fast", "one of bsp|ssp|asp|gssp|esync|fedavg"},
        {"STRATA_TCP_CRC", "maybe", "a boolean"},
        {"STRATA_PARTITION_BYTES", "4Q", "a size in bytes"},
        {"STRATA_PARTITION_BYTES", "2G", "a size in bytes"},
        {"STRATA_PARTITION_BYTES", "-1", "a size in bytes"},
        {"STRATA_PARTITION_BYTES", "0", "(suffix K, M, G), or auto"},
        {"STRATA_PARTITION_BYTES", "1K", "a size in bytes in [4096, "},
        {"STRATA_PARTITION_BYTES", "autom", "a size in bytes"},
        {"STRATA_STALENESS_COST", "-1", "a number in [0, "},
        {"STRATA_STALENESS_COST", "nan", "a number in [0, "},
        {"STRATA_IB_QPS", "inf", "an integer in [1, 64]"},
        {"STRATA_GROUPING", "manual:0,,1", "manual:"},
        {"STRATA_GROUPING", "manual:", "manual:"},
        {"STRATA_IB_GID_INDEX", "mlx5_0", "device:index"},
        {"STRATA_COORD", "host", "host:port"},
        {"STRATA_COORD", "host:70000", "host:port"},
        {"STRATA_LOG", "loud", "one of error|warn|info|debug|trace"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        clear_strata_env();
        test_log_reset();
        setenv(cases[i].key, cases[i].value, 1);
        load_fails();
        char kv[256];
        snprintf(kv, sizeof(kv), "%s=%s", cases[i].key, cases[i].value);
        assert_int_equal(test_log.errors, 1);
        assert_error_mentions(0, kv, "expected", cases[i].expected);
    }
}

static void every_error_is_reported(void **state)
{
    (void)state;
    setenv("STRATA_IB_QPS", "x", 1);
    setenv("STRATA_BOGUS", "y", 1);
    load_fails();
    assert_int_equal(test_log.errors, 2);
}

static void file_errors_name_file_and_line(void **state)
{
    (void)state;
    write_conf("policy=bsp\nnot a setting\nwhatever=1\n");
    load_fails();
    assert_int_equal(test_log.errors, 2);
    char where[128];
    snprintf(where, sizeof(where), "%s:2", conf_path);
    assert_error_mentions(0, where, "expected key=value", NULL);
    snprintf(where, sizeof(where), "%s:3", conf_path);
    assert_error_mentions(1, where, "STRATA_WHATEVER=1", "unknown setting");
}

static void missing_file_is_an_error(void **state)
{
    (void)state;
    setenv("STRATA_CONFIG", "/nonexistent/strata.conf", 1);
    load_fails();
    assert_error_mentions(0, "STRATA_CONFIG=/nonexistent/strata.conf",
                          "cannot open", NULL);
}

static void api_set_checks_and_keeps_old_value(void **state)
{
    (void)state;
    eng_config_t *cfg;
    assert_int_equal(eng_config_defaults(&cfg), STRATA_OK);
    assert_int_equal(eng_config_set(cfg, "ib_qps", "8"), STRATA_OK);
    assert_int_equal(eng_config_int(cfg, ENG_CFG_IB_QPS), 8);
    assert_int_equal(eng_config_source(cfg, ENG_CFG_IB_QPS), ENG_CFG_SRC_API);
    assert_int_equal(eng_config_set(cfg, "STRATA_IB_QPS", "99"),
                     STRATA_ERR_CONFIG);
    assert_int_equal(eng_config_int(cfg, ENG_CFG_IB_QPS), 8);
    assert_int_equal(eng_config_set(cfg, "nope", "1"), STRATA_ERR_CONFIG);
    eng_config_free(cfg);
}

static void dump_shows_sources_and_hides_secrets(void **state)
{
    (void)state;
    setenv("STRATA_POLICY", "asp", 1);
    setenv("STRATA_JOB_SECRET", "hunter2", 1);
    eng_config_t *cfg = load_ok();
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    eng_config_dump(cfg, f);
    fclose(f);
    assert_non_null(strstr(text, "STRATA_POLICY=asp"));
    assert_non_null(strstr(text, "# environment"));
    assert_non_null(strstr(text, "STRATA_LOG=warn"));
    assert_non_null(strstr(text, "# default"));
    assert_null(strstr(text, "hunter2"));
    assert_non_null(strstr(text, "# STRATA_JOB_SECRET=<hidden>"));
    free(text);
    eng_config_free(cfg);
}

static void secret_is_not_echoed_in_errors(void **state)
{
    (void)state;
    char big[5000];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    setenv("STRATA_JOB_SECRET", big, 1); /* too long */
    load_fails();
    assert_null(strstr(test_log.error[0], "aaaa"));
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(defaults),
        T(environment_sets_typed_values),
        T(file_then_environment),
        T(unknown_variable_is_named),
        T(binding_settings_are_left_alone),
        T(typo_gets_a_suggestion),
        T(malformed_values_name_key_value_and_expectation),
        T(every_error_is_reported),
        T(file_errors_name_file_and_line),
        T(missing_file_is_an_error),
        T(api_set_checks_and_keeps_old_value),
        T(dump_shows_sources_and_hides_secrets),
        T(secret_is_not_echoed_in_errors),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
