/* Policies: groups, staleness bounds and gradient scale of each. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "engine/config.h"
#include "engine/policy.h"
#include "tests/support/test_log.h"
#include "util/log.h"

static eng_policy_t *make(const char *policy, const char *staleness,
                          const char *optimizer, uint32_t nworkers,
                          strata_status_t expect)
{
    eng_config_t *cfg;
    assert_int_equal(eng_config_defaults(&cfg), STRATA_OK);
    assert_int_equal(eng_config_set(cfg, "POLICY", policy), STRATA_OK);
    if (staleness)
        assert_int_equal(eng_config_set(cfg, "STALENESS", staleness),
                         STRATA_OK);
    if (optimizer)
        assert_int_equal(eng_config_set(cfg, "OPTIMIZER", optimizer),
                         STRATA_OK);
    eng_policy_t *p = NULL;
    assert_int_equal(eng_policy_create(cfg, nworkers, &p), expect);
    eng_config_free(cfg);
    return p;
}

static void bsp_is_one_synchronous_group(void **state)
{
    (void)state;
    eng_policy_t *p = make("bsp", NULL, NULL, 4, STRATA_OK);
    assert_int_equal(p->ngroups, 1);
    for (uint32_t w = 0; w < 4; w++)
        assert_int_equal(p->group_of[w], 0);
    assert_int_equal(eng_policy_group_size(p, 0), 4);
    assert_true(p->intra_staleness == 0 && p->inter_staleness == 0);
    assert_true(eng_policy_scale(p, p->nworkers, 4, 4, 0, 0) == 0.25);
    /* A worker dropped: the mean over the three left. */
    assert_true(eng_policy_scale(p, 3, 3, 3, 0, 0) == 1.0 / 3);
    eng_policy_free(p);
}

static void ssp_and_asp_are_groups_per_worker(void **state)
{
    (void)state;
    eng_policy_t *p = make("ssp", "3", NULL, 3, STRATA_OK);
    assert_int_equal(p->ngroups, 3);
    assert_int_equal(p->group_of[2], 2);
    assert_true(p->intra_staleness == 0 && p->inter_staleness == 3);
    eng_policy_free(p);
    p = make("asp", NULL, NULL, 2, STRATA_OK);
    assert_int_equal(p->ngroups, 2);
    assert_true(p->inter_staleness == INT64_MAX);
    eng_policy_free(p);
}

static void sum_only_needs_bsp(void **state)
{
    (void)state;
    test_log_start();
    eng_policy_t *p = make("bsp", NULL, "sum", 2, STRATA_OK);
    assert_true(p->sum_only);
    assert_true(eng_policy_scale(p, p->nworkers, 2, 2, 0, 0) == 1.0);
    eng_policy_free(p);
    make("ssp", NULL, "sum", 2, STRATA_ERR_CONFIG);
    assert_non_null(strstr(test_log.last_error, "STRATA_OPTIMIZER=sum"));
    test_log_stop();
}

/* A policy from KEY=VALUE settings. */
static eng_policy_t *make_with(uint32_t nworkers, const char *const *kv)
{
    eng_config_t *cfg;
    assert_int_equal(eng_config_defaults(&cfg), STRATA_OK);
    for (; *kv; kv += 2)
        assert_int_equal(eng_config_set(cfg, kv[0], kv[1]), STRATA_OK);
    eng_policy_t *p = NULL;
    assert_int_equal(eng_policy_create(cfg, nworkers, &p), STRATA_OK);
    eng_config_free(cfg);
    return p;
}

static void gssp_scales_by_world_or_group_and_staleness(void **state)
{
    (void)state;
    eng_policy_t *p = make_with(
        4, (const char *const[]){"POLICY", "gssp", "GROUPING", "manual:0,0,0,1",
                                 "INTRA_STALENESS", "2", NULL});
    assert_int_equal(p->ngroups, 2);
    assert_int_equal(p->group_of[3], 1);
    assert_true(p->apply_on_arrival);
    assert_true(p->inter_staleness == INT64_MAX);
    assert_true(eng_policy_scale(p, p->nworkers, 3, 3, 0, 5) == 0.25);
    eng_policy_free(p);
    p = make_with(4,
                  (const char *const[]){"POLICY", "gssp", "GSSP_SCALE", "group",
                                        "STALENESS_LR", "inverse", NULL});
    /* Until measured, every worker alone (the probe). */
    assert_int_equal(p->ngroups, 4);
    assert_int_equal(p->group_of[3], 3);
    assert_false(p->apply_on_arrival);
    assert_true(eng_policy_scale(p, p->nworkers, 2, 2, 0, 0) == 0.5);
    assert_true(eng_policy_scale(p, p->nworkers, 2, 2, 0, 1) == 0.5);
    assert_true(eng_policy_scale(p, p->nworkers, 2, 2, 0, 4) == 0.125);
    eng_policy_free(p);
}

static void rounds_average_deltas(void **state)
{
    (void)state;
    eng_policy_t *p =
        make_with(3, (const char *const[]){"POLICY", "esync", "ESYNC_GLOBAL_LR",
                                           "0.5", NULL});
    assert_true(p->ops->rounds && p->ops->state_server);
    assert_true(eng_policy_scale(p, p->nworkers, 3, 2, 7, 0) ==
                0.25); /* lr_g / n */
    eng_policy_free(p);
    p = make_with(3,
                  (const char *const[]){"POLICY", "fedavg", "ESYNC_WEIGHTING",
                                        "steps", "FEDAVG_STEPS", "5", NULL});
    assert_true(p->ops->rounds && !p->ops->state_server);
    assert_int_equal(p->round_steps, 5);
    assert_true(eng_policy_scale(p, p->nworkers, 3, 3, 8, 0) ==
                0.125); /* 1 / steps */
    eng_policy_free(p);
}

static void gdtopk_needs_gssp(void **state)
{
    (void)state;
    test_log_start();
    eng_config_t *cfg;
    assert_int_equal(eng_config_defaults(&cfg), STRATA_OK);
    assert_int_equal(eng_config_set(cfg, "GDTOPK", "1"), STRATA_OK);
    eng_policy_t *p = NULL;
    assert_int_equal(eng_policy_create(cfg, 2, &p), STRATA_ERR_CONFIG);
    assert_non_null(strstr(test_log.last_error, "STRATA_GDTOPK=1 needs"));
    eng_config_free(cfg);
    test_log_stop();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bsp_is_one_synchronous_group),
        cmocka_unit_test(ssp_and_asp_are_groups_per_worker),
        cmocka_unit_test(sum_only_needs_bsp),
        cmocka_unit_test(gssp_scales_by_world_or_group_and_staleness),
        cmocka_unit_test(rounds_average_deltas),
        cmocka_unit_test(gdtopk_needs_gssp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
