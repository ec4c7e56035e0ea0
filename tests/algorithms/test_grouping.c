/* GSSP grouping: Jenks against brute force, known speed profiles, the EMA,
 * hysteresis, manual groups and their errors. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/grouping.h"
#include "tests/support/test_log.h"

/* ---- Jenks ---- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Least SDCM over every way to cut x[0..n) into k contiguous classes. */
static double brute_force(const double *x, uint32_t n, uint32_t k,
                          uint32_t from)
{
    if (k == 1)
        return eng_ssd(x + from, n - from);
    double best = INFINITY;
    for (uint32_t end = from + 1; end + (k - 1) <= n; end++) {
        double v =
            eng_ssd(x + from, end - from) + brute_force(x, n, k - 1, end);
        if (v < best)
            best = v;
    }
    return best;
}

static void jenks_matches_brute_force(void **state)
{
    (void)state;
    srand(7);
    double x[10];
    uint32_t start[10];
    for (int trial = 0; trial < 400; trial++) {
        uint32_t n = 1 + (uint32_t)(rand() % 10);
        for (uint32_t i = 0; i < n; i++) /* some ties, some spread */
            x[i] = trial % 3 ? (rand() % 1000) / 100.0 : rand() % 4;
        qsort(x, n, sizeof(double), cmp_double);
        uint32_t k = 1 + (uint32_t)(rand() % n);
        double sdcm;
        assert_int_equal(eng_jenks(x, n, k, start, &sdcm), STRATA_OK);
        double want = brute_force(x, n, k, 0);
        assert_true(fabs(sdcm - want) <= 1e-9 * (1 + want));
        /* The breaks it returns achieve that sum. */
        double got = 0;
        assert_int_equal(start[0], 0);
        for (uint32_t c = 0; c < k; c++) {
            uint32_t end = c + 1 < k ? start[c + 1] : n;
            assert_true(end > start[c]);
            got += eng_ssd(x + start[c], end - start[c]);
        }
        assert_true(fabs(got - want) <= 1e-9 * (1 + want));
    }
}

static void jenks_refuses_bad_input(void **state)
{
    (void)state;
    double x[] = {1, 3, 2};
    uint32_t start[3];
    double sdcm;
    assert_int_equal(eng_jenks(x, 3, 2, start, &sdcm), STRATA_ERR_INVALID);
    test_log_expect("sorted");
    assert_int_equal(eng_jenks(x, 2, 3, start, &sdcm), STRATA_ERR_INVALID);
    test_log_expect("cannot cut 2 values into 3 classes");
    assert_int_equal(eng_jenks(x, 3, 0, start, &sdcm), STRATA_ERR_INVALID);
    test_log_expect("into 0 classes");
}

static void jenks_is_accurate_for_large_close_times(void **state)
{
    (void)state;
    /* Times around 1e6 s differing by microseconds: the prefix sums are
     * centred, so the split is still found. */
    double x[] = {1e6, 1e6 + 1e-6, 1e6 + 2e-6, 1e6 + 1e-3, 1e6 + 1e-3};
    uint32_t start[2];
    double sdcm;
    assert_int_equal(eng_jenks(x, 5, 2, start, &sdcm), STRATA_OK);
    assert_int_equal(start[1], 3);
}

/* ---- grouping ---- */

static eng_grouping_t *make(uint32_t workers, uint32_t groups, double gvf,
                            uint32_t max_groups, const char *spec)
{
    eng_grouping_params_t p = {workers, groups, gvf, max_groups, spec};
    eng_grouping_t *g = NULL;
    assert_int_equal(eng_grouping_create(&p, &g), STRATA_OK);
    return g;
}

/* Worker w reports times[w] once; then an epoch. */
static bool epoch_with(eng_grouping_t *g, const double *times, uint32_t n)
{
    for (uint32_t w = 0; w < n; w++)
        assert_int_equal(eng_grouping_report(g, w, times[w]), STRATA_OK);
    bool changed;
    assert_int_equal(eng_grouping_epoch(g, &changed), STRATA_OK);
    return changed;
}

