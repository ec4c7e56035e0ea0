/* util_parse_size(): the one K/M/G parser of settings and tools. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "util/parse.h"

static void units_are_powers_of_1024_in_any_case(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        uint64_t bytes;
    } ok[] = {
        {"0", 0},
        {"4096", 4096},
        {"12B", 12},
        {"64K", 64u << 10},
        {"64k", 64u << 10},
        {"64KiB", 64u << 10},
        {"64kb", 64u << 10},
        {"4M", 4u << 20},
        {"4MiB", 4u << 20},
        {"2G", 2ull << 30},
        {"3gib", 3ull << 30},
        {"1T", 1ull << 40},
        {"8388607T", 8388607ull << 40},
        {"9223372036854775807", INT64_MAX},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        uint64_t v = 1;
        if (!util_parse_size(ok[i].text, &v))
            fail_msg("'%s' refused", ok[i].text);
        if (v != ok[i].bytes)
            fail_msg("'%s' read as %llu", ok[i].text, (unsigned long long)v);
    }
}

static void anything_else_is_refused(void **state)
{
    (void)state;
    static const char *const bad[] = {"",
                                      "K",
                                      "-1",
                                      "+1",
                                      " 1",
                                      "1 ",
                                      "1.5M",
                                      "0x10",
                                      "4Q",
                                      "4KiBs",
                                      "4iB",
                                      "8388608T",
                                      "9223372036854775808",
                                      "99999999999999999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t v = 7;
        if (util_parse_size(bad[i], &v))
            fail_msg("'%s' accepted as %llu", bad[i], (unsigned long long)v);
        assert_int_equal(v, 7); /* untouched */
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(units_are_powers_of_1024_in_any_case),
        cmocka_unit_test(anything_else_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
