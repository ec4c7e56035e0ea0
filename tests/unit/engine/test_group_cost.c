/* GSSP's cost model: least-waiting classes against brute force, the rate
 * of an assignment by hand, and the number of groups it picks for the
 * profiles of docs/policies.md. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "engine/group_cost.h"
#include "tests/support/test_log.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Gradients per second lost by the class x[i..j) (sorted). */
static double lost_of(const double *x, uint32_t i, uint32_t j)
{
    double v = 0;
    for (uint32_t m = i; m < j; m++)
        v += 1 / x[m] - 1 / x[j - 1];
    return v;
}

/* The least loss over every way to cut x[from..n) into k classes. */
static double brute_force(const double *x, uint32_t n, uint32_t k,
                          uint32_t from)
{
    if (k == 1)
        return lost_of(x, from, n);
    double best = INFINITY;
    for (uint32_t end = from + 1; end + (k - 1) <= n; end++) {
        double v = lost_of(x, from, end) + brute_force(x, n, k - 1, end);
        best = v < best ? v : best;
    }
    return best;
}

static void breaks_match_brute_force(void **state)
{
    (void)state;
    eng_cost_t *c;
    assert_int_equal(eng_cost_create(10, 10, 0.5, &c), STRATA_OK);
    srand(7);
    double x[10];
    uint32_t start[10];
    for (int trial = 0; trial < 400; trial++) {
        uint32_t n = 1 + (uint32_t)(rand() % 10);
        for (uint32_t i = 0; i < n; i++) /* some ties, some spread */
            x[i] = trial % 3 ? 0.01 + (rand() % 1000) / 100.0 : 1 + rand() % 4;
        qsort(x, n, sizeof(double), cmp_double);
        uint32_t k = 1 + (uint32_t)(rand() % n);
        double lost;
        assert_int_equal(eng_cost_breaks(c, x, n, k, start, &lost), STRATA_OK);
        double want = brute_force(x, n, k, 0), got = 0;
        assert_true(fabs(lost - want) <= 1e-9 * (1 + want));
        assert_int_equal(start[0], 0); /* and the breaks achieve it */
        for (uint32_t cl = 0; cl < k; cl++) {
            uint32_t end = cl + 1 < k ? start[cl + 1] : n;
            assert_true(end > start[cl]);
            got += lost_of(x, start[cl], end);
        }
        assert_true(fabs(got - want) <= 1e-9 * (1 + want));
    }
    eng_cost_destroy(c);
}

/* Times 1, 1, 2 as {1, 1} and {2}: N = 3, S = 2/3 + 1/6; sigma_0 = 1/6,
 * sigma_1 = 4/3; R = (2/3) / (1 + beta/6) + (1/6) / (1 + 4 beta/3). One
 * group: 3 / (3 * 2) = 0.5 whatever beta. */
static void rate_by_hand(void **state)
{
    (void)state;
    const double t[] = {1, 1, 2};
    const uint32_t two[] = {0, 0, 1}, one[] = {1, 1, 1};
    const uint32_t gone[] = {0, ENG_COST_NONE, 1};
    const double betas[] = {0, 0.5, 2};
    for (int i = 0; i < 3; i++) {
        double b = betas[i];
        eng_cost_t *c;
        assert_int_equal(eng_cost_create(3, 2, b, &c), STRATA_OK);
        double want = (2.0 / 3) / (1 + b / 6) + (1.0 / 6) / (1 + 4 * b / 3);
        assert_true(fabs(eng_cost_rate(c, t, two, 3) - want) < 1e-12);
        assert_true(fabs(eng_cost_rate(c, t, one, 3) - 0.5) < 1e-12);
        /* Worker 1 left out: N = 2, sigma_0 = 1/4, sigma_1 = 1. */
        want = 0.5 / (1 + b / 4) + 0.25 / (1 + b);
        assert_true(fabs(eng_cost_rate(c, t, gone, 3) - want) < 1e-12);
        eng_cost_destroy(c);
    }
}

/* The number of groups the model picks (beta 0.5, at most 8 groups): the
 * profiles of the table in docs/policies.md. */
