/* GDTopK's schedule against the paper code's three-class table (§1.6(c)). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "engine/gdtopk.h"
#include "tests/support/test_log.h"

static double ratio(double rank, uint32_t epoch)
{
    eng_gdtopk_plan_t p;
    assert_int_equal(eng_gdtopk_plan(rank, epoch, 1, &p), STRATA_OK);
    return p.ratio;
}

static void assert_near(double got, double want, double rel)
{
    if (fabs(got - want) > rel * want)
        fail_msg("%g is not within %g%% of %g", got, rel * 100, want);
}

/* Rows of the code's table: epochs 1..5 for fastest, middle and slowest. */
static const struct {
    double rank, tolerance; /* relative, for epochs 1-4 */
    double ratio[5];
    double sample;
} table[] = {
    {0.0, 1e-12, {0.35, 0.25, 0.0625, 0.015625, 0.004}, 0.008},
    {0.5, 1e-12, {0.35, 0.30, 0.09, 0.027, 0.0081}, 0.009},
    {1.0, 1e-12, {0.35, 0.35, 0.1225, 0.042875, 0.015}, 0.010},
};

static void the_three_classes_match_the_code(void **state)
{
    (void)state;
    for (size_t i = 0; i < 3; i++) {
        for (uint32_t e = 1; e <= 4; e++)
            assert_near(ratio(table[i].rank, e), table[i].ratio[e - 1],
                        table[i].tolerance);
        /* Steady from epoch 5 on: rho(0.5) = sqrt(0.004 * 0.015) = 0.00775
         * stands for the middle class's 0.0081. */
        for (uint32_t e = 5; e <= 50; e += 9)
            assert_near(ratio(table[i].rank, e), table[i].ratio[4],
                        table[i].rank == 0.5 ? 0.05 : 1e-12);
        eng_gdtopk_plan_t p;
        assert_int_equal(eng_gdtopk_plan(table[i].rank, 1, 1, &p), STRATA_OK);
        assert_near(p.sample_ratio, 0.01, 1e-12);
        assert_int_equal(eng_gdtopk_plan(table[i].rank, 7, 1, &p), STRATA_OK);
        assert_near(p.sample_ratio, table[i].sample, 1e-12);
    }
    /* The end points are the code's steady ratios exactly. */
    assert_near(ratio(0, 5), 0.004, 1e-12);
    assert_near(ratio(1, 5), 0.015, 1e-12);
}

static void any_number_of_groups_interpolates_geometrically(void **state)
{
    (void)state;
    /* Four groups: ranks 0, 1/3, 2/3, 1; each steady ratio is the previous
     * times (0.015 / 0.004)^(1/3). */
    double step = cbrt(0.015 / 0.004);
    for (int g = 1; g < 4; g++)
        assert_near(eng_gdtopk_steady_ratio(g / 3.0),
                    eng_gdtopk_steady_ratio((g - 1) / 3.0) * step, 1e-12);
    assert_near(eng_gdtopk_steady_ratio(-1), 0.004, 1e-12); /* clamped */
    assert_near(eng_gdtopk_steady_ratio(2), 0.015, 1e-12);
}

static void slower_groups_upload_more_and_ratios_only_fall(void **state)
{
    (void)state;
    for (uint32_t e = 2; e <= 8; e++)
        for (double r = 0; r < 1; r += 0.125) {
            assert_true(ratio(r, e) < ratio(r + 0.125, e));
            assert_true(ratio(r, e) <= ratio(r, e - 1));
            assert_true(ratio(r, e) >= eng_gdtopk_steady_ratio(r) * 0.999999);
        }
}

static void the_residual_is_flushed_every_e_epochs(void **state)
{
    (void)state;
    eng_gdtopk_plan_t p;
    for (uint32_t e = 1; e <= 4; e++) {
        assert_int_equal(eng_gdtopk_plan(0.5, e, 1, &p), STRATA_OK);
        assert_true(p.flush_after);
    }
    for (uint32_t e = 1; e <= 9; e++) {
        assert_int_equal(eng_gdtopk_plan(0.5, e, 3, &p), STRATA_OK);
        assert_int_equal(p.flush_after, e % 3 == 0);
    }
}

static void bad_arguments_are_errors(void **state)
{
    (void)state;
    eng_gdtopk_plan_t p = {0.5, 0.5, false};
    assert_int_equal(eng_gdtopk_plan(1.5, 1, 1, &p), STRATA_ERR_INVALID);
    test_log_expect("rank 1.5 must be in [0, 1]");
    assert_int_equal(eng_gdtopk_plan(NAN, 1, 1, &p), STRATA_ERR_INVALID);
    test_log_expect("rank nan");
    assert_int_equal(eng_gdtopk_plan(0.5, 0, 1, &p), STRATA_ERR_INVALID);
    test_log_expect("epoch 0");
    assert_int_equal(eng_gdtopk_plan(0.5, 1, 0, &p), STRATA_ERR_INVALID);
    test_log_expect("flush period 0");
    assert_true(p.ratio == 0.5); /* outputs untouched on error */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_three_classes_match_the_code),
        cmocka_unit_test(any_number_of_groups_interpolates_geometrically),
        cmocka_unit_test(slower_groups_upload_more_and_ratios_only_fall),
        cmocka_unit_test(the_residual_is_flushed_every_e_epochs),
        cmocka_unit_test_setup_teardown(bad_arguments_are_errors,
                                        test_log_setup, test_log_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
