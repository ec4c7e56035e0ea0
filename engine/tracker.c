/*
 * The staleness tracker, lock-free.
 *
 * Each worker has one 64-bit word: group id (16 bits) and clock (48 bits), so
 * that a regrouping changes both at once. A worker's clock only grows, except
 * when a move rebases it onto its new group's clock.
 *
 * The published group clocks and the minimum clock are words of a 16-bit
 * generation and a 48-bit value. After changing a worker's word, a thread
 * scans every worker word and raises the published values with a CAS that
 * also checks the generation it read before scanning. Every scan reads values
 * no greater than the current ones, so what is published is a lower bound;
 * and the thread whose store comes last scans after it, so the published
 * values reach the true minima before that thread returns.
 *
 * A move may lower a worker's clock, which would turn a scan that read the old
 * clock into an upper bound. So a move makes the generations of the minimum
 * and of the target group odd before its store and even after: a scan that
 * straddles the store cannot publish (its CAS sees another generation, or it
 * sees an odd one and leaves the work to the mover, who scans afterwards).
 */
#include "engine/tracker.h"

#include <inttypes.h>
#include <stdalign.h>
#include <stdatomic.h>

#include "util/alloc.h"
#include "util/log.h"
#include "util/waitq.h"

#define TRK_VAL_BITS 48
#define TRK_VAL_MASK ((UINT64_C(1) << TRK_VAL_BITS) - 1)
/* Clock of a dropped worker, and value of a minimum over dropped workers. */
#define TRK_DROPPED TRK_VAL_MASK
#define TRK_CACHELINE 64

struct eng_tracker {
    uint32_t workers;
    uint32_t groups;
    int64_t intra;
    int64_t inter;
    _Atomic uint64_t *leaf;        /* [workers]: group | clock */
    _Atomic uint64_t *group_word;  /* [groups]: generation | clock */
    _Atomic uint64_t *worker_pull; /* [workers]: version last pulled */
    _Atomic uint64_t *group_pull;  /* [groups] */

    alignas(TRK_CACHELINE) _Atomic uint64_t root_word; /* generation | min */
    _Atomic int closed;
    util_waitq_t q;

    alignas(TRK_CACHELINE) _Atomic uint64_t version;

    alignas(TRK_CACHELINE) _Atomic uint64_t updates;
    _Atomic uint64_t staleness_sum;
    _Atomic uint64_t staleness_max;
    _Atomic uint64_t hist[ENG_TRACKER_HIST_BUCKETS];
};

static inline uint64_t trk_pack(uint32_t hi, uint64_t val)
{
    return (uint64_t)hi << TRK_VAL_BITS | val;
}

static inline uint32_t trk_hi(uint64_t word)
{
    return (uint32_t)(word >> TRK_VAL_BITS);
}

static inline uint64_t trk_val(uint64_t word)
{
    return word & TRK_VAL_MASK;
}

static inline int64_t trk_clock(uint64_t val)
{
    return val == TRK_DROPPED ? ENG_TRACKER_INF : (int64_t)val;
}

/* ---- creation ---- */

static strata_status_t trk_check_params(const eng_tracker_params_t *p)
{
    if (p->workers == 0 || p->groups == 0 ||
        p->groups > ENG_TRACKER_MAX_GROUPS) {
        util_error("tracker: need at least one worker and 1..%d groups, got "
                   "%" PRIu32 " workers and %" PRIu32 " groups",
                   ENG_TRACKER_MAX_GROUPS, p->workers, p->groups);
        return STRATA_ERR_INVALID;
    }
    if (p->intra_staleness < 0 || p->inter_staleness < 0) {
        util_error("tracker: staleness bounds must be >= 0, got intra %" PRId64
                   " and inter %" PRId64,
                   p->intra_staleness, p->inter_staleness);
        return STRATA_ERR_INVALID;
    }
    for (uint32_t w = 0; p->group_of && w < p->workers; w++)
        if (p->group_of[w] >= p->groups) {
            util_error("tracker: worker %" PRIu32 " is in group %" PRIu32
                       ", but there are %" PRIu32 " groups",
                       w, p->group_of[w], p->groups);
            return STRATA_ERR_INVALID;
        }
    return STRATA_OK;
}

