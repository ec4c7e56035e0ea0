/* A worker's own step time: compute between the model and the next push,
 * not the wait for the model; clock 0 left out; the median of the recent
 * steps (200 ms of them, at least 5). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "engine/steptime.h"

#define MS 1000000ull

static bool near(double a, double b)
{
    return fabs(a - b) < 1e-9;
}

/* strata_step's pattern: push c, wait for model c + 1, compute, push c + 1.
 * The worker computes 10 ms, then waits 90 ms for its group's slowest: its
 * step is 10 ms. */
static void the_wait_for_the_model_is_not_counted(void **state)
{
    (void)state;
    eng_steptime_t s;
    eng_steptime_init(&s);
    uint64_t t = 1000 * MS;
    eng_steptime_landed(&s, 0, t); /* the initial model */
    t += 500 * MS;                 /* the application loads its data */
    assert_false(eng_steptime_pushed(&s, 0, t));
    for (int64_t c = 1; c <= 6; c++) {
        t += 90 * MS; /* waiting for the group */
        eng_steptime_landed(&s, c, t);
        t += 10 * MS; /* computing */
        assert_true(eng_steptime_pushed(&s, c, t));
    }
    assert_int_equal(s.steps, 6);
    assert_true(near(eng_steptime_estimate(&s, t), 0.010));
}

/* A worker that pushes ahead of its model (strata_push without waiting):
 * its steps run from push to push. */
static void pushing_ahead_counts_from_the_last_push(void **state)
{
    (void)state;
    eng_steptime_t s;
    eng_steptime_init(&s);
    eng_steptime_landed(&s, 0, 0);
    assert_false(eng_steptime_pushed(&s, 0, 5 * MS));
    eng_steptime_landed(&s, 1, 9 * MS);
    assert_true(eng_steptime_pushed(&s, 1, 12 * MS)); /* 3 ms after model 1 */
    assert_true(near(eng_steptime_estimate(&s, 12 * MS), 0.003));
    /* Model 2 lands after push 2 was made (the progress thread took the
     * push late): the step began at push 1. */
    eng_steptime_landed(&s, 2, 20 * MS);
    assert_true(eng_steptime_pushed(&s, 2, 19 * MS));
    assert_true(near(eng_steptime_estimate(&s, 19 * MS), (0.003 + 0.007) / 2));
}

/* Steps of `ms` each, from clock c on; returns the next clock. */
static int64_t steps(eng_steptime_t *s, int64_t c, int n, uint64_t ms,
                     uint64_t *t)
{
    for (int i = 0; i < n; i++, c++) {
        eng_steptime_landed(s, c, *t);
        *t += ms * MS;
        eng_steptime_pushed(s, c, *t);
    }
    return c;
}

/* A slow worker's blip does not move the estimate, a lasting change does
 * after three steps; a fast worker's window holds 200 ms of steps, so even
 * a burst of three slow steps does not move it. */
static void the_median_ignores_a_blip(void **state)
{
    (void)state;
    eng_steptime_t s;
    eng_steptime_init(&s);
    uint64_t t = 0;
    eng_steptime_landed(&s, 0, t);
    eng_steptime_pushed(&s, 0, t);
    int64_t c = steps(&s, 1, 6, 120, &t);
    c = steps(&s, c, 1, 900, &t); /* one step stretched */
    assert_true(near(eng_steptime_estimate(&s, t), 0.120));
    c = steps(&s, c, 4, 120, &t);
    c = steps(&s, c, 2, 960, &t); /* 8 times slower */
    assert_true(near(eng_steptime_estimate(&s, t), 0.120));
    c = steps(&s, c, 1, 960, &t);
    assert_true(near(eng_steptime_estimate(&s, t), 0.960));

    eng_steptime_init(&s);
    assert_true(eng_steptime_estimate(&s, t) == 0);
    eng_steptime_landed(&s, 0, t);
    eng_steptime_pushed(&s, 0, t);
    c = steps(&s, 1, 20, 15, &t);
    c = steps(&s, c, 3, 40, &t); /* 120 ms of contention */
    assert_true(near(eng_steptime_estimate(&s, t), 0.015));
    c = steps(&s, c, 5, 40, &t); /* it lasts */
    assert_true(near(eng_steptime_estimate(&s, t), 0.040));
    /* Long after, the newest five count. */
    assert_true(near(eng_steptime_estimate(&s, t + 10000 * MS), 0.040));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_wait_for_the_model_is_not_counted),
        cmocka_unit_test(pushing_ahead_counts_from_the_last_push),
        cmocka_unit_test(the_median_ignores_a_blip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
