/* The staleness tracker's rule, errors, drops, moves and staleness records,
 * one situation at a time (the stress test runs them concurrently). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/tracker.h"
#include "tests/support/test_log.h"

#define INF ENG_TRACKER_INF
#define WAIT_MS 10000

static eng_tracker_t *make(uint32_t workers, uint32_t groups,
                           const uint32_t *group_of, int64_t intra,
                           int64_t inter)
{
    eng_tracker_params_t p = {workers, groups, intra, inter, group_of};
    eng_tracker_t *t = NULL;
    assert_int_equal(eng_tracker_create(&p, &t), STRATA_OK);
    return t;
}

static void bsp_serves_a_clock_after_the_group_completes_it(void **state)
{
    (void)state;
    eng_tracker_t *t = make(3, 1, NULL, 0, 0);
    for (uint32_t w = 0; w < 3; w++) {
        assert_true(eng_tracker_may_pull(t, w, 0));
        assert_false(eng_tracker_may_pull(t, w, 1));
    }
    assert_int_equal(eng_tracker_advance_group(t, 0, 1), STRATA_OK);
    assert_int_equal(eng_tracker_group_clock(t, 0), 1);
    assert_int_equal(eng_tracker_min_clock(t), 1);
    for (uint32_t w = 0; w < 3; w++) {
        assert_int_equal(eng_tracker_worker_clock(t, w), 1);
        assert_true(eng_tracker_may_pull(t, w, 1));
        assert_false(eng_tracker_may_pull(t, w, 2));
    }
    eng_tracker_destroy(t);
}

static void ssp_lets_a_worker_run_s_clocks_ahead(void **state)
{
    (void)state;
    const uint32_t own[] = {0, 1, 2};
    eng_tracker_t *t = make(3, 3, own, 0, 2);
    /* Worker 0 alone advances: it may pull clocks 1 and 2, not 3. */
    for (int64_t c = 1; c <= 3; c++) {
        assert_int_equal(eng_tracker_advance_worker(t, 0, c), STRATA_OK);
        assert_int_equal(eng_tracker_may_pull(t, 0, c), c <= 2);
    }
    assert_int_equal(eng_tracker_min_clock(t), 0);
    assert_int_equal(eng_tracker_advance_worker(t, 1, 1), STRATA_OK);
    assert_false(eng_tracker_may_pull(t, 0, 3)); /* worker 2 still at 0 */
    assert_int_equal(eng_tracker_advance_worker(t, 2, 1), STRATA_OK);
    assert_int_equal(eng_tracker_min_clock(t), 1);
    assert_true(eng_tracker_may_pull(t, 0, 3));
    /* Its own update first: intra staleness 0 is read-my-writes. */
    assert_false(eng_tracker_may_pull(t, 0, 4));
    eng_tracker_destroy(t);
}

static void asp_never_waits_for_others(void **state)
{
    (void)state;
    const uint32_t own[] = {0, 1};
    eng_tracker_t *t = make(2, 2, own, 0, INF);
    for (int64_t c = 1; c <= 1000; c++)
        assert_int_equal(eng_tracker_advance_worker(t, 0, c), STRATA_OK);
    assert_true(eng_tracker_may_pull(t, 0, 1000));
    assert_false(eng_tracker_may_pull(t, 0, 1001));
    assert_int_equal(eng_tracker_min_clock(t), 0);
    eng_tracker_destroy(t);
}

static void gssp_bounds_groups_by_the_inter_group_staleness(void **state)
{
    (void)state;
    /* Fast group 0 = {0, 1}, slow group 1 = {2}; intra synchronous, inter 1.
     */
    const uint32_t grp[] = {0, 0, 1};
    eng_tracker_t *t = make(3, 2, grp, 0, 1);
    assert_int_equal(eng_tracker_advance_group(t, 0, 1), STRATA_OK);
    assert_true(eng_tracker_may_pull(t, 0, 1));
    assert_int_equal(eng_tracker_advance_group(t, 0, 2), STRATA_OK);
    assert_false(eng_tracker_may_pull(t, 1, 2)); /* slow group at 0 */
    assert_true(eng_tracker_may_pull(t, 2, 0));
    assert_false(eng_tracker_may_pull(t, 2, 1));
    assert_int_equal(eng_tracker_advance_group(t, 1, 1), STRATA_OK);
    assert_true(eng_tracker_may_pull(t, 1, 2));
    assert_true(eng_tracker_may_pull(t, 2, 1));
    eng_tracker_destroy(t);
}

