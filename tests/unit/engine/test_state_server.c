/*
 * The ESync State Server on synthetic timelines: workers with fixed step
 * times train, query before every step and aggregate once READY, on a fake
 * clock. The local steps each worker takes per round must match the closed
 * form n_i = floor((c_s - eps) / c_i) + 1 (and its non-blocking variant).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/state_server.h"
#include "tests/support/test_log.h"

#define MAXW 8
#define NS 1000000000.0

/* ---- the simulator ---- */

static int64_t now_ns;

static int64_t fake_clock(void *arg)
{
    (void)arg;
    return now_ns;
}

typedef struct sim {
    uint32_t n;
    double c[MAXW]; /* step time of each worker */
    double rtt;     /* query round trip; half each way */
    double eps;     /* STRATA_ESYNC_EPSILON */
    bool nonblocking;
    double dies_at[MAXW]; /* stops for good at this time (0: never) */
    uint32_t steps[MAXW]; /* local steps per round, filled by run() */
    double round_start, round_end;
} sim_t;

static eng_state_server_t *make(const sim_t *s, double timeout)
{
    eng_ss_params_t p = {s->n,           s->eps,
                         s->nonblocking, (int64_t)(timeout * NS),
                         fake_clock,     NULL};
    eng_state_server_t *ss;
    assert_int_equal(eng_ss_create(&p, &ss), STRATA_OK);
    return ss;
}

/* One round from time t0: every live worker trains step after step, sending
 * a query at the start of each (it arrives rtt/2 later; the answer rtt/2
 * after that). Blocking workers wait for the answer (rtt = 0 here); a READY
 * lets them finish the step in progress, then they aggregate. */
static void run_round(sim_t *s, eng_state_server_t *ss, uint64_t round)
{
    double t0 = s->round_start, d = s->rtt / 2;
    uint32_t k[MAXW] = {0};
    double stop[MAXW]; /* when the worker stops training (INFINITY: not yet) */
    for (uint32_t w = 0; w < s->n; w++)
        stop[w] = s->dies_at[w] && s->dies_at[w] <= t0 ? t0 : INFINITY;
    for (;;) {
        /* The next query to arrive: worker w's k-th, sent at t0 + k c_w.
         * At equal times the slower worker's comes first: "all devices start
         * together" means the server knows the slowest when the others ask
         * (the opposite order is tested on its own below). */
        uint32_t next = MAXW;
        double at = INFINITY;
        for (uint32_t w = 0; w < s->n; w++) {
            double sent = t0 + k[w] * s->c[w];
            bool dead = s->dies_at[w] && sent >= s->dies_at[w];
            if (dead || sent >= stop[w])
                continue;
            if (sent + d < at || (sent + d == at && s->c[w] > s->c[next])) {
                at = sent + d;
                next = w;
            }
        }
        if (next == MAXW)
            break;
        now_ns = (int64_t)llround(at * NS);
        eng_ss_query_t q = {next, round, k[next], s->c[next], s->rtt};
        eng_ss_decision_t dec;
        assert_int_equal(eng_ss_query(ss, &q, &dec), STRATA_OK);
        if (dec == ENG_SS_READY && stop[next] == INFINITY) {
            /* Finish the step in progress (the one starting as the answer
             * comes, when blocking; the tolerance absorbs rounding). */
            double heard = at + d;
            uint32_t in_step =
                (uint32_t)floor((heard - t0) / s->c[next] + 1e-9);
            stop[next] = t0 + (in_step + 1) * s->c[next];
        }
        k[next]++;
    }
    s->round_end = t0;
    for (uint32_t w = 0; w < s->n; w++) {
        s->steps[w] = 0;
        if (stop[w] == INFINITY || (s->dies_at[w] && s->dies_at[w] <= t0))
            continue;
        s->steps[w] = (uint32_t)llround((stop[w] - t0) / s->c[w]);
        assert_int_equal(s->steps[w], eng_ss_planned_steps(ss, w));
        if (stop[w] > s->round_end)
            s->round_end = stop[w];
    }
}

static double slowest(const sim_t *s)
{
    double m = 0;
    for (uint32_t w = 0; w < s->n; w++)
        if (!s->dies_at[w] && s->c[w] > m)
            m = s->c[w];
    return m;
}