strata_status_t eng_tracker_create(const eng_tracker_params_t *params,
                                   eng_tracker_t **tracker_out)
{
    strata_status_t st = trk_check_params(params);
    if (st != STRATA_OK)
        return st;
    eng_tracker_t *t = util_aligned_alloc(TRK_CACHELINE, sizeof(*t));
    if (!t)
        goto nomem;
    *t = (eng_tracker_t){.workers = params->workers,
                         .groups = params->groups,
                         .intra = params->intra_staleness,
                         .inter = params->inter_staleness};
    t->leaf = util_calloc(params->workers, sizeof(*t->leaf));
    t->worker_pull = util_calloc(params->workers, sizeof(*t->worker_pull));
    t->group_word = util_calloc(params->groups, sizeof(*t->group_word));
    t->group_pull = util_calloc(params->groups, sizeof(*t->group_pull));
    if (!t->leaf || !t->worker_pull || !t->group_word || !t->group_pull)
        goto free_tracker;
    for (uint32_t w = 0; w < t->workers; w++)
        atomic_init(&t->leaf[w],
                    trk_pack(params->group_of ? params->group_of[w] : 0, 0));
    util_waitq_init(&t->q);
    *tracker_out = t;
    return STRATA_OK;

free_tracker:
    eng_tracker_destroy(t);
nomem:
    util_error("tracker: out of memory for %" PRIu32 " workers and %" PRIu32
               " groups",
               params->workers, params->groups);
    return STRATA_ERR_NOMEM;
}

void eng_tracker_destroy(eng_tracker_t *t)
{
    if (!t)
        return;
    util_free(t->leaf);
    util_free(t->worker_pull);
    util_free(t->group_word);
    util_free(t->group_pull);
    util_free(t);
}

/* ---- maintaining the minima ---- */

typedef struct trk_scan {
    uint32_t group[2]; /* groups whose minimum is wanted (may be equal) */
    uint64_t group_min[2];
    bool group_seen[2]; /* the group has a member, live or dropped */
    bool group_live[2]; /* ... a live one */
    uint64_t all_min;
} trk_scan_t;

/* One pass over every worker word: the minima of two groups and of all. */
static void trk_scan(const eng_tracker_t *t, trk_scan_t *s, uint32_t skip)
{
    s->group_min[0] = s->group_min[1] = s->all_min = TRK_DROPPED;
    s->group_seen[0] = s->group_seen[1] = false;
    s->group_live[0] = s->group_live[1] = false;
    for (uint32_t w = 0; w < t->workers; w++) {
        uint64_t word = atomic_load(&t->leaf[w]);
        uint64_t v = trk_val(word);
        if (v < s->all_min)
            s->all_min = v;
        for (int i = 0; i < 2; i++)
            if (trk_hi(word) == s->group[i] && w != skip) {
                s->group_seen[i] = true;
                s->group_live[i] |= v != TRK_DROPPED;
                if (v < s->group_min[i])
                    s->group_min[i] = v;
            }
    }
}

/* Raises the value of a generation|value word to v unless its generation is
 * no longer gen. Returns whether it raised it. */
static bool trk_publish(_Atomic uint64_t *word, uint32_t gen, uint64_t v)
{
    uint64_t cur = atomic_load(word);
    while (trk_hi(cur) == gen && trk_val(cur) < v)
        if (atomic_compare_exchange_weak(word, &cur, trk_pack(gen, v)))
            return true;
    return false;
}

/* After a change of worker words in groups g0 and g1: republish their clocks
 * and the minimum, and wake waiters when something rose. Generations are read
 * before the scan; an odd one means a move is under way and will publish. */
static void trk_update(eng_tracker_t *t, uint32_t g0, uint32_t g1)
{
    uint32_t gen[2] = {trk_hi(atomic_load(&t->group_word[g0])),
                       trk_hi(atomic_load(&t->group_word[g1]))};
    uint32_t root_gen = trk_hi(atomic_load(&t->root_word));
    trk_scan_t s = {.group = {g0, g1}};
    trk_scan(t, &s, UINT32_MAX);

    bool raised = false;
    for (int i = 0; i < 2; i++)
        if (s.group_seen[i] && gen[i] % 2 == 0)
            raised |=
                trk_publish(&t->group_word[s.group[i]], gen[i], s.group_min[i]);
    if (root_gen % 2 == 0)
        raised |= trk_publish(&t->root_word, root_gen, s.all_min);
    if (raised)
        util_waitq_wake(&t->q);
}