static void apply_on_arrival_inside_a_group(void **state)
{
    (void)state;
    /* One group of 3 with intra staleness 1 (the paper code's SSP). */
    eng_tracker_t *t = make(3, 1, NULL, 1, INF);
    assert_int_equal(eng_tracker_advance_worker(t, 0, 1), STRATA_OK);
    assert_true(eng_tracker_may_pull(t, 0, 1));
    assert_int_equal(eng_tracker_advance_worker(t, 0, 2), STRATA_OK);
    assert_false(eng_tracker_may_pull(t, 0, 2));
    assert_int_equal(eng_tracker_advance_worker(t, 1, 1), STRATA_OK);
    assert_int_equal(eng_tracker_advance_worker(t, 2, 1), STRATA_OK);
    assert_int_equal(eng_tracker_group_clock(t, 0), 1);
    assert_true(eng_tracker_may_pull(t, 0, 2));
    eng_tracker_destroy(t);
}

static void applying_twice_is_refused(void **state)
{
    (void)state;
    const uint32_t own[] = {0, 1};
    eng_tracker_t *t = make(2, 2, own, 0, 0);
    assert_int_equal(eng_tracker_advance_worker(t, 0, 1), STRATA_OK);
    assert_int_equal(eng_tracker_advance_worker(t, 0, 1), STRATA_ERR_STATE);
    test_log_expect("twice");
    assert_int_equal(eng_tracker_advance_group(t, 1, 1), STRATA_OK);
    assert_int_equal(eng_tracker_advance_group(t, 1, 1), STRATA_ERR_STATE);
    test_log_expect("group 1 is at clock 1");
    assert_int_equal(eng_tracker_worker_clock(t, 0), 1);
    eng_tracker_destroy(t);
}

static void bad_arguments_are_errors(void **state)
{
    (void)state;
    const uint32_t bad[] = {0, 2};
    eng_tracker_params_t p = {2, 2, 0, 0, bad};
    eng_tracker_t *t = NULL;
    assert_int_equal(eng_tracker_create(&p, &t), STRATA_ERR_INVALID);
    test_log_expect("worker 1 is in group 2");
    p = (eng_tracker_params_t){0, 1, 0, 0, NULL};
    assert_int_equal(eng_tracker_create(&p, &t), STRATA_ERR_INVALID);
    test_log_expect("at least one worker");
    p = (eng_tracker_params_t){1, 1, -1, 0, NULL};
    assert_int_equal(eng_tracker_create(&p, &t), STRATA_ERR_INVALID);
    test_log_expect(">= 0");
    assert_null(t);

    t = make(2, 1, NULL, 0, 0);
    assert_int_equal(eng_tracker_advance_worker(t, 2, 1), STRATA_ERR_INVALID);
    test_log_expect("worker 2 does not exist");
    assert_int_equal(eng_tracker_advance_group(t, 1, 1), STRATA_ERR_INVALID);
    test_log_expect("group 1 does not exist");
    assert_int_equal(eng_tracker_advance_worker(t, 0, -1), STRATA_ERR_RANGE);
    test_log_expect("outside");
    assert_int_equal(
        eng_tracker_advance_worker(t, 0, ENG_TRACKER_MAX_CLOCK + 1),
        STRATA_ERR_RANGE);
    test_log_expect("outside");
    assert_int_equal(eng_tracker_advance_worker(t, 0, ENG_TRACKER_MAX_CLOCK),
                     STRATA_OK);
    assert_int_equal(eng_tracker_worker_clock(t, 0), ENG_TRACKER_MAX_CLOCK);
    assert_false(eng_tracker_may_pull(t, 7, 0));
    assert_int_equal(eng_tracker_worker_clock(t, 7), -1);
    assert_int_equal(eng_tracker_group_clock(t, 7), -1);
    assert_int_equal(eng_tracker_group_of(t, 7), UINT32_MAX);
    assert_int_equal(eng_tracker_wait_pull(t, 9, 0, 0), STRATA_ERR_INVALID);
    test_log_expect("worker 9 does not exist");
    eng_tracker_destroy(t);
}