/* Steps a READY lands late (non-blocking). */
static double late(const sim_t *s, double c)
{
    return s->nonblocking ? floor(s->rtt / c) : 0;
}

/* n_i = floor((c_s - eps c_s) / c_i) + 1 and n_s = 1; non-blocking, with the
 * slowest's finish F = c_s (1 + L_s) for c_s:
 * n_i = max(floor((F - eps) / c_i) + 1, 1 + L_i) and n_s = 1 + L_s. */
static uint32_t closed_form(const sim_t *s, uint32_t w)
{
    double cs = slowest(s), f = cs * (1 + late(s, cs));
    if (s->c[w] == cs) /* the slowest (whatever eps): one step */
        return 1 + (uint32_t)late(s, cs);
    uint32_t n = (uint32_t)floor((f - s->eps * cs) / s->c[w]) + 1;
    uint32_t at_least = 1 + (uint32_t)late(s, s->c[w]);
    return n > at_least ? n : at_least;
}

static void run_rounds(sim_t *s, int rounds)
{
    eng_state_server_t *ss = make(s, 1e6);
    now_ns = 0;
    for (uint32_t w = 0; w < s->n; w++)
        assert_int_equal(eng_ss_announce(ss, w, s->c[w]), STRATA_OK);
    s->round_start = 0;
    for (int r = 0; r < rounds; r++) {
        run_round(s, ss, (uint64_t)r);
        for (uint32_t w = 0; w < s->n; w++)
            if (s->steps[w] != closed_form(s, w))
                fail_msg("round %d, worker %u (step %g s, slowest %g s): %u "
                         "steps, the closed form says %u",
                         r, w, s->c[w], slowest(s), s->steps[w],
                         closed_form(s, w));
        s->round_start = s->round_end; /* aggregation takes no time here */
    }
    eng_ss_destroy(ss);
}

/* ---- timelines ---- */

static void the_paper_setting_matches_the_closed_form(void **state)
{
    (void)state;
    /* 3.5 s CPU, GPUs at 0.03-0.2 s (ESync §4.1); the slowest first. */
    sim_t s = {.n = 6, .c = {3.5, 0.029, 0.031, 0.2, 0.47, 1.3}, .eps = 0.1};
    run_rounds(&s, 3);
    assert_int_equal(s.steps[0], 1);
    assert_int_equal(s.steps[1], 109); /* floor(3.15 / 0.029) + 1 */
    assert_int_equal(s.steps[5], 3);   /* floor(3.15 / 1.3) + 1 */
}

static void random_profiles_match_the_closed_form(void **state)
{
    (void)state;
    srand(11);
    for (int trial = 0; trial < 200; trial++) {
        sim_t s = {.n = 2 + (uint32_t)(rand() % 7), .eps = (rand() % 5) / 10.0};
        s.c[0] = 1.0; /* the slowest, querying first at ties */
        for (uint32_t w = 1; w < s.n; w++) {
            double x;
            do /* keep (c_s - eps) / c_i off integers */
                x = 0.01 + (rand() % 9900) / 10000.0;
            while (fabs((1 - s.eps) / x - round((1 - s.eps) / x)) < 1e-6);
            s.c[w] = x;
        }
        run_rounds(&s, 2);
    }
}

static void
nonblocking_mode_counts_the_steps_a_late_ready_lands_in(void **state)
{
    (void)state;
    /* RTT 0.25 s: worker 1 is two steps further when READY arrives, worker 2
     * one, and the server asks them earlier accordingly. */
    sim_t s = {.n = 4,
               .c = {1.0, 0.11, 0.23, 0.95},
               .eps = 0.1,
               .rtt = 0.25,
               .nonblocking = true};
    run_rounds(&s, 3);
    assert_int_equal(s.steps[0], 1);
    assert_int_equal(s.steps[1], 9); /* floor(0.9 / 0.11) + 1 */
    assert_int_equal(s.steps[2], 4); /* floor(0.9 / 0.23) + 1 */
    assert_int_equal(s.steps[3], 1);
    /* A round trip longer than the slowest step: the slowest's READY lands
     * a step late, so it takes 2 steps (F = 2 s) and the others fill that. */
    sim_t slow_ack = {.n = 3,
                      .c = {1.0, 0.4, 0.9},
                      .eps = 0.1,
                      .rtt = 1.5,
                      .nonblocking = true};
    run_rounds(&slow_ack, 2);
    assert_int_equal(slow_ack.steps[0], 2);
    assert_int_equal(slow_ack.steps[1], 5); /* floor(1.9 / 0.4) + 1 */
    assert_int_equal(slow_ack.steps[2], 3); /* floor(1.9 / 0.9) + 1 */
    eng_ss_params_t p = {1, 0.1, true, 1, fake_clock, NULL};
    eng_state_server_t *ss;
    assert_int_equal(eng_ss_create(&p, &ss), STRATA_OK);
    assert_false(eng_ss_must_reply(ss, ENG_SS_NOT_READY));
    assert_true(eng_ss_must_reply(ss, ENG_SS_READY));
    eng_ss_destroy(ss);
}

