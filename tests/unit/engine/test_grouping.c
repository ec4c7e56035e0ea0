/* GSSP grouping: the probe, groups from measured step times, hysteresis,
 * stable group ids, dropped workers, manual groups and their errors. */
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

/* ---- grouping ---- */

static eng_grouping_t *make(uint32_t workers, uint32_t groups,
                            uint32_t max_groups, const char *spec)
{
    eng_grouping_params_t p = {.workers = workers,
                               .groups = groups,
                               .max_groups = max_groups,
                               .probe_steps = 3,
                               .staleness_cost = 0.5,
                               .gain = 0.1,
                               .spec = spec};
    eng_grouping_t *g = NULL;
    assert_int_equal(eng_grouping_create(&p, &g), STRATA_OK);
    return g;
}

/* Every worker w reports times[w] after `steps` steps; then an evaluation. */
static bool report(eng_grouping_t *g, const double *times, uint32_t n,
                   uint64_t steps)
{
    for (uint32_t w = 0; w < n; w++)
        assert_int_equal(eng_grouping_measure(g, w, times[w], steps),
                         STRATA_OK);
    bool changed;
    assert_int_equal(eng_grouping_evaluate(g, &changed), STRATA_OK);
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

static void the_probe_comes_first(void **state)
{
    (void)state;
    eng_grouping_t *g = make(8, 0, 4, "auto");
    assert_true(eng_grouping_probing(g));
    /* The probe: every worker alone (asynchronous), each ranked 0; a slot
     * per worker beyond STRATA_MAX_GROUPS, which caps the model's choice. */
    assert_int_equal(eng_grouping_capacity(g), 8);
    assert_false(report(g, powers, 8, 1));
    assert_false(report(g, powers, 8, 2));
    assert_int_equal(eng_grouping_count(g), 8);
    for (uint32_t w = 0; w < 8; w++) {
        assert_int_equal(eng_grouping_group_of(g, w), w);
        assert_true(eng_grouping_rank(g, w) == 0);
    }
    /* One worker short of the probe: still alone each. */
    assert_false(report(g, powers, 7, 3));
    assert_true(eng_grouping_probing(g));
    assert_true(report(g, powers, 8, 3));
    assert_false(eng_grouping_probing(g));
    /* Ids by speed in the first grouping. */
    const uint32_t want[] = {2, 0, 3, 1, 0, 3, 1, 2};
    assert_groups(g, want, 8);
    assert_int_equal(eng_grouping_count(g), 4);
    for (uint32_t c = 0; c < 4; c++)
        assert_true(fabs(eng_grouping_rank(g, c) - c / 3.0) < 1e-12);
    assert_int_equal(eng_grouping_generation(g), 1);
    /* Each group its own pace: the model's rate, 2.9x one group's. */
    assert_true(eng_grouping_rate(g) > 2.8 * eng_grouping_rate_bsp(g));
    assert_false(report(g, powers, 8, 4)); /* nothing to change */
    eng_grouping_destroy(g);
}

static void equal_times_make_one_group(void **state)
{
    (void)state;
    const double same[] = {3, 3, 3, 3};
    const double noisy[] = {0.97, 1.03, 1.01, 0.99};
    eng_grouping_t *g = make(4, 0, 8, "auto");
    assert_true(report(g, same, 4, 3)); /* the probe's end */
    assert_int_equal(eng_grouping_count(g), 1);
    assert_true(eng_grouping_rank(g, 0) == 0);
    for (uint64_t s = 4; s < 20; s++)
        assert_false(report(g, noisy, 4, s));
    assert_int_equal(eng_grouping_count(g), 1);
    eng_grouping_destroy(g);
}

static void measurements_are_checked(void **state)
{
    (void)state;
    eng_grouping_t *g = make(1, 0, 8, "auto");
    assert_int_equal(eng_grouping_measure(g, 0, 1.0, 4), STRATA_OK);
    assert_true(eng_grouping_time(g, 0) == 1.0);
    assert_int_equal(eng_grouping_steps(g, 0), 4);
    assert_int_equal(eng_grouping_measure(g, 0, 0, 5), STRATA_ERR_INVALID);
    test_log_expect("worker 0 reported a step time of 0 s");
    assert_int_equal(eng_grouping_measure(g, 0, NAN, 5), STRATA_ERR_INVALID);
    test_log_expect("positive finite");
    assert_int_equal(eng_grouping_measure(g, 0, 1, 3), STRATA_ERR_INVALID);
    test_log_expect("after 3 steps (4 before)");
    assert_int_equal(eng_grouping_measure(g, 1, 1.0, 1), STRATA_ERR_INVALID);
    test_log_expect("worker 1 does not exist");
    eng_grouping_destroy(g);
}

/* Speeds 1,1,4,4 as two groups. Worker 1 slows to 4: the better grouping
 * is found at once, applied only after two more of worker 1's steps; a
 * blip that is gone by the next evaluation moves nobody. */
static void hysteresis_waits_for_the_movers_steps(void **state)
{
    (void)state;
    eng_grouping_t *g = make(4, 0, 8, "auto");
    const double base[] = {1, 1, 4, 4}, slow[] = {1, 4, 4, 4};
    const uint32_t before[] = {0, 0, 1, 1}, after[] = {0, 1, 1, 1};
    assert_true(report(g, base, 4, 3));
    assert_groups(g, before, 4);
    assert_false(report(g, slow, 4, 4)); /* found, not confirmed */
    assert_false(report(g, base, 4, 5)); /* gone: forgotten */
    assert_false(report(g, slow, 4, 6));
    assert_false(report(g, slow, 4, 7)); /* one step of worker 1 only */
    assert_true(report(g, slow, 4, 8));
    assert_groups(g, after, 4);
    assert_int_equal(eng_grouping_generation(g), 2);
    assert_false(report(g, slow, 4, 9));
    eng_grouping_destroy(g);
}

/* A worker that changes speed moves alone: the others keep their ids. */
static void group_ids_stay_with_their_members(void **state)
{
    (void)state;
    eng_grouping_t *g = make(8, 0, 8, "auto");
    double t[8] = {1, 1, 1, 3, 3, 3, 9, 9};
    assert_true(report(g, t, 8, 3));
    const uint32_t first[] = {0, 0, 0, 1, 1, 1, 2, 2};
    assert_groups(g, first, 8);
    t[0] = 9; /* worker 0 joins the slowest */
    uint64_t s = 4;
    while (!report(g, t, 8, s++))
        assert_true(s < 10);
    const uint32_t moved[] = {2, 0, 0, 1, 1, 1, 2, 2};
    assert_groups(g, moved, 8);
    t[0] = 1; /* and comes back */
    while (!report(g, t, 8, s++))
        assert_true(s < 20);
    assert_groups(g, first, 8);
    assert_true(eng_grouping_rank(g, 2) == 1 && eng_grouping_rank(g, 0) == 0);
    eng_grouping_destroy(g);
}

/* The profile of the issue: x1, x3 and x9 workers make three groups. */
static void x1_x3_x9_make_three_groups(void **state)
{
    (void)state;
    eng_grouping_t *g = make(8, 0, 8, "auto");
    const double t[] = {9, 1, 3, 1, 3, 9, 1, 3};
    assert_true(report(g, t, 8, 3));
    const uint32_t want[] = {2, 0, 1, 0, 1, 2, 0, 1};
    assert_groups(g, want, 8);
    eng_grouping_destroy(g);
    g = make(8, 2, 8, "auto"); /* two, fixed: x1 alone */
    assert_true(report(g, t, 8, 3));
    const uint32_t two[] = {1, 0, 1, 0, 1, 1, 0, 1};
    assert_groups(g, two, 8);
    eng_grouping_destroy(g);
}

static void a_dropped_worker_leaves_the_grouping(void **state)
{
    (void)state;
    eng_grouping_t *g = make(4, 0, 8, "auto");
    const double t[] = {1, 1, 4, 4};
    assert_true(report(g, t, 4, 3));
    assert_int_equal(eng_grouping_drop(g, 3), STRATA_OK);
    assert_int_equal(eng_grouping_group_of(g, 3), ENG_GROUPING_NONE);
    assert_int_equal(eng_grouping_drop(g, 4), STRATA_ERR_INVALID);
    test_log_expect("worker 4 does not exist");
    /* The others go on without it, and it holds no probe back. */
    assert_false(report(g, t, 3, 4));
    const uint32_t want[] = {0, 0, 1, ENG_GROUPING_NONE};
    assert_groups(g, want, 4);
    assert_int_equal(eng_grouping_count(g), 2);
    eng_grouping_destroy(g);
}

/* Back in the group it left: live again, nothing regrouped until it
 * reported steps, then counted like the others. */
static void a_dropped_worker_rejoins_its_group(void **state)
{
    (void)state;
    eng_grouping_t *g = make(4, 0, 8, "auto");
    const double t[] = {1, 1, 4, 4};
    assert_true(report(g, t, 4, 3));
    assert_int_equal(eng_grouping_rejoin(g, 3, 1), STRATA_ERR_INVALID);
    test_log_expect("worker 3 cannot rejoin group 1 (not dropped");
    assert_int_equal(eng_grouping_drop(g, 3), STRATA_OK);
    assert_int_equal(eng_grouping_rejoin(g, 3, 9), STRATA_ERR_INVALID);
    test_log_expect("worker 3 cannot rejoin group 9 (dropped");
    assert_int_equal(eng_grouping_rejoin(g, 3, 1), STRATA_OK);
    assert_int_equal(eng_grouping_group_of(g, 3), 1);
    /* Fast now, but not measured yet: nobody moves. */
    const double fast[] = {1, 1, 4, 1};
    bool changed = true;
    assert_int_equal(eng_grouping_evaluate(g, &changed), STRATA_OK);
    assert_false(changed);
    const uint32_t kept[] = {0, 0, 1, 1};
    assert_groups(g, kept, 4);
    /* Its new process's steps count from 1 again; then it joins the fast
     * ones once the hysteresis is satisfied. */
    for (uint64_t s = 1; !changed; s++) {
        assert_true(s < 20);
        for (uint32_t w = 0; w < 4; w++)
            assert_int_equal(
                eng_grouping_measure(g, w, fast[w], w == 3 ? s : 3 + s),
                STRATA_OK);
        assert_int_equal(eng_grouping_evaluate(g, &changed), STRATA_OK);
    }
    const uint32_t moved[] = {0, 0, 1, 0};
    assert_groups(g, moved, 4);
    eng_grouping_destroy(g);
}

/* ---- manual groups ---- */

static void manual_groups_are_kept_and_ranked_by_speed(void **state)
{
    (void)state;
    eng_grouping_t *g = make(4, 0, 8, "manual:1,1,0,0");
    assert_int_equal(eng_grouping_count(g), 2);
    assert_int_equal(eng_grouping_capacity(g), 2);
    const uint32_t want[] = {1, 1, 0, 0};
    assert_groups(g, want, 4);
    assert_true(eng_grouping_rank(g, 1) == 1); /* by id before reports */
    const double t[] = {1, 1, 5, 5};           /* group 1 is the faster */
    assert_false(report(g, t, 4, 3));
    assert_false(report(g, t, 4, 4));
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
    eng_grouping_params_t p = {.workers = 4,
                               .groups = 3,
                               .max_groups = 8,
                               .probe_steps = 3,
                               .spec = "manual:0,0,1,1"};
    eng_grouping_t *g = NULL;
    assert_int_equal(eng_grouping_create(&p, &g), STRATA_ERR_CONFIG);
    test_log_expect("STRATA_GROUPS=3 contradicts the 2 groups");
    p.groups = 5;
    p.spec = "auto";
    assert_int_equal(eng_grouping_create(&p, &g), STRATA_ERR_CONFIG);
    test_log_expect("STRATA_GROUPS=5 is more groups than the 4 workers");
    p.groups = 0;
    p.probe_steps = 0;
    assert_int_equal(eng_grouping_create(&p, &g), STRATA_ERR_CONFIG);
    test_log_expect("STRATA_GSSP_PROBE_STEPS=0 must be at least 1");
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
    assert_int_equal(p.max_groups, 8);
    assert_int_equal(p.probe_steps, 3);
    assert_true(p.staleness_cost == 0.5);
    assert_true(p.gain == 0.1);
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
        T(the_probe_comes_first),
        T(equal_times_make_one_group),
        T(measurements_are_checked),
        T(hysteresis_waits_for_the_movers_steps),
        T(group_ids_stay_with_their_members),
        T(x1_x3_x9_make_three_groups),
        T(a_dropped_worker_leaves_the_grouping),
        T(a_dropped_worker_rejoins_its_group),
        T(manual_groups_are_kept_and_ranked_by_speed),
        T(manual_lists_are_checked),
        T(parameters_come_from_the_configuration),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