static void assert_groups(const eng_grouping_t *g, const uint32_t *want,
                          uint32_t n)
{
    for (uint32_t w = 0; w < n; w++)
        if (eng_grouping_group_of(g, w) != want[w])
            fail_msg("worker %u in group %u, expected %u", w,
                     eng_grouping_group_of(g, w), want[w]);
}

/* 1,1,2,2,4,4,8,8 seconds, handed to workers in a scrambled order. */
static const double powers[] = {4, 1, 8, 2, 1, 8, 2, 4};

static void powers_of_two_make_four_groups(void **state)
{
    (void)state;
    eng_grouping_t *g = make(8, 4, 0.8, 8, "auto");
    assert_true(epoch_with(g, powers, 8));
    const uint32_t want[] = {2, 0, 3, 1, 0, 3, 1, 2};
    assert_groups(g, want, 8);
    assert_int_equal(eng_grouping_count(g), 4);
    assert_true(fabs(eng_grouping_gvf(g) - 1) < 1e-12);
    for (uint32_t c = 0; c < 4; c++)
        assert_true(fabs(eng_grouping_rank(g, c) - c / 3.0) < 1e-12);
    assert_int_equal(eng_grouping_generation(g), 1);
    eng_grouping_destroy(g);
}

/* The automatic count is the smallest k reaching the GVF: for these times
 * GVF(1) = 0, GVF(2) = 1 - 9.333/57.5 = 0.838, GVF(3) = 0.983, GVF(4) = 1. */
static void automatic_count_follows_the_gvf(void **state)
{
    (void)state;
    const struct {
        double gvf;
        uint32_t max, k;
    } cases[] = {{0.8, 8, 2}, {0.9, 8, 3}, {0.99, 8, 4}, {0.99, 3, 3},
                 {1.0, 8, 4}, {0.0, 8, 1}, {0.84, 8, 3}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        eng_grouping_t *g = make(8, 0, cases[i].gvf, cases[i].max, NULL);
        epoch_with(g, powers, 8);
        if (eng_grouping_count(g) != cases[i].k)
            fail_msg("GVF %g, cap %u: %u groups, expected %u", cases[i].gvf,
                     cases[i].max, eng_grouping_count(g), cases[i].k);
        assert_true(eng_grouping_gvf(g) >= cases[i].gvf - 1e-12 ||
                    cases[i].k == cases[i].max);
        eng_grouping_destroy(g);
    }
    /* k = 2: {1,1,2,2,4,4} and {8,8}. */
    eng_grouping_t *g = make(8, 0, 0.8, 8, "auto");
    epoch_with(g, powers, 8);
    const uint32_t want[] = {0, 0, 1, 0, 0, 1, 0, 0};
    assert_groups(g, want, 8);
    assert_true(fabs(eng_grouping_gvf(g) - (1 - (28.0 / 3) / 57.5)) < 1e-12);
    eng_grouping_destroy(g);
}

static void equal_times_make_one_group(void **state)
{
    (void)state;
    const double same[] = {3, 3, 3, 3};
    eng_grouping_t *g = make(4, 0, 0.8, 8, "auto");
    assert_false(epoch_with(g, same, 4)); /* everyone already in group 0 */
    assert_int_equal(eng_grouping_count(g), 1);
    assert_true(fabs(eng_grouping_gvf(g) - 1) < 1e-12);
    assert_true(eng_grouping_rank(g, 0) == 0);
    eng_grouping_destroy(g);
}