/* ---- advancing ---- */

static strata_status_t trk_check_clock(const char *what, uint32_t id,
                                       int64_t clock)
{
    if (clock >= 0 && clock <= ENG_TRACKER_MAX_CLOCK)
        return STRATA_OK;
    util_error("tracker: %s %" PRIu32 ": clock %" PRId64
               " is outside [0, %" PRId64 "]",
               what, id, clock, ENG_TRACKER_MAX_CLOCK);
    return STRATA_ERR_RANGE;
}

static strata_status_t trk_check_worker(const eng_tracker_t *t, uint32_t w)
{
    if (w < t->workers)
        return STRATA_OK;
    util_error("tracker: worker %" PRIu32 " does not exist (%" PRIu32
               " workers)",
               w, t->workers);
    return STRATA_ERR_INVALID;
}

static strata_status_t trk_check_group(const eng_tracker_t *t, uint32_t g)
{
    if (g < t->groups)
        return STRATA_OK;
    util_error("tracker: group %" PRIu32 " does not exist (%" PRIu32 " groups)",
               g, t->groups);
    return STRATA_ERR_INVALID;
}

strata_status_t eng_tracker_advance_worker(eng_tracker_t *t, uint32_t worker,
                                           int64_t clock)
{
    strata_status_t st = trk_check_worker(t, worker);
    if (st == STRATA_OK)
        st = trk_check_clock("worker", worker, clock);
    if (st != STRATA_OK)
        return st;

    uint64_t cur = atomic_load(&t->leaf[worker]);
    do {
        if (trk_val(cur) == TRK_DROPPED) {
            util_error("tracker: worker %" PRIu32 " was dropped; its update "
                       "for clock %" PRId64 " is refused",
                       worker, clock - 1);
            return STRATA_ERR_PEER;
        }
        if ((int64_t)trk_val(cur) >= clock) {
            util_error("tracker: worker %" PRIu32 " is at clock %" PRId64
                       "; advancing it to %" PRId64 " would apply an update "
                       "twice",
                       worker, (int64_t)trk_val(cur), clock);
            return STRATA_ERR_STATE;
        }
    } while (!atomic_compare_exchange_weak(
        &t->leaf[worker], &cur, trk_pack(trk_hi(cur), (uint64_t)clock)));
    trk_update(t, trk_hi(cur), trk_hi(cur));
    return STRATA_OK;
}

/* Raises every live member of g to v (drops them when v is TRK_DROPPED);
 * returns how many live members it saw. */
static uint32_t trk_raise_members(eng_tracker_t *t, uint32_t g, uint64_t v)
{
    uint32_t live = 0;
    for (uint32_t w = 0; w < t->workers; w++) {
        uint64_t cur = atomic_load(&t->leaf[w]);
        if (trk_hi(cur) == g && trk_val(cur) != TRK_DROPPED)
            live++;
        while (trk_hi(cur) == g && trk_val(cur) < v &&
               !atomic_compare_exchange_weak(&t->leaf[w], &cur, trk_pack(g, v)))
            ;
    }
    return live;
}

strata_status_t eng_tracker_advance_group(eng_tracker_t *t, uint32_t group,
                                          int64_t clock)
{
    strata_status_t st = trk_check_group(t, group);
    if (st == STRATA_OK)
        st = trk_check_clock("group", group, clock);
    if (st != STRATA_OK)
        return st;
    int64_t now = eng_tracker_group_clock(t, group);
    if (now == ENG_TRACKER_INF) {
        util_error("tracker: every member of group %" PRIu32 " was dropped; "
                   "its update for clock %" PRId64 " is refused",
                   group, clock - 1);
        return STRATA_ERR_PEER;
    }
    if (now >= clock) {
        util_error("tracker: group %" PRIu32 " is at clock %" PRId64
                   "; advancing it to %" PRId64 " would apply an update twice",
                   group, now, clock);
        return STRATA_ERR_STATE;
    }
    if (trk_raise_members(t, group, (uint64_t)clock) == 0) {
        util_error("tracker: group %" PRIu32 " has no live member to advance "
                   "to clock %" PRId64,
                   group, clock);
        return STRATA_ERR_STATE;
    }
    trk_update(t, group, group);
    return STRATA_OK;
}

