/*
 * The tracker under contention: worker threads pull, "compute" for a random
 * while and push, the last arrival of a group (or each worker) applies and
 * advances, some workers move between groups or die, and a checker thread
 * watches the published clocks. Every served pull is checked against the
 * test's own record of the clocks (the truth, written before the tracker
 * is told), and so is every published clock. Run it under
 * -DSTRATA_SANITIZE=thread too (.ci/run does).
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "engine/tracker.h"
#include "util/log.h"

#define INF ENG_TRACKER_INF
#define MAX_WORKERS 16
#define WAIT_MS 60000
#define DEAD INT64_MAX

typedef enum { SYNC, ARRIVAL } run_mode_t;

typedef struct scenario {
    uint32_t workers, groups;
    int64_t intra, inter;
    run_mode_t mode;
    int64_t clocks;
    int move_every; /* a worker moves with probability 1/move_every */
    int dies_at;    /* worker 0 dies at this clock (0: nobody) */
    bool check_tau; /* staleness <= (workers-1)(2 inter+1) (SSP) */
} scenario_t;

typedef struct ctx {
    const scenario_t *sc;
    eng_tracker_t *t;
    uint32_t size[MAX_WORKERS];            /* members per group (SYNC) */
    _Atomic int64_t arrivals[MAX_WORKERS]; /* pushes per group (SYNC) */
    _Atomic int64_t truth[MAX_WORKERS];    /* clock; DEAD once dropped */
    _Atomic uint32_t truth_group[MAX_WORKERS];
    /* Moves run concurrently, so a seqlock's parity cannot say whether one is
     * under way: a count of moves under way, and a sequence bumped at the
     * start and the end of each. */
    _Atomic uint32_t moving;
    _Atomic uint64_t truth_seq;
    _Atomic int done;
    _Atomic uint64_t served, checked, applied;
    _Atomic int failures;
    char failure[256];
    uint64_t tau_bound;
} ctx_t;

typedef struct worker_arg {
    ctx_t *c;
    uint32_t w;
    uint64_t rng;
} worker_arg_t;