static void nobody_is_ready_before_the_slowest_starts_the_round(void **state)
{
    (void)state;
    sim_t s = {.n = 2, .c = {1.0, 0.95}, .eps = 0.1};
    eng_state_server_t *ss = make(&s, 100);
    eng_ss_decision_t d;
    now_ns = 0;
    /* Worker 1 would be READY at once (0.95 + 0.1 > 1) but the slowest has
     * not reported yet: it trains. */
    eng_ss_query_t q1 = {1, 0, 0, 0.95, 0};
    assert_int_equal(eng_ss_query(ss, &q1, &d), STRATA_OK);
    assert_int_equal(d, ENG_SS_NOT_READY);
    eng_ss_query_t q0 = {0, 0, 0, 1.0, 0};
    assert_int_equal(eng_ss_query(ss, &q0, &d), STRATA_OK);
    assert_int_equal(d, ENG_SS_READY); /* the slowest: one step */
    assert_int_equal(eng_ss_planned_steps(ss, 0), 1);
    now_ns = (int64_t)(0.95 * NS);
    q1.steps = 1;
    assert_int_equal(eng_ss_query(ss, &q1, &d), STRATA_OK);
    assert_int_equal(d, ENG_SS_READY); /* the slowest is READY */
    assert_int_equal(eng_ss_planned_steps(ss, 1), 2);
    /* Round 1: worker 1 is back first; the slowest's record is round 0's. */
    now_ns = 2 * (int64_t)NS;
    eng_ss_query_t r1 = {1, 1, 0, 0.5, 0};
    assert_int_equal(eng_ss_query(ss, &r1, &d), STRATA_OK);
    assert_int_equal(d, ENG_SS_NOT_READY);
    assert_int_equal(eng_ss_round(ss), 1);
    assert_int_equal(eng_ss_planned_steps(ss, 0), 0);
    eng_ss_destroy(ss);
}

static void a_silent_worker_is_dropped_and_the_round_goes_on(void **state)
{
    (void)state;
    /* The slowest (3 s) dies as round 1 begins (t = 3). Its last query was
     * at t = 0; with a 5 s timeout past its step it is dropped after
     * t = 0 + 3 + 5 = 8 s, and the others, which kept training meanwhile,
     * are judged against the next slowest. */
    sim_t s = {.n = 3, .c = {3.0, 0.5, 0.7}, .eps = 0.1};
    s.dies_at[0] = 3;
    eng_state_server_t *ss = make(&s, 5);
    s.round_start = 0;
    run_round(&s, ss, 0); /* worker 0 alive for the whole of round 0 */
    assert_true(eng_ss_is_live(ss, 0));
    s.round_start = s.round_end;
    run_round(&s, ss, 1);
    test_log_expect("worker 0 silent for");
    assert_false(eng_ss_is_live(ss, 0));
    assert_int_equal(eng_ss_live_count(ss), 2);
    /* Workers 1 and 2 trained until the drop, then aggregated soon after
     * (worker 2, now the slowest, is READY at its next query). */
    assert_true(s.round_end > 8 && s.round_end < 10);
    /* Round 2 without worker 0: worker 2 is the slowest. */
    s.round_start = s.round_end;
    run_round(&s, ss, 2);
    assert_int_equal(s.steps[2], 1);
    assert_int_equal(s.steps[1], 2); /* floor(0.63 / 0.5) + 1 */
    /* Its late query is refused. */
    eng_ss_query_t q = {0, 2, 1, 3.0, 0};
    eng_ss_decision_t d;
    assert_int_equal(eng_ss_query(ss, &q, &d), STRATA_ERR_PEER);
    test_log_expect("worker 0 was dropped");
    eng_ss_destroy(ss);
}