strata_status_t eng_tracker_drop_worker(eng_tracker_t *t, uint32_t worker)
{
    strata_status_t st = trk_check_worker(t, worker);
    if (st != STRATA_OK)
        return st;
    uint64_t cur = atomic_load(&t->leaf[worker]);
    while (trk_val(cur) != TRK_DROPPED)
        if (atomic_compare_exchange_weak(&t->leaf[worker], &cur,
                                         trk_pack(trk_hi(cur), TRK_DROPPED)))
            break;
    trk_update(t, trk_hi(cur), trk_hi(cur));
    util_waitq_wake(&t->q); /* the worker's own waits end */
    return STRATA_OK;
}

strata_status_t eng_tracker_drop_group(eng_tracker_t *t, uint32_t group)
{
    strata_status_t st = trk_check_group(t, group);
    if (st != STRATA_OK)
        return st;
    trk_raise_members(t, group, TRK_DROPPED);
    trk_update(t, group, group);
    util_waitq_wake(&t->q);
    return STRATA_OK;
}

/* ---- moving a worker ---- */

/* Makes a generation|value word's generation odd (a move owns it); waits out
 * another mover. Returns the word as it is now. */
static uint64_t trk_gen_begin(_Atomic uint64_t *word)
{
    uint64_t cur = atomic_load(word);
    for (;;) {
        if (trk_hi(cur) % 2 == 0 &&
            atomic_compare_exchange_weak(
                word, &cur, trk_pack((trk_hi(cur) + 1) & 0xffff, trk_val(cur))))
            return trk_pack((trk_hi(cur) + 1) & 0xffff, trk_val(cur));
        if (trk_hi(cur) % 2 != 0) {
            util_waitq_cpu_relax();
            cur = atomic_load(word);
        }
    }
}

/* Ends an odd generation with value v; nobody else writes the word while
 * its generation is odd. */
static void trk_gen_end(_Atomic uint64_t *word, uint64_t odd_word, uint64_t v)
{
    atomic_store(word, trk_pack((trk_hi(odd_word) + 1) & 0xffff, v));
}

static strata_status_t trk_check_move(const eng_tracker_t *t, uint32_t w,
                                      uint32_t g, int64_t clock,
                                      uint64_t group_word, uint64_t root_word,
                                      bool group_live, bool rejoin)
{
    uint64_t word = atomic_load(&t->leaf[w]);
    if (trk_val(word) == TRK_DROPPED && !rejoin) {
        util_error("tracker: worker %" PRIu32 " was dropped and cannot join "
                   "group %" PRIu32,
                   w, g);
        return STRATA_ERR_PEER;
    }
    if (trk_val(word) != TRK_DROPPED && rejoin) {
        util_error("tracker: worker %" PRIu32 " cannot rejoin group %" PRIu32
                   ": it was never dropped",
                   w, g);
        return STRATA_ERR_STATE;
    }
    if (group_live && clock < trk_clock(trk_val(group_word))) {
        util_error("tracker: worker %" PRIu32 " cannot join group %" PRIu32
                   " at clock %" PRId64 ": the group is already at %" PRId64,
                   w, g, clock, trk_clock(trk_val(group_word)));
        return STRATA_ERR_STATE;
    }
    if (clock < trk_clock(trk_val(root_word))) {
        util_error("tracker: worker %" PRIu32 " cannot join group %" PRIu32
                   " at clock %" PRId64 ": below the minimum clock %" PRId64,
                   w, g, clock, trk_clock(trk_val(root_word)));
        return STRATA_ERR_STATE;
    }
    return STRATA_OK;
}