static void the_ema_weighs_the_new_sample_by_0_7(void **state)
{
    (void)state;
    eng_grouping_t *g = make(1, 0, 0.8, 8, "auto");
    assert_int_equal(eng_grouping_report(g, 0, 1.0), STRATA_OK);
    assert_true(eng_grouping_ema(g, 0) == 1.0);
    assert_int_equal(eng_grouping_report(g, 0, 2.0), STRATA_OK);
    assert_true(fabs(eng_grouping_ema(g, 0) - 1.7) < 1e-12);
    assert_int_equal(eng_grouping_report(g, 0, 2.0), STRATA_OK);
    assert_true(fabs(eng_grouping_ema(g, 0) - 1.91) < 1e-12);
    assert_int_equal(eng_grouping_report(g, 0, 0), STRATA_ERR_INVALID);
    test_log_expect("worker 0 reported an iteration time of 0 s");
    assert_int_equal(eng_grouping_report(g, 0, NAN), STRATA_ERR_INVALID);
    test_log_expect("positive finite");
    assert_int_equal(eng_grouping_report(g, 1, 1.0), STRATA_ERR_INVALID);
    test_log_expect("worker 1 does not exist");
    eng_grouping_destroy(g);
}

static void nothing_happens_until_everyone_reported(void **state)
{
    (void)state;
    eng_grouping_t *g = make(4, 2, 0.8, 8, "auto");
    bool changed = true;
    assert_int_equal(eng_grouping_report(g, 0, 1), STRATA_OK);
    assert_int_equal(eng_grouping_epoch(g, &changed), STRATA_OK);
    assert_false(changed);
    assert_int_equal(eng_grouping_count(g), 1);
    assert_int_equal(eng_grouping_group_of(g, 3), 0);
    eng_grouping_destroy(g);
}

/* Speeds 1,1,4,4: then worker 1 slows to 4 for one epoch (no regroup), back
 * (none), then for two epochs in a row (regroup at the second). */
static void regrouping_needs_two_changed_classifications(void **state)
{
    (void)state;
    eng_grouping_t *g = make(4, 2, 0.8, 8, "auto");
    const double base[] = {1, 1, 4, 4}, slow[] = {1, 4, 4, 4};
    const uint32_t before[] = {0, 0, 1, 1}, after[] = {0, 1, 1, 1};
    assert_true(epoch_with(g, base, 4));
    assert_groups(g, before, 4);
    for (int i = 0; i < 5; i++) /* EMA of worker 1 near 4 */
        assert_int_equal(eng_grouping_report(g, 1, 4), STRATA_OK);
    assert_false(epoch_with(g, slow, 4));
    assert_groups(g, before, 4);
    for (int i = 0; i < 5; i++) /* back to 1: the blip is forgotten */
        assert_int_equal(eng_grouping_report(g, 1, 1), STRATA_OK);
    assert_false(epoch_with(g, base, 4));
    for (int i = 0; i < 5; i++)
        assert_int_equal(eng_grouping_report(g, 1, 4), STRATA_OK);
    assert_false(epoch_with(g, slow, 4));
    assert_true(epoch_with(g, slow, 4));
    assert_groups(g, after, 4);
    assert_int_equal(eng_grouping_generation(g), 2);
    assert_false(epoch_with(g, slow, 4));
    eng_grouping_destroy(g);
}

static void a_dropped_worker_leaves_the_classification(void **state)
{
    (void)state;
    eng_grouping_t *g = make(4, 0, 0.8, 8, "auto");
    const double t[] = {1, 1, 4, 9};
    epoch_with(g, t, 4);
    assert_int_equal(eng_grouping_drop(g, 3), STRATA_OK);
    assert_int_equal(eng_grouping_group_of(g, 3), ENG_GROUPING_NONE);
    assert_int_equal(eng_grouping_drop(g, 4), STRATA_ERR_INVALID);
    test_log_expect("worker 4 does not exist");
    /* The others are classified without it ({1,1},{4}). */
    epoch_with(g, t, 3);
    epoch_with(g, t, 3);
    const uint32_t want[] = {0, 0, 1, ENG_GROUPING_NONE};
    assert_groups(g, want, 4);
    eng_grouping_destroy(g);
}

/* ---- manual groups ---- */