/* Workers 0..n-1, of 1 s steps, each query at the start of round 0. */
static void query_all(eng_state_server_t *ss, uint32_t n)
{
    eng_ss_decision_t d;
    for (uint32_t w = 0; w < n; w++) {
        eng_ss_query_t q = {w, 0, 0, 1.0, 0};
        assert_int_equal(eng_ss_query(ss, &q, &d), STRATA_OK);
    }
}

static void expire_and_drop(void **state)
{
    (void)state;
    sim_t s = {.n = 3, .c = {1, 1, 1}, .eps = 0.1};
    now_ns = 0;
    eng_state_server_t *ss = make(&s, 2);
    eng_ss_decision_t d;
    query_all(ss, 3);
    now_ns = (int64_t)(2.9 * NS); /* within timeout + step */
    assert_int_equal(eng_ss_expire(ss), 0);
    eng_ss_query_t q = {1, 0, 1, 1.0, 0};
    assert_int_equal(eng_ss_query(ss, &q, &d), STRATA_OK);
    now_ns = (int64_t)(3.1 * NS);
    assert_int_equal(eng_ss_expire(ss), 2); /* workers 0 and 2 */
    test_log_expect_n(2, "dropped from round 0");
    assert_int_equal(eng_ss_live_count(ss), 1);
    assert_int_equal(eng_ss_drop(ss, 1), STRATA_OK);
    assert_int_equal(eng_ss_drop(ss, 1), STRATA_OK);
    assert_int_equal(eng_ss_live_count(ss), 0);
    assert_int_equal(eng_ss_drop(ss, 3), STRATA_ERR_INVALID);
    test_log_expect("worker 3 does not exist");
    eng_ss_destroy(ss);
}

/* A dropped worker back (rejoin): live again, heard from the moment it is
 * back, its queries taken; rejoining one not dropped is an error. */
static void a_dropped_worker_rejoins(void **state)
{
    (void)state;
    sim_t s = {.n = 3, .c = {1, 1, 1}, .eps = 0.1};
    now_ns = 0;
    eng_state_server_t *ss = make(&s, 2);
    eng_ss_decision_t d;
    query_all(ss, 3);
    assert_int_equal(eng_ss_drop(ss, 1), STRATA_OK);
    assert_int_equal(eng_ss_live_count(ss), 2);
    eng_ss_query_t q1 = {1, 0, 1, 1.0, 0};
    assert_int_equal(eng_ss_query(ss, &q1, &d), STRATA_ERR_PEER);
    test_log_expect("worker 1 was dropped");
    now_ns = (int64_t)(2.5 * NS); /* the others' silence: 2.5 s < 3 s */
    assert_int_equal(eng_ss_rejoin(ss, 1), STRATA_OK);
    assert_true(eng_ss_is_live(ss, 1));
    assert_int_equal(eng_ss_live_count(ss), 3);
    assert_int_equal(eng_ss_rejoin(ss, 1), STRATA_ERR_STATE);
    test_log_expect("worker 1 cannot rejoin: it was never dropped");
    assert_int_equal(eng_ss_rejoin(ss, 3), STRATA_ERR_STATE);
    test_log_expect("worker 3 cannot rejoin: it does not exist");
    /* Its silence counts from its return: at 5.4 s the others (heard at
     * 0) are dropped, it is not (2.9 s < timeout + its step). */
    now_ns = (int64_t)(5.4 * NS);
    assert_int_equal(eng_ss_expire(ss), 2);
    test_log_expect_n(2, "dropped from round 0");
    assert_true(eng_ss_is_live(ss, 1));
    assert_int_equal(eng_ss_query(ss, &q1, &d), STRATA_OK);
    eng_ss_destroy(ss);
}

/* A worker aggregating (its delta pushed, waiting for the model) is not
 * silent; once the next round starts its silence counts from then. */
