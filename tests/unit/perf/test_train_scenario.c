/* Named scenarios, speed lists, policy lists and strata-train's options. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "perf/train/cli.h"
#include "perf/train/scenario.h"

static void speeds_parse_lists_and_repeats(void **state)
{
    (void)state;
    double s[PERF_MAX_WORKERS];
    int n;
    assert_int_equal(perf_speeds_parse("1,1,2,2,4,4,8,8", s, &n), STRATA_OK);
    assert_int_equal(n, 8);
    assert_float_equal(s[7], 8.0, 0);
    assert_int_equal(perf_speeds_parse("1x3,2.5,100x2", s, &n), STRATA_OK);
    assert_int_equal(n, 6);
    assert_float_equal(s[2], 1.0, 0);
    assert_float_equal(s[3], 2.5, 0);
    assert_float_equal(s[5], 100.0, 0);
}

static void speeds_refuse_bad_items(void **state)
{
    (void)state;
    double s[PERF_MAX_WORKERS];
    int n = -1;
    const char *bad[] = {"",    "0.5", "1,fast", "2x0", "2x",   "x3",
                         "1;2", "nan", "inf",    "1e9", "4x300"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(perf_speeds_parse(bad[i], s, &n), STRATA_ERR_INVALID);
    assert_int_equal(n, -1); /* untouched on error */
}

static void policies_parse_known_names_once(void **state)
{
    (void)state;
    perf_policy_t p[PERF_MAX_POLICIES];
    int n;
    assert_int_equal(perf_policies_parse("bsp,gssp+gdtopk,esync", p, &n),
                     STRATA_OK);
    assert_int_equal(n, 3);
    assert_string_equal(p[1].engine, "gssp");
    assert_true(p[1].gdtopk);
    assert_false(p[0].gdtopk);
    assert_int_equal(p[0].drive, PERF_DRIVE_GRADIENT);
    assert_int_equal(p[2].drive, PERF_DRIVE_ROUNDS);
    assert_int_equal(perf_policies_parse("local", p, &n), STRATA_OK);
    assert_null(p[0].engine);
    assert_int_equal(perf_policies_parse("bsp,dsgd", p, &n),
                     STRATA_ERR_INVALID);
    assert_int_equal(perf_policies_parse("bsp,bsp", p, &n), STRATA_ERR_INVALID);
    assert_int_equal(perf_policies_parse("", p, &n), STRATA_ERR_INVALID);
}

static void named_scenarios_match_the_papers(void **state)
{
    (void)state;
    perf_scenario_t sc;
    perf_scenario_defaults(&sc);
    assert_int_equal(perf_scenario_named("gssp16", &sc), STRATA_OK);
    assert_int_equal(sc.workers, 16);
    assert_int_equal(sc.aggregators, 4);
    double tiers[4] = {1, 2, 4, 8};
    for (int i = 0; i < 16; i++)
        assert_float_equal(sc.speeds[i], tiers[i / 4], 0);
    assert_int_equal(perf_scenario_named("esync6", &sc), STRATA_OK);
    assert_int_equal(sc.workers, 6);
    double lo = sc.speeds[0], hi = sc.speeds[0];
    for (int i = 1; i < 6; i++) {
        lo = sc.speeds[i] < lo ? sc.speeds[i] : lo;
        hi = sc.speeds[i] > hi ? sc.speeds[i] : hi;
    }
    assert_float_equal(hi / lo, 100.0, 1e-9);
    assert_int_equal(perf_scenario_named("gssp17", &sc), STRATA_ERR_INVALID);
}

static strata_status_t parse(perf_cli_t *cli, int argc, const char **argv)
{
    return perf_cli_parse(argc, (char **)argv, cli);
}

static void options_override_the_scenario_in_any_order(void **state)
{
    (void)state;
    perf_cli_t cli;
    const char *a[] = {"strata-train", "--aggregators", "2", "--scenario",
                       "gssp16",       "--base-ms",     "4", "--noniid"};
    assert_int_equal(parse(&cli, 8, a), STRATA_OK);
    assert_string_equal(cli.sc.name, "gssp16");
    assert_int_equal(cli.sc.workers, 16);
    assert_int_equal(cli.sc.aggregators, 2);
    assert_float_equal(cli.sc.base_step_s, 0.004, 1e-12);
    assert_true(cli.sc.noniid);
    assert_int_equal(cli.sc.npolicies, 2); /* the scenario's bsp,gssp */

    const char *b[] = {"strata-train", "--speeds", "1,4",     "--compare",
                       "bsp,asp",      "--json",   "out.json"};
    assert_int_equal(parse(&cli, 7, b), STRATA_OK);
    assert_string_equal(cli.sc.name, "custom");
    assert_int_equal(cli.sc.workers, 2);
    assert_int_equal(cli.sc.npolicies, 2);
    assert_string_equal(cli.sc.policies[1].name, "asp");
    assert_string_equal(cli.json, "out.json");
}

