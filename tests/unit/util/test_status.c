/* strata_strerror() and strata_version_string(). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <strata/strata.h>

#define ALL_STATUSES(name, value, text) name,
static const strata_status_t all[] = {STRATA_STATUS_LIST(ALL_STATUSES)};
#undef ALL_STATUSES

static void ok_is_zero(void **state)
{
    (void)state;
    assert_int_equal(STRATA_OK, 0);
    assert_string_equal(strata_strerror(STRATA_OK), "success");
}

static void every_status_has_distinct_text(void **state)
{
    (void)state;
    size_t n = sizeof(all) / sizeof(all[0]);
    for (size_t i = 0; i < n; i++) {
        const char *t = strata_strerror(all[i]);
        assert_non_null(t);
        assert_true(strlen(t) > 0);
        assert_string_not_equal(t, "unknown status");
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(t, strata_strerror(all[j]));
    }
}

static void unknown_status_is_named_so(void **state)
{
    (void)state;
    assert_string_equal(strata_strerror((strata_status_t)12345),
                        "unknown status");
    assert_string_equal(strata_strerror((strata_status_t)-1), "unknown status");
}

static void version_matches_header(void **state)
{
    (void)state;
    char expect[32];
    snprintf(expect, sizeof(expect), "%d.%d.%d", STRATA_VERSION_MAJOR,
             STRATA_VERSION_MINOR, STRATA_VERSION_PATCH);
    assert_string_equal(strata_version_string(), expect);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ok_is_zero),
        cmocka_unit_test(every_status_has_distinct_text),
        cmocka_unit_test(unknown_status_is_named_so),
        cmocka_unit_test(version_matches_header),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