static void manual_groups_are_kept_and_ranked_by_speed(void **state)
{
    (void)state;
    eng_grouping_t *g = make(4, 0, 0.8, 8, "manual:1,1,0,0");
    assert_int_equal(eng_grouping_count(g), 2);
    assert_int_equal(eng_grouping_capacity(g), 2);
    const uint32_t want[] = {1, 1, 0, 0};
    assert_groups(g, want, 4);
    assert_true(eng_grouping_rank(g, 1) == 1); /* by id before reports */
    const double t[] = {1, 1, 5, 5};           /* group 1 is the faster */
    assert_false(epoch_with(g, t, 4));
    assert_false(epoch_with(g, t, 4));
    assert_groups(g, want, 4);
    assert_true(eng_grouping_rank(g, 1) == 0);
    assert_true(eng_grouping_rank(g, 0) == 1);
    eng_grouping_destroy(g);
}

static void manual_lists_are_checked(void **state)
{
    (void)state;
    uint32_t grp[4], k;
    assert_int_equal(eng_grouping_parse_manual("manual:0,1,1,0", 4, grp, &k),
                     STRATA_OK);
    assert_int_equal(k, 2);
    const struct {
        const char *spec, *error;
    } bad[] = {
        {"manual:0,0,1", "lists 3 workers, but there are 4"},
        {"manual:0,0,1,1,1", "lists 5 workers, but there are 4"},
        {"manual:0,0,2,2", "group 1 has no worker"},
        {"manual:0,x,1,1", "item 2 is not a group number"},
        {"manual:0,,1,1", "item 2 is not a group number"},
        {"manual:0,-1,1,1", "item 2 is not a group number"},
        {"manual:0,70000,1,1", "item 2 is not a group number"},
        {"groups:0,0,1,1", "expected auto or manual"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(eng_grouping_parse_manual(bad[i].spec, 4, grp, &k),
                         STRATA_ERR_CONFIG);
        test_log_expect(bad[i].error);
    }
    eng_grouping_params_t p = {4, 3, 0.8, 8, "manual:0,0,1,1"};
    eng_grouping_t *g = NULL;
    assert_int_equal(eng_grouping_create(&p, &g), STRATA_ERR_CONFIG);
    test_log_expect("STRATA_GROUPS=3 contradicts the 2 groups");
    p = (eng_grouping_params_t){4, 5, 0.8, 8, "auto"};
    assert_int_equal(eng_grouping_create(&p, &g), STRATA_ERR_CONFIG);
    test_log_expect("STRATA_GROUPS=5 is more groups than the 4 workers");
    assert_null(g);
}

static void parameters_come_from_the_configuration(void **state)
{
    (void)state;
    eng_config_t *cfg;
    assert_int_equal(eng_config_defaults(&cfg), STRATA_OK);
    eng_grouping_params_t p;
    eng_grouping_params_from_config(cfg, 16, &p);
    assert_int_equal(p.workers, 16);
    assert_int_equal(p.groups, 0);
    assert_true(p.gvf == 0.8);
    assert_int_equal(p.max_groups, 8);
    assert_string_equal(p.spec, "auto");
    assert_int_equal(eng_config_set(cfg, "STRATA_GROUPING", "manual:0,1"),
                     STRATA_OK);
    eng_grouping_params_from_config(cfg, 2, &p);
    eng_grouping_t *g;
    assert_int_equal(eng_grouping_create(&p, &g), STRATA_OK);
    assert_int_equal(eng_grouping_count(g), 2);
    eng_grouping_destroy(g);
    eng_config_free(cfg);
}

int main(void)
{
#define T(f)                                                                   \
    cmocka_unit_test_setup_teardown(f, test_log_setup, test_log_teardown)
    const struct CMUnitTest tests[] = {
        T(jenks_matches_brute_force),
        T(jenks_refuses_bad_input),
        T(jenks_is_accurate_for_large_close_times),
        T(powers_of_two_make_four_groups),
        T(automatic_count_follows_the_gvf),
        T(equal_times_make_one_group),
        T(the_ema_weighs_the_new_sample_by_0_7),
        T(nothing_happens_until_everyone_reported),
        T(regrouping_needs_two_changed_classifications),
        T(a_dropped_worker_leaves_the_classification),
        T(manual_groups_are_kept_and_ranked_by_speed),
        T(manual_lists_are_checked),
        T(parameters_come_from_the_configuration),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