static void bad_options_are_refused(void **state)
{
    (void)state;
    perf_cli_t cli;
    const char *bad[][3] = {
        {"strata-train", "--budget", "-1"},
        {"strata-train", "--target-acc", "1.5"},
        {"strata-train", "--batch", "12x"},
        {"strata-train", "--scenario", "nope"},
        {"strata-train", "--aggregators", "0"},
        {"strata-train", "--jitter", "2"},
        {"strata-train", "--frobnicate", "1"},
        {"strata-train", "--policy", "bsp"}, /* then a stray argument */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *argv[4] = {bad[i][0], bad[i][1], bad[i][2], "stray"};
        int argc = i == sizeof(bad) / sizeof(bad[0]) - 1 ? 4 : 3;
        assert_int_not_equal(parse(&cli, argc, argv), STRATA_OK);
    }
}

static void reporter_is_the_first_fastest(void **state)
{
    (void)state;
    perf_scenario_t sc;
    perf_scenario_defaults(&sc);
    assert_int_equal(perf_speeds_parse("4,2,1,1,8", sc.speeds, &sc.workers),
                     STRATA_OK);
    assert_int_equal(perf_scenario_reporter(&sc), 2);
}

static void speed_changes_parse_and_are_checked(void **state)
{
    (void)state;
    perf_scenario_t sc;
    perf_scenario_defaults(&sc);
    assert_int_equal(perf_speed_changes_parse("0:2:8,3:1.5:0.5", &sc),
                     STRATA_OK);
    assert_int_equal(perf_speed_changes_parse("1:0:2", &sc), STRATA_OK);
    assert_int_equal(sc.nchanges, 3);
    assert_int_equal(sc.changes[1].worker, 3);
    assert_float_equal(sc.changes[1].at_s, 1.5, 0);
    assert_float_equal(sc.changes[1].factor, 0.5, 0);
    assert_int_equal(perf_scenario_check(&sc), STRATA_OK); /* 4 workers */
    sc.changes[2].worker = 4;
    assert_int_equal(perf_scenario_check(&sc), STRATA_ERR_INVALID);

    const char *bad[] = {"",      "0:2",   "0:2:",   "-1:2:8", "0:-1:8",
                         "0:2:0", "a:2:8", "0:2:8x", "0::8",   "0:nan:8"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        perf_scenario_defaults(&sc);
        assert_int_equal(perf_speed_changes_parse(bad[i], &sc),
                         STRATA_ERR_INVALID);
        assert_int_equal(sc.nchanges, 0);
    }
    perf_scenario_defaults(&sc);
    for (int i = 0; i < PERF_MAX_CHANGES; i++)
        assert_int_equal(perf_speed_changes_parse("0:1:2", &sc), STRATA_OK);
    assert_int_equal(perf_speed_changes_parse("0:1:2", &sc),
                     STRATA_ERR_INVALID);

    assert_int_equal(perf_scenario_named("slowdown12", &sc), STRATA_OK);
    assert_int_equal(sc.workers, 12);
    assert_int_equal(sc.nchanges, 1);
    assert_true(sc.speeds[sc.changes[0].worker] == 1);
    /* The reporter is a fast worker whose speed stays. */
    assert_int_equal(perf_scenario_reporter(&sc), 1);
}

static void random_speeds_are_seeded_and_span_3_to_10(void **state)
{
    (void)state;
    double a[PERF_MAX_WORKERS], b[PERF_MAX_WORKERS];
    int na, nb;
    for (unsigned seed = 1; seed <= 20; seed++) {
        char spec[32];
        snprintf(spec, sizeof(spec), "12:%u", seed);
        assert_int_equal(perf_speeds_random(spec, a, &na), STRATA_OK);
        assert_int_equal(perf_speeds_random(spec, b, &nb), STRATA_OK);
        assert_int_equal(na, 12);
        assert_memory_equal(a, b, sizeof(double) * 12);
        double lo = a[0], hi = a[0];
        for (int i = 1; i < 12; i++) {
            lo = a[i] < lo ? a[i] : lo;
            hi = a[i] > hi ? a[i] : hi;
        }
        assert_float_equal(lo, 1, 0);
        assert_true(hi >= 3 && hi <= 10);
    }
    const char *bad[] = {"", "12", "1:3", "300:1", "12:", "12:-1", "x:1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(perf_speeds_random(bad[i], a, &na),
                         STRATA_ERR_INVALID);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(speeds_parse_lists_and_repeats),
        cmocka_unit_test(speeds_refuse_bad_items),
        cmocka_unit_test(policies_parse_known_names_once),
        cmocka_unit_test(named_scenarios_match_the_papers),
        cmocka_unit_test(options_override_the_scenario_in_any_order),
        cmocka_unit_test(bad_options_are_refused),
        cmocka_unit_test(reporter_is_the_first_fastest),
        cmocka_unit_test(speed_changes_parse_and_are_checked),
        cmocka_unit_test(random_speeds_are_seeded_and_span_3_to_10),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
