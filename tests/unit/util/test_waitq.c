/* Gates and the wait queue: raising, failing, timing out, a ping-pong
 * between two threads that parks on every turn without losing a wake-up,
 * and a wait that polls before it parks. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "util/waitq.h"

#define WAIT_MS 20000

static void a_gate_only_grows(void **state)
{
    (void)state;
    util_gate_t g;
    util_gate_init(&g, 5);
    assert_int_equal(util_gate_load(&g), 5);
    assert_int_equal(util_gate_raise(&g, 3), 5);
    assert_int_equal(util_gate_raise(&g, 9), 9);
    assert_int_equal(util_gate_load(&g), 9);
    assert_int_equal(util_gate_wait(&g, 9, 0), STRATA_OK);
    assert_int_equal(util_gate_wait(&g, 10, 0), STRATA_ERR_TIMEOUT);
}

static void a_wait_times_out(void **state)
{
    (void)state;
    util_gate_t g;
    util_gate_init(&g, 0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(util_gate_wait(&g, 1, 30), STRATA_ERR_TIMEOUT);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    assert_true(ms >= 29.0);
}

static void *fail_later(void *arg)
{
    struct timespec d = {0, 20 * 1000 * 1000};
    nanosleep(&d, NULL);
    util_gate_fail(arg, STRATA_ERR_PEER);
    return NULL;
}

static void a_failed_gate_ends_every_wait(void **state)
{
    (void)state;
    util_gate_t g;
    util_gate_init(&g, 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, fail_later, &g), 0);
    assert_int_equal(util_gate_wait(&g, 1, WAIT_MS), STRATA_ERR_PEER);
    pthread_join(th, NULL);
    assert_int_equal(util_gate_wait(&g, 1, WAIT_MS), STRATA_ERR_PEER);
    assert_int_equal(util_gate_wait(&g, 0, WAIT_MS), STRATA_OK); /* reached */
}

#define ROUNDS 20000

typedef struct pingpong {
    util_gate_t ping, pong;
    strata_status_t st;
} pingpong_t;

static void *ponger(void *arg)
{
    pingpong_t *p = arg;
    for (int64_t i = 1; i <= ROUNDS; i++) {
        strata_status_t st = util_gate_wait(&p->ping, i, WAIT_MS);
        if (st != STRATA_OK) {
            p->st = st;
            return NULL;
        }
        util_gate_raise(&p->pong, i);
    }
    return NULL;
}

static void ping_pong_loses_no_wake_up(void **state)
{
    (void)state;
    pingpong_t p = {.st = STRATA_OK};
    util_gate_init(&p.ping, 0);
    util_gate_init(&p.pong, 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, ponger, &p), 0);
    for (int64_t i = 1; i <= ROUNDS; i++) {
        util_gate_raise(&p.ping, i);
        assert_int_equal(util_gate_wait(&p.pong, i, WAIT_MS), STRATA_OK);
    }
    pthread_join(th, NULL);
    assert_int_equal(p.st, STRATA_OK);
}

typedef struct spinner {
    util_gate_t g;
    uint64_t spin_ns;
    strata_status_t st;
} spinner_t;

static void *spin_wait(void *arg)
{
    spinner_t *s = arg;
    s->st = util_gate_wait_spin(&s->g, 1, WAIT_MS, s->spin_ns, NULL, NULL);
    return NULL;
}

static void pause_ms(long ms)
{
    struct timespec d = {0, ms * 1000 * 1000};
    nanosleep(&d, NULL);
}

/* A waiter with a polling budget stays off the futex (never counted among
 * the parked) while the budget lasts, and parks once it is spent; either
 * way the raise ends its wait. */
static void a_spinning_wait_parks_after_its_budget(void **state)
{
    (void)state;
    spinner_t s = {.spin_ns = (uint64_t)WAIT_MS * 1000000u}; /* longer */
    util_gate_init(&s.g, 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, spin_wait, &s), 0);
    for (int i = 0; i < 50; i++) {
        pause_ms(2);
        assert_int_equal(atomic_load(&s.g.q.waiters), 0);
    }
    util_gate_raise(&s.g, 1);
    pthread_join(th, NULL);
    assert_int_equal(s.st, STRATA_OK);

    s = (spinner_t){.spin_ns = 1000000}; /* 1 ms */
    util_gate_init(&s.g, 0);
    assert_int_equal(pthread_create(&th, NULL, spin_wait, &s), 0);
    for (int i = 0; i < WAIT_MS && atomic_load(&s.g.q.waiters) == 0; i++)
        pause_ms(1);
    assert_int_equal(atomic_load(&s.g.q.waiters), 1);
    util_gate_raise(&s.g, 1);
    pthread_join(th, NULL);
    assert_int_equal(s.st, STRATA_OK);
}

static void raise_to_one(void *g)
{
    util_gate_raise(g, 1);
}

/* A polling wait calls its poll function between its looks, once at least
 * however short its budget: a waiter that makes the condition true itself
 * is done without parking. */
static void a_polling_wait_calls_its_poll(void **state)
{
    (void)state;
    util_gate_t g;
    util_gate_init(&g, 0);
    assert_int_equal(util_gate_wait_spin(&g, 1, WAIT_MS, 1, raise_to_one, &g),
                     STRATA_OK);
    assert_int_equal(atomic_load(&g.q.waiters), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_gate_only_grows),
        cmocka_unit_test(a_wait_times_out),
        cmocka_unit_test(a_failed_gate_ends_every_wait),
        cmocka_unit_test(ping_pong_loses_no_wake_up),
        cmocka_unit_test(a_spinning_wait_parks_after_its_budget),
        cmocka_unit_test(a_polling_wait_calls_its_poll),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