static void a_dropped_worker_leaves_the_minimum(void **state)
{
    (void)state;
    const uint32_t own[] = {0, 1, 2};
    eng_tracker_t *t = make(3, 3, own, 0, 0);
    assert_int_equal(eng_tracker_advance_worker(t, 0, 1), STRATA_OK);
    assert_int_equal(eng_tracker_advance_worker(t, 1, 1), STRATA_OK);
    assert_false(eng_tracker_may_pull(t, 0, 1));
    assert_int_equal(eng_tracker_drop_worker(t, 2), STRATA_OK);
    assert_int_equal(eng_tracker_drop_worker(t, 2), STRATA_OK); /* again */
    assert_int_equal(eng_tracker_min_clock(t), 1);
    assert_true(eng_tracker_may_pull(t, 0, 1));
    assert_false(eng_tracker_may_pull(t, 2, 0));
    assert_int_equal(eng_tracker_worker_clock(t, 2), INF);
    assert_int_equal(eng_tracker_group_clock(t, 2), INF);
    /* A late update of the dead worker is refused. */
    assert_int_equal(eng_tracker_advance_worker(t, 2, 1), STRATA_ERR_PEER);
    test_log_expect("was dropped");
    assert_int_equal(eng_tracker_wait_pull(t, 2, 0, WAIT_MS), STRATA_ERR_PEER);
    /* Everyone gone: the minimum is infinite. */
    assert_int_equal(eng_tracker_drop_worker(t, 0), STRATA_OK);
    assert_int_equal(eng_tracker_drop_worker(t, 1), STRATA_OK);
    assert_int_equal(eng_tracker_min_clock(t), INF);
    eng_tracker_destroy(t);
}

static void a_dropped_worker_rejoins_at_a_later_clock(void **state)
{
    (void)state;
    eng_tracker_t *t = make(3, 1, NULL, 0, 0); /* bsp */
    /* Not dropped: it cannot rejoin. */
    assert_int_equal(eng_tracker_rejoin_worker(t, 2, 0, 1), STRATA_ERR_STATE);
    test_log_expect("never dropped");
    assert_int_equal(eng_tracker_advance_group(t, 0, 1), STRATA_OK);
    assert_int_equal(eng_tracker_drop_worker(t, 2), STRATA_OK);
    assert_int_equal(eng_tracker_advance_group(t, 0, 2), STRATA_OK);
    /* Back at clock 3: its pull of 3 waits for the group to complete 2,
     * and the group's clock stays that of the others until then. */
    assert_int_equal(eng_tracker_rejoin_worker(t, 2, 0, 3), STRATA_OK);
    assert_int_equal(eng_tracker_worker_clock(t, 2), 3);
    assert_int_equal(eng_tracker_group_clock(t, 0), 2);
    assert_int_equal(eng_tracker_min_clock(t), 2);
    assert_false(eng_tracker_may_pull(t, 2, 3));
    assert_int_equal(eng_tracker_advance_group(t, 0, 3), STRATA_OK);
    assert_true(eng_tracker_may_pull(t, 2, 3));
    assert_int_equal(eng_tracker_min_clock(t), 3);
    /* Below the group's clock it is refused, like a move. */
    assert_int_equal(eng_tracker_drop_worker(t, 1), STRATA_OK);
    assert_int_equal(eng_tracker_rejoin_worker(t, 1, 0, 2), STRATA_ERR_STATE);
    test_log_expect("already at");
    eng_tracker_destroy(t);
}

static void a_dropped_group_leaves_the_minimum(void **state)
{
    (void)state;
    const uint32_t grp[] = {0, 0, 1, 1};
    eng_tracker_t *t = make(4, 2, grp, 0, 0);
    assert_int_equal(eng_tracker_advance_group(t, 0, 1), STRATA_OK);
    assert_false(eng_tracker_may_pull(t, 0, 1));
    assert_int_equal(eng_tracker_drop_group(t, 1), STRATA_OK);
    assert_true(eng_tracker_may_pull(t, 0, 1));
    assert_int_equal(eng_tracker_advance_group(t, 1, 1), STRATA_ERR_PEER);
    test_log_expect("every member of group 1 was dropped");
    eng_tracker_destroy(t);
}