static strata_status_t trk_move(eng_tracker_t *t, uint32_t worker,
                                uint32_t group, int64_t clock, bool rejoin)
{
    strata_status_t st = trk_check_worker(t, worker);
    if (st == STRATA_OK)
        st = trk_check_group(t, group);
    if (st == STRATA_OK)
        st = trk_check_clock("worker", worker, clock);
    if (st != STRATA_OK)
        return st;

    uint64_t root = trk_gen_begin(&t->root_word);
    uint64_t gword = trk_gen_begin(&t->group_word[group]);
    /* Membership changes only under these generations, so this holds. */
    trk_scan_t s = {.group = {group, group}};
    trk_scan(t, &s, worker);
    st = trk_check_move(t, worker, group, clock, gword, root, s.group_live[0],
                        rejoin);
    uint64_t old = atomic_load(&t->leaf[worker]);
    if (st == STRATA_OK)
        atomic_store(&t->leaf[worker], trk_pack(group, (uint64_t)clock));
    /* An empty group takes the joiner's clock, lower or higher. */
    uint64_t gval =
        st == STRATA_OK && !s.group_live[0] ? (uint64_t)clock : trk_val(gword);
    trk_gen_end(&t->group_word[group], gword, gval);
    trk_gen_end(&t->root_word, root, trk_val(root));
    if (st == STRATA_OK)
        trk_update(t, trk_hi(old), group);
    return st;
}

strata_status_t eng_tracker_move_worker(eng_tracker_t *t, uint32_t worker,
                                        uint32_t group, int64_t clock)
{
    return trk_move(t, worker, group, clock, false);
}

strata_status_t eng_tracker_rejoin_worker(eng_tracker_t *t, uint32_t worker,
                                          uint32_t group, int64_t clock)
{
    return trk_move(t, worker, group, clock, true);
}

/* ---- the rule ---- */

bool eng_tracker_may_pull(const eng_tracker_t *t, uint32_t worker,
                          int64_t clock)
{
    if (worker >= t->workers)
        return false;
    uint64_t word = atomic_load(&t->leaf[worker]);
    if (trk_val(word) == TRK_DROPPED)
        return false;
    int64_t g = trk_clock(trk_val(atomic_load(&t->group_word[trk_hi(word)])));
    int64_t m = trk_clock(trk_val(atomic_load(&t->root_word)));
    /* clock >= 0 and bounds <= INT64_MAX: the differences cannot overflow. */
    return g >= clock - t->intra && m >= clock - t->inter;
}

typedef struct trk_wait_arg {
    eng_tracker_t *t;
    uint32_t worker;
    int64_t clock;
} trk_wait_arg_t;

static strata_status_t trk_pull_ready(void *arg)
{
    const trk_wait_arg_t *a = arg;
    if (atomic_load(&a->t->closed))
        return STRATA_ERR_CANCELED;
    if (eng_tracker_may_pull(a->t, a->worker, a->clock))
        return STRATA_OK;
    if (trk_val(atomic_load(&a->t->leaf[a->worker])) == TRK_DROPPED)
        return STRATA_ERR_PEER;
    return STRATA_ERR_AGAIN;
}

strata_status_t eng_tracker_wait_pull(eng_tracker_t *t, uint32_t worker,
                                      int64_t clock, int64_t timeout_ms)
{
    strata_status_t st = trk_check_worker(t, worker);
    if (st == STRATA_OK)
        st = trk_check_clock("worker", worker, clock);
    if (st != STRATA_OK)
        return st;
    trk_wait_arg_t a = {t, worker, clock};
    st = util_waitq_wait(&t->q, trk_pull_ready, &a, timeout_ms);
    if (st == STRATA_ERR_TIMEOUT)
        util_error("tracker: worker %" PRIu32 " (group %" PRIu32
                   ") waited %" PRId64 " ms for clock %" PRId64
                   ": its group is at %" PRId64 ", the minimum at %" PRId64
                   " (staleness bounds %" PRId64 " and %" PRId64 ")",
                   worker, eng_tracker_group_of(t, worker), timeout_ms, clock,
                   eng_tracker_group_clock(t, eng_tracker_group_of(t, worker)),
                   eng_tracker_min_clock(t), t->intra, t->inter);
    return st;
}

void eng_tracker_close(eng_tracker_t *t)
{
    atomic_store(&t->closed, 1);
    util_waitq_wake(&t->q);
}