static void fail_once(ctx_t *c, const char *fmt, ...)
{
    if (atomic_fetch_add(&c->failures, 1) != 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->failure, sizeof(c->failure), fmt, ap);
    va_end(ap);
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Compute time: usually nothing or a yield, sometimes a spin or a sleep. */
static void random_delay(uint64_t *rng)
{
    uint64_t r = rnd(rng) % 16;
    if (r < 6)
        return;
    if (r < 11) {
        sched_yield();
    } else if (r < 15) {
        for (volatile uint64_t i = rnd(rng) % 2000; i > 0; i--)
            ;
    } else {
        struct timespec d = {0, (long)(rnd(rng) % 50000)};
        nanosleep(&d, NULL);
    }
}

/* Minimum of the truth over the group (UINT32_MAX: over everyone). */
static int64_t truth_min(ctx_t *c, uint32_t g)
{
    int64_t m = DEAD;
    for (uint32_t w = 0; w < c->sc->workers; w++) {
        int64_t v = atomic_load(&c->truth[w]);
        if ((g == UINT32_MAX || atomic_load(&c->truth_group[w]) == g) && v < m)
            m = v;
    }
    return m;
}

/* A snapshot of the truth taken between truth_begin and truth_end is
 * consistent: no move was under way when it began, and none started since. */
static bool truth_begin(ctx_t *c, uint64_t *seq_out)
{
    *seq_out = atomic_load(&c->truth_seq);
    return atomic_load(&c->moving) == 0;
}

static bool truth_end(ctx_t *c, uint64_t seq)
{
    return atomic_load(&c->truth_seq) == seq;
}

/* The rule, against the truth read after the pull was served (a move under
 * way makes the truth inconsistent: the check is skipped then). */
static void check_served(ctx_t *c, uint32_t w, int64_t clock)
{
    uint64_t seq;
    bool quiet = truth_begin(c, &seq);
    uint32_t g = atomic_load(&c->truth_group[w]);
    int64_t gmin = truth_min(c, g), all = truth_min(c, UINT32_MAX);
    if (!quiet || !truth_end(c, seq))
        return;
    atomic_fetch_add(&c->checked, 1);
    if (gmin < clock - c->sc->intra || all < clock - c->sc->inter)
        fail_once(c,
                  "worker %u served clock %lld while its group %u was at "
                  "%lld and the minimum at %lld",
                  w, (long long)clock, g, (long long)gmin, (long long)all);
}

static void apply_worker(ctx_t *c, uint32_t w, int64_t clock)
{
    uint64_t tau;
    atomic_store(&c->truth[w], clock + 1);
    if (eng_tracker_record_update(c->t, w, NULL, &tau) != STRATA_OK ||
        eng_tracker_advance_worker(c->t, w, clock + 1) != STRATA_OK)
        fail_once(c, "worker %u: advance to %lld failed", w,
                  (long long)clock + 1);
    if (c->tau_bound && tau > c->tau_bound)
        fail_once(c, "worker %u: staleness %llu above the bound %llu", w,
                  (unsigned long long)tau, (unsigned long long)c->tau_bound);
    atomic_fetch_add(&c->applied, 1);
}

/* SYNC: the last member to arrive sums, applies and advances the group. */
static void arrive_in_group(ctx_t *c, uint32_t w, int64_t clock)
{
    uint32_t g = atomic_load(&c->truth_group[w]);
    int64_t n = atomic_fetch_add(&c->arrivals[g], 1) + 1;
    if (n != (int64_t)c->size[g] * (clock + 1))
        return;
    uint64_t tau, version;
    for (uint32_t m = 0; m < c->sc->workers; m++)
        if (atomic_load(&c->truth_group[m]) == g)
            atomic_store(&c->truth[m], clock + 1);
    /* The members will pull the version this update makes: noted first. */
    if (eng_tracker_record_group_update(c->t, g, &version, &tau) != STRATA_OK ||
        eng_tracker_note_group_pull(c->t, g, version) != STRATA_OK ||
        eng_tracker_advance_group(c->t, g, clock + 1) != STRATA_OK)
        fail_once(c, "group %u: advance to %lld failed", g,
                  (long long)clock + 1);
    if (c->sc->groups == 1 && tau != 0)
        fail_once(c, "BSP update with staleness %llu", (unsigned long long)tau);
    atomic_fetch_add(&c->applied, 1);
}

/* The worker joins another group at that group's clock (or the minimum, if
 * higher); returns its new clock. */
static int64_t move(ctx_t *c, uint32_t w, int64_t clock, uint64_t *rng)
{
    uint32_t g = atomic_load(&c->truth_group[w]);
    uint32_t h =
        (g + 1 + (uint32_t)(rnd(rng) % (c->sc->groups - 1))) % c->sc->groups;
    for (int attempt = 0; attempt < 100; attempt++) {
        int64_t x = eng_tracker_group_clock(c->t, h);
        int64_t m = eng_tracker_min_clock(c->t);
        if (x == INF || x < m)
            x = m;
        atomic_fetch_add(&c->moving, 1);
        atomic_fetch_add(&c->truth_seq, 1);
        atomic_store(&c->truth_group[w], h);
        atomic_store(&c->truth[w], x);
        strata_status_t st = eng_tracker_move_worker(c->t, w, h, x);
        if (st != STRATA_OK) {
            atomic_store(&c->truth_group[w], g);
            atomic_store(&c->truth[w], clock);
        }
        atomic_fetch_add(&c->truth_seq, 1);
        atomic_fetch_sub(&c->moving, 1);
        if (st == STRATA_OK)
            return x;
        if (st != STRATA_ERR_STATE)
            break; /* a clock rose in between: STATE, and try again */
    }
    fail_once(c, "worker %u could not move to group %u", w, h);
    return clock;
}

static void *worker_main(void *arg)
{
    worker_arg_t *a = arg;
    ctx_t *c = a->c;
    const scenario_t *sc = c->sc;
    for (int64_t clock = 0; clock < sc->clocks && !c->failures;) {
        if (sc->dies_at && a->w == 0 && clock == sc->dies_at) {
            atomic_store(&c->truth[0], DEAD);
            eng_tracker_drop_worker(c->t, 0);
            return NULL;
        }
        strata_status_t st = eng_tracker_wait_pull(c->t, a->w, clock, WAIT_MS);
        if (st != STRATA_OK) {
            fail_once(c, "worker %u: wait for clock %lld: %s", a->w,
                      (long long)clock, strata_strerror(st));
            break;
        }
        atomic_fetch_add(&c->served, 1);
        check_served(c, a->w, clock);
        if (sc->mode == ARRIVAL)
            eng_tracker_note_pull(c->t, a->w, eng_tracker_version(c->t));
        random_delay(&a->rng);
        if (sc->mode == ARRIVAL)
            apply_worker(c, a->w, clock);
        else
            arrive_in_group(c, a->w, clock);
        clock++;
        if (sc->move_every && rnd(&a->rng) % (uint64_t)sc->move_every == 0)
            clock = move(c, a->w, clock, &a->rng);
    }
    return NULL;
}

/* Published clocks never exceed the truth (read after them). */
static void *checker_main(void *arg)
{
    ctx_t *c = arg;
    while (!atomic_load(&c->done)) {
        uint64_t seq;
        bool quiet = truth_begin(c, &seq);
        int64_t pub[MAX_WORKERS], root = eng_tracker_min_clock(c->t);
        for (uint32_t g = 0; g < c->sc->groups; g++)
            pub[g] = eng_tracker_group_clock(c->t, g);
        int64_t all = truth_min(c, UINT32_MAX);
        if (root != INF && root > all && quiet && truth_end(c, seq))
            fail_once(c, "minimum clock published %lld, true %lld",
                      (long long)root, (long long)all);
        for (uint32_t g = 0; g < c->sc->groups; g++) {
            int64_t m = truth_min(c, g);
            if (pub[g] != INF && m != DEAD && pub[g] > m && quiet &&
                truth_end(c, seq))
                fail_once(c, "group %u clock published %lld, true %lld", g,
                          (long long)pub[g], (long long)m);
        }
        sched_yield();
    }
    return NULL;
}

static void quiet(void *arg, util_log_level_t level, const char *line)
{
    /* Moves that lose a race are refused and retried; anything else is
     * printed. */
    (void)arg;
    (void)level;
    if (!strstr(line, "cannot join"))
        fprintf(stderr, "%s\n", line);
}

static void run(const scenario_t *sc)
{
    static ctx_t c;
    memset(&c, 0, sizeof(c));
    c.sc = sc;
    uint32_t group_of[MAX_WORKERS];
    for (uint32_t w = 0; w < sc->workers; w++) {
        group_of[w] = w % sc->groups;
        c.size[group_of[w]]++;
        atomic_store(&c.truth_group[w], group_of[w]);
    }
    if (sc->check_tau)
        c.tau_bound = (sc->workers - 1) * (2 * (uint64_t)sc->inter + 1);
    eng_tracker_params_t p = {sc->workers, sc->groups, sc->intra, sc->inter,
                              group_of};
    assert_int_equal(eng_tracker_create(&p, &c.t), STRATA_OK);
    util_log_set_sink(quiet, NULL);

    pthread_t th[MAX_WORKERS], checker;
    worker_arg_t args[MAX_WORKERS];
    assert_int_equal(pthread_create(&checker, NULL, checker_main, &c), 0);
    for (uint32_t w = 0; w < sc->workers; w++) {
        args[w] = (worker_arg_t){&c, w, 0x9e3779b97f4a7c15ull * (w + 1)};
        assert_int_equal(pthread_create(&th[w], NULL, worker_main, &args[w]),
                         0);
    }
    for (uint32_t w = 0; w < sc->workers; w++)
        pthread_join(th[w], NULL);
    atomic_store(&c.done, 1);
    pthread_join(checker, NULL);
    util_log_set_sink(NULL, NULL);

    if (c.failures)
        fail_msg("%s", c.failure);
    eng_tracker_stats_t s;
    eng_tracker_stats(c.t, &s);
    uint64_t in_hist = 0;
    for (int b = 0; b < ENG_TRACKER_HIST_BUCKETS; b++)
        in_hist += s.hist[b];
    assert_int_equal(s.updates, c.applied);
    assert_int_equal(s.version, c.applied);
    assert_int_equal(in_hist, c.applied);
    print_message("%llu pulls served, %llu checked, %llu updates, staleness "
                  "mean %.2f max %llu\n",
                  (unsigned long long)c.served, (unsigned long long)c.checked,
                  (unsigned long long)s.updates,
                  s.updates ? (double)s.staleness_sum / (double)s.updates : 0,
                  (unsigned long long)s.staleness_max);
    assert_true(c.checked > c.served / 2);
    if (!sc->dies_at && !sc->move_every)
        assert_int_equal(s.min_clock, sc->clocks);
    eng_tracker_destroy(c.t);
}

static void bsp(void **state)
{
    (void)state;
    scenario_t sc = {6, 1, 0, 0, SYNC, 300, 0, 0, false};
    run(&sc);
}

static void ssp(void **state)
{
    (void)state;
    scenario_t sc = {6, 6, 0, 2, ARRIVAL, 300, 0, 0, true};
    run(&sc);
}

static void asp(void **state)
{
    (void)state;
    scenario_t sc = {4, 4, 0, INF, ARRIVAL, 300, 0, 0, false};
    run(&sc);
}

static void gssp_synchronous_groups(void **state)
{
    (void)state;
    scenario_t sc = {8, 3, 0, 1, SYNC, 300, 0, 0, false};
    run(&sc);
}

static void gssp_apply_on_arrival(void **state)
{
    (void)state;
    scenario_t sc = {8, 2, 2, 3, ARRIVAL, 300, 0, 0, false};
    run(&sc);
}

static void gssp_with_moves(void **state)
{
    (void)state;
    scenario_t sc = {8, 3, 1, 2, ARRIVAL, 300, 20, 0, false};
    run(&sc);
}

/* Moves overlap all the time: the movers contend for the generations. */
static void gssp_with_constant_moves(void **state)
{
    (void)state;
    scenario_t sc = {8, 3, 1, 2, ARRIVAL, 300, 2, 0, false};
    run(&sc);
}

static void a_dead_worker_is_dropped(void **state)
{
    (void)state;
    scenario_t sc = {6, 3, 0, 1, ARRIVAL, 300, 0, 50, false};
    run(&sc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bsp),
        cmocka_unit_test(ssp),
        cmocka_unit_test(asp),
        cmocka_unit_test(gssp_synchronous_groups),
        cmocka_unit_test(gssp_apply_on_arrival),
        cmocka_unit_test(gssp_with_moves),
        cmocka_unit_test(gssp_with_constant_moves),
        cmocka_unit_test(a_dead_worker_is_dropped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