static void moving_a_worker_rebases_its_clock(void **state)
{
    (void)state;
    /* Fast group 0 = {0, 1} at clock 5, slow group 1 = {2, 3} at clock 2. */
    const uint32_t grp[] = {0, 0, 1, 1};
    eng_tracker_t *t = make(4, 3, grp, 0, INF);
    for (int64_t c = 1; c <= 5; c++)
        assert_int_equal(eng_tracker_advance_group(t, 0, c), STRATA_OK);
    for (int64_t c = 1; c <= 2; c++)
        assert_int_equal(eng_tracker_advance_group(t, 1, c), STRATA_OK);
    assert_int_equal(eng_tracker_min_clock(t), 2);

    /* Worker 1 slowed down: it joins group 1 at its clock 2. */
    assert_int_equal(eng_tracker_move_worker(t, 1, 1, 1), STRATA_ERR_STATE);
    test_log_expect("already at 2");
    assert_int_equal(eng_tracker_move_worker(t, 1, 1, 2), STRATA_OK);
    assert_int_equal(eng_tracker_group_of(t, 1), 1);
    assert_int_equal(eng_tracker_worker_clock(t, 1), 2);
    assert_true(eng_tracker_may_pull(t, 1, 2));
    assert_false(eng_tracker_may_pull(t, 1, 3));
    assert_int_equal(eng_tracker_advance_group(t, 1, 3), STRATA_OK);
    assert_int_equal(eng_tracker_worker_clock(t, 1), 3);
    assert_int_equal(eng_tracker_worker_clock(t, 0), 5);

    /* Worker 3 sped up: it joins group 0, which then waits for it. */
    assert_int_equal(eng_tracker_move_worker(t, 3, 0, 5), STRATA_OK);
    assert_int_equal(eng_tracker_group_clock(t, 0), 5);
    assert_false(eng_tracker_may_pull(t, 0, 6));
    assert_int_equal(eng_tracker_advance_group(t, 0, 6), STRATA_OK);
    assert_int_equal(eng_tracker_worker_clock(t, 3), 6);
    assert_true(eng_tracker_may_pull(t, 0, 6));

    /* Group 2 is empty: it takes a joiner's clock, but never below the
     * minimum. */
    assert_int_equal(eng_tracker_move_worker(t, 2, 2, 1), STRATA_ERR_STATE);
    test_log_expect("below the minimum");
    assert_int_equal(eng_tracker_move_worker(t, 2, 2, 4), STRATA_OK);
    assert_int_equal(eng_tracker_group_clock(t, 2), 4);
    assert_int_equal(eng_tracker_min_clock(t), 3); /* worker 1 in group 1 */

    /* The dropped cannot move. */
    assert_int_equal(eng_tracker_drop_worker(t, 1), STRATA_OK);
    assert_int_equal(eng_tracker_min_clock(t), 4);
    assert_int_equal(eng_tracker_move_worker(t, 1, 0, 6), STRATA_ERR_PEER);
    test_log_expect("was dropped");
    eng_tracker_destroy(t);
}

/* ---- waiting ---- */

typedef struct advancer {
    eng_tracker_t *t;
    int what; /* 0: advance group 0 to 1, 1: drop worker 0, 2: close */
} advancer_t;

static void *advance_later(void *arg)
{
    advancer_t *a = arg;
    struct timespec d = {0, 20 * 1000 * 1000};
    nanosleep(&d, NULL);
    if (a->what == 0)
        eng_tracker_advance_group(a->t, 0, 1);
    else if (a->what == 1)
        eng_tracker_drop_worker(a->t, 0);
    else
        eng_tracker_close(a->t);
    return NULL;
}

static strata_status_t wait_while(int what)
{
    eng_tracker_t *t = make(2, 1, NULL, 0, 0);
    advancer_t a = {t, what};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, advance_later, &a), 0);
    strata_status_t st = eng_tracker_wait_pull(t, 0, 1, WAIT_MS);
    pthread_join(th, NULL);
    eng_tracker_destroy(t);
    return st;
}

static void a_parked_waiter_is_woken(void **state)
{
    (void)state;
    assert_int_equal(wait_while(0), STRATA_OK);
    assert_int_equal(wait_while(1), STRATA_ERR_PEER);
    assert_int_equal(wait_while(2), STRATA_ERR_CANCELED);
    assert_int_equal(test_log.errors, 0);
}