static void an_aggregating_worker_is_not_dropped(void **state)
{
    (void)state;
    sim_t s = {.n = 2, .c = {1, 1}, .eps = 0.1};
    now_ns = 0;
    eng_state_server_t *ss = make(&s, 2);
    eng_ss_decision_t d;
    query_all(ss, 2);
    assert_int_equal(eng_ss_syncing(ss, 0, 0), STRATA_OK);
    now_ns = (int64_t)(3.5 * NS);           /* past timeout + step for both */
    assert_int_equal(eng_ss_expire(ss), 1); /* worker 1 only */
    test_log_expect("worker 1 silent");
    assert_true(eng_ss_is_live(ss, 0));
    now_ns = (int64_t)(4 * NS);
    eng_ss_query_t q = {0, 1, 0, 1.0, 0}; /* round 1 begins */
    assert_int_equal(eng_ss_query(ss, &q, &d), STRATA_OK);
    now_ns = (int64_t)(6.9 * NS); /* 2.9 s after the round began */
    assert_int_equal(eng_ss_expire(ss), 0);
    now_ns = (int64_t)(7.1 * NS);
    assert_int_equal(eng_ss_expire(ss), 1);
    test_log_expect("worker 0 silent");
    assert_int_equal(eng_ss_syncing(ss, 0, 1), STRATA_ERR_PEER);
    test_log_expect("worker 0 was dropped");
    eng_ss_destroy(ss);
}

static void bad_queries_are_refused(void **state)
{
    (void)state;
    sim_t s = {.n = 2, .c = {1, 1}, .eps = 0.1};
    now_ns = 0;
    eng_state_server_t *ss = make(&s, 100);
    eng_ss_decision_t d = ENG_SS_NOT_READY;
    eng_ss_query_t bad[] = {
        {2, 0, 0, 1.0, 0}, {0, 0, 0, 0, 0},        {0, 0, 0, NAN, 0},
        {0, 0, 0, 1, -1},  {0, 0, 0, INFINITY, 0},
    };
    const char *why[] = {"query from worker 2", "step of 0 s", "step of nan",
                         "round trip of -1 s", "step of inf"};
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(eng_ss_query(ss, &bad[i], &d), STRATA_ERR_INVALID);
        test_log_expect(why[i]);
    }
    eng_ss_query_t q = {0, 3, 0, 1.0, 0};
    assert_int_equal(eng_ss_query(ss, &q, &d), STRATA_OK);
    q.round = 2;
    assert_int_equal(eng_ss_query(ss, &q, &d), STRATA_ERR_STATE);
    test_log_expect("queried in round 2, but round 3 has begun");
    eng_ss_destroy(ss);

    eng_ss_params_t p = {2, 1.5, false, 1, NULL, NULL};
    assert_int_equal(eng_ss_create(&p, &ss), STRATA_ERR_INVALID);
    test_log_expect("STRATA_ESYNC_EPSILON");
}

static void parameters_come_from_the_configuration(void **state)
{
    (void)state;
    eng_config_t *cfg;
    assert_int_equal(eng_config_defaults(&cfg), STRATA_OK);
    assert_int_equal(eng_config_set(cfg, "STRATA_ESYNC_NONBLOCKING", "1"),
                     STRATA_OK);
    eng_ss_params_t p;
    eng_ss_params_from_config(cfg, 4, &p);
    assert_int_equal(p.workers, 4);
    assert_true(p.epsilon == 0.1);
    assert_true(p.nonblocking);
    assert_int_equal(p.timeout_ns, 30000LL * 1000000);
    assert_null(p.clock);
    eng_state_server_t *ss;
    assert_int_equal(eng_ss_create(&p, &ss), STRATA_OK); /* the real clock */
    eng_ss_query_t q = {0, 0, 0, 0.1, 0};
    eng_ss_decision_t d;
    assert_int_equal(eng_ss_query(ss, &q, &d), STRATA_OK);
    assert_int_equal(d, ENG_SS_NOT_READY); /* others not heard yet */
    eng_ss_destroy(ss);
    eng_config_free(cfg);
}

int main(void)
{
#define T(f)                                                                   \
    cmocka_unit_test_setup_teardown(f, test_log_setup, test_log_teardown)
    const struct CMUnitTest tests[] = {
        T(the_paper_setting_matches_the_closed_form),
        T(random_profiles_match_the_closed_form),
        T(nonblocking_mode_counts_the_steps_a_late_ready_lands_in),
        T(nobody_is_ready_before_the_slowest_starts_the_round),
        T(a_silent_worker_is_dropped_and_the_round_goes_on),
        T(expire_and_drop),
        T(a_dropped_worker_rejoins),
        T(an_aggregating_worker_is_not_dropped),
        T(bad_queries_are_refused),
        T(parameters_come_from_the_configuration),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