static void known_profiles(void **state)
{
    (void)state;
    const struct {
        const char *name;
        double t[16];
        uint32_t n, k, first_break;
    } cases[] = {
        {"gssp16", {1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 4, 8, 8, 8, 8}, 16, 4, 4},
        {"x1 x3 x9", {1, 1, 1, 3, 3, 3, 9, 9}, 8, 3, 3},
        {"homogeneous", {1, 1, 1, 1, 1, 1, 1, 1}, 8, 1, 0},
        {"noise 3%", {.97, .98, .99, 1, 1, 1.01, 1.02, 1.03}, 8, 1, 0},
        {"one at x1.3", {1, 1, 1, 1, 1, 1, 1, 1.3}, 8, 2, 7},
        {"one at x1.1", {1, 1, 1, 1, 1, 1, 1, 1.1}, 8, 1, 0},
        {"1 2 3 10", {1, 2, 3, 10}, 4, 4, 1},
    };
    eng_cost_t *c;
    assert_int_equal(eng_cost_create(16, 8, 0.5, &c), STRATA_OK);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint32_t start[8], k;
        double r;
        assert_int_equal(
            eng_cost_best(c, cases[i].t, cases[i].n, 0, start, &k, &r),
            STRATA_OK);
        if (k != cases[i].k || (k > 1 && start[1] != cases[i].first_break))
            fail_msg("%s: %u groups (first break %u), expected %u (%u)",
                     cases[i].name, k, k > 1 ? start[1] : 0, cases[i].k,
                     cases[i].first_break);
    }
    /* A fixed count: the least-waiting classes of that many. */
    uint32_t start[8], k;
    double r;
    assert_int_equal(eng_cost_best(c, cases[1].t, 8, 2, start, &k, &r),
                     STRATA_OK);
    assert_int_equal(k, 2);
    assert_int_equal(start[1], 3); /* {x1} and {x3, x9}, not {x1, x3} */
    assert_int_equal(eng_cost_best(c, cases[6].t, 4, 9, start, &k, &r),
                     STRATA_OK);
    assert_int_equal(k, 4); /* capped by the times */
    eng_cost_destroy(c);
}

/* Staleness free: a group per speed class is never worse than fewer; very
 * costly: one group. */
static void the_staleness_cost_moves_the_count(void **state)
{
    (void)state;
    const double t[] = {1, 1, 1, 1, 1, 1, 1, 1.3};
    uint32_t start[8], k;
    double r;
    eng_cost_t *c;
    assert_int_equal(eng_cost_create(8, 8, 0, &c), STRATA_OK);
    assert_int_equal(eng_cost_best(c, t, 8, 0, start, &k, &r), STRATA_OK);
    assert_int_equal(k, 2);
    eng_cost_destroy(c);
    assert_int_equal(eng_cost_create(8, 8, 50, &c), STRATA_OK);
    assert_int_equal(eng_cost_best(c, t, 8, 0, start, &k, &r), STRATA_OK);
    assert_int_equal(k, 1);
    assert_true(fabs(r - 8 / (8 * 1.3)) < 1e-12);
    eng_cost_destroy(c);
}

static void bad_input_is_refused(void **state)
{
    (void)state;
    eng_cost_t *c = NULL;
    assert_int_equal(eng_cost_create(0, 1, 0.5, &c), STRATA_ERR_INVALID);
    test_log_expect("0 workers");
    assert_int_equal(eng_cost_create(4, 2, -1, &c), STRATA_ERR_INVALID);
    test_log_expect("staleness cost -1");
    assert_int_equal(eng_cost_create(4, 2, NAN, &c), STRATA_ERR_INVALID);
    test_log_expect("finite cost");
    assert_int_equal(eng_cost_create(4, 2, 0.5, &c), STRATA_OK);
    uint32_t start[4], k;
    double r;
    const double unsorted[] = {1, 3, 2}, zero[] = {0, 1, 2};
    assert_int_equal(eng_cost_best(c, unsorted, 3, 0, start, &k, &r),
                     STRATA_ERR_INVALID);
    test_log_expect("time 2 (2 s) is not positive, finite and ascending");
    assert_int_equal(eng_cost_best(c, zero, 3, 0, start, &k, &r),
                     STRATA_ERR_INVALID);
    test_log_expect("time 0 (0 s)");
    assert_int_equal(eng_cost_best(c, zero, 5, 0, start, &k, &r),
                     STRATA_ERR_INVALID);
    test_log_expect("cannot cut 5 times");
    assert_int_equal(eng_cost_breaks(c, unsorted, 2, 3, start, &r),
                     STRATA_ERR_INVALID);
    test_log_expect("into 3 classes");
    eng_cost_destroy(c);
}

int main(void)
{
#define T(f)                                                                   \
    cmocka_unit_test_setup_teardown(f, test_log_setup, test_log_teardown)
    const struct CMUnitTest tests[] = {
        T(breaks_match_brute_force), T(rate_by_hand),
        T(known_profiles),           T(the_staleness_cost_moves_the_count),
        T(bad_input_is_refused),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