static void a_wait_times_out_with_the_clocks_logged(void **state)
{
    (void)state;
    eng_tracker_t *t = make(2, 1, NULL, 0, 0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(eng_tracker_wait_pull(t, 1, 1, 50), STRATA_ERR_TIMEOUT);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    assert_true(ms >= 49.0);
    test_log_expect("worker 1 (group 0) waited 50 ms for clock 1");
    /* A zero timeout only polls. */
    assert_int_equal(eng_tracker_wait_pull(t, 1, 0, 0), STRATA_OK);
    assert_int_equal(eng_tracker_wait_pull(t, 1, 1, 0), STRATA_ERR_TIMEOUT);
    test_log_expect("waited 0 ms");
    eng_tracker_destroy(t);
}

/* ---- staleness ---- */

static void staleness_counts_versions_since_the_last_pull(void **state)
{
    (void)state;
    const uint32_t own[] = {0, 1, 2};
    eng_tracker_t *t = make(3, 3, own, 0, INF);
    uint64_t v, tau;
    /* All three pulled version 0; they apply in turn. */
    for (uint32_t w = 0; w < 3; w++) {
        assert_int_equal(eng_tracker_record_update(t, w, &v, &tau), STRATA_OK);
        assert_int_equal(v, w + 1);
        assert_int_equal(tau, w);
    }
    /* Worker 0 pulls version 3, then two others apply before it does. */
    assert_int_equal(eng_tracker_note_pull(t, 0, 3), STRATA_OK);
    assert_int_equal(eng_tracker_record_update(t, 1, NULL, NULL), STRATA_OK);
    assert_int_equal(eng_tracker_record_update(t, 2, NULL, NULL), STRATA_OK);
    assert_int_equal(eng_tracker_record_update(t, 0, &v, &tau), STRATA_OK);
    assert_int_equal(v, 6);
    assert_int_equal(tau, 2);
    /* Groups: group 2 pulled version 6 and applies right away. */
    assert_int_equal(eng_tracker_note_group_pull(t, 2, 6), STRATA_OK);
    assert_int_equal(eng_tracker_record_group_update(t, 2, &v, &tau),
                     STRATA_OK);
    assert_int_equal(tau, 0);
    assert_int_equal(eng_tracker_version(t), 7);

    eng_tracker_stats_t s;
    eng_tracker_stats(t, &s);
    /* Staleness 0, 1, 2 | 3, 4, 2 | 0 */
    assert_int_equal(s.updates, 7);
    assert_int_equal(s.version, 7);
    assert_int_equal(s.staleness_sum, 0 + 1 + 2 + 3 + 4 + 2 + 0);
    assert_int_equal(s.staleness_max, 4);
    assert_int_equal(s.hist[0], 2);
    assert_int_equal(s.hist[1], 1);
    assert_int_equal(s.hist[2], 3); /* 2, 2, 3 */
    assert_int_equal(s.hist[3], 1); /* 4 */
    assert_int_equal(s.min_clock, 0);
    assert_int_equal(eng_tracker_record_update(t, 3, NULL, NULL),
                     STRATA_ERR_INVALID);
    test_log_expect("worker 3 does not exist");
    eng_tracker_destroy(t);
}

static void histogram_buckets_are_powers_of_two(void **state)
{
    (void)state;
    assert_int_equal(eng_tracker_hist_bucket(0), 0);
    assert_int_equal(eng_tracker_hist_bucket(1), 1);
    assert_int_equal(eng_tracker_hist_bucket(2), 2);
    assert_int_equal(eng_tracker_hist_bucket(3), 2);
    assert_int_equal(eng_tracker_hist_bucket(4), 3);
    assert_int_equal(eng_tracker_hist_bucket(UINT64_MAX),
                     ENG_TRACKER_HIST_BUCKETS - 1);
}

int main(void)
{
#define T(f)                                                                   \
    cmocka_unit_test_setup_teardown(f, test_log_setup, test_log_teardown)
    const struct CMUnitTest tests[] = {
        T(bsp_serves_a_clock_after_the_group_completes_it),
        T(ssp_lets_a_worker_run_s_clocks_ahead),
        T(asp_never_waits_for_others),
        T(gssp_bounds_groups_by_the_inter_group_staleness),
        T(apply_on_arrival_inside_a_group),
        T(applying_twice_is_refused),
        T(bad_arguments_are_errors),
        T(a_dropped_worker_leaves_the_minimum),
        T(a_dropped_worker_rejoins_at_a_later_clock),
        T(a_dropped_group_leaves_the_minimum),
        T(moving_a_worker_rebases_its_clock),
        T(a_parked_waiter_is_woken),
        T(a_wait_times_out_with_the_clocks_logged),
        T(staleness_counts_versions_since_the_last_pull),
        T(histogram_buckets_are_powers_of_two),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