int64_t eng_tracker_min_clock(const eng_tracker_t *t)
{
    return trk_clock(trk_val(atomic_load(&t->root_word)));
}

int64_t eng_tracker_worker_clock(const eng_tracker_t *t, uint32_t worker)
{
    if (worker >= t->workers)
        return -1;
    return trk_clock(trk_val(atomic_load(&t->leaf[worker])));
}

int64_t eng_tracker_group_clock(const eng_tracker_t *t, uint32_t group)
{
    if (group >= t->groups)
        return -1;
    return trk_clock(trk_val(atomic_load(&t->group_word[group])));
}

uint32_t eng_tracker_group_of(const eng_tracker_t *t, uint32_t worker)
{
    if (worker >= t->workers)
        return UINT32_MAX;
    return trk_hi(atomic_load(&t->leaf[worker]));
}

/* ---- staleness ---- */

uint64_t eng_tracker_version(const eng_tracker_t *t)
{
    return atomic_load(&t->version);
}

strata_status_t eng_tracker_note_pull(eng_tracker_t *t, uint32_t worker,
                                      uint64_t version)
{
    strata_status_t st = trk_check_worker(t, worker);
    if (st == STRATA_OK)
        atomic_store_explicit(&t->worker_pull[worker], version,
                              memory_order_relaxed);
    return st;
}

strata_status_t eng_tracker_note_group_pull(eng_tracker_t *t, uint32_t group,
                                            uint64_t version)
{
    strata_status_t st = trk_check_group(t, group);
    if (st == STRATA_OK)
        atomic_store_explicit(&t->group_pull[group], version,
                              memory_order_relaxed);
    return st;
}

static void trk_record(eng_tracker_t *t, _Atomic uint64_t *pulled,
                       uint64_t *version_out, uint64_t *staleness_out)
{
    uint64_t before = atomic_fetch_add(&t->version, 1);
    uint64_t p = atomic_load_explicit(pulled, memory_order_relaxed);
    uint64_t tau = before > p ? before - p : 0;

    atomic_fetch_add_explicit(&t->updates, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&t->staleness_sum, tau, memory_order_relaxed);
    atomic_fetch_add_explicit(&t->hist[eng_tracker_hist_bucket(tau)], 1,
                              memory_order_relaxed);
    uint64_t max =
        atomic_load_explicit(&t->staleness_max, memory_order_relaxed);
    while (tau > max && !atomic_compare_exchange_weak_explicit(
                            &t->staleness_max, &max, tau, memory_order_relaxed,
                            memory_order_relaxed))
        ;
    if (version_out)
        *version_out = before + 1;
    if (staleness_out)
        *staleness_out = tau;
}

strata_status_t eng_tracker_record_update(eng_tracker_t *t, uint32_t worker,
                                          uint64_t *version_out,
                                          uint64_t *staleness_out)
{
    strata_status_t st = trk_check_worker(t, worker);
    if (st == STRATA_OK)
        trk_record(t, &t->worker_pull[worker], version_out, staleness_out);
    return st;
}

strata_status_t eng_tracker_record_group_update(eng_tracker_t *t,
                                                uint32_t group,
                                                uint64_t *version_out,
                                                uint64_t *staleness_out)
{
    strata_status_t st = trk_check_group(t, group);
    if (st == STRATA_OK)
        trk_record(t, &t->group_pull[group], version_out, staleness_out);
    return st;
}

void eng_tracker_stats(const eng_tracker_t *t, eng_tracker_stats_t *out)
{
    eng_tracker_t *m = (eng_tracker_t *)t; /* atomic loads of const data */
    out->updates = atomic_load_explicit(&m->updates, memory_order_relaxed);
    out->staleness_sum =
        atomic_load_explicit(&m->staleness_sum, memory_order_relaxed);
    out->staleness_max =
        atomic_load_explicit(&m->staleness_max, memory_order_relaxed);
    out->version = atomic_load(&m->version);
    out->min_clock = eng_tracker_min_clock(t);
    for (int b = 0; b < ENG_TRACKER_HIST_BUCKETS; b++)
        out->hist[b] = atomic_load_explicit(&m->hist[b], memory_order_relaxed);
}
