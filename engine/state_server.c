/* The ESync State Server's decisions (Algorithm 2 with Strata's choices). */
#include "engine/state_server.h"

#include <inttypes.h>
#include <math.h>

#include "util/alloc.h"
#include "util/clock.h"
#include "util/log.h"

typedef struct ss_record {
    double c;         /* last reported step duration, seconds */
    double rtt;       /* last reported query round trip, seconds */
    int64_t stamp_ns; /* server time of its last query (or of creation) */
    uint32_t steps;   /* steps at its last query */
    uint32_t planned; /* steps it takes this round once READY */
    bool known;       /* has reported a duration */
    bool started;     /* has queried in the current round */
    bool ready;
    bool syncing; /* aggregating this round: silent until the next */
    bool dead;
} ss_record_t;

struct eng_state_server {
    eng_ss_params_t p;
    ss_record_t *rec;
    uint64_t round;
    uint32_t live;
};

static int64_t ss_monotonic_ns(void *arg)
{
    (void)arg;
    return (int64_t)util_now_ns();
}

void eng_ss_params_from_config(const eng_config_t *cfg, uint32_t workers,
                               eng_ss_params_t *params_out)
{
    *params_out = (eng_ss_params_t){
        .workers = workers,
        .epsilon = eng_config_double(cfg, ENG_CFG_ESYNC_EPSILON),
        .nonblocking = eng_config_int(cfg, ENG_CFG_ESYNC_NONBLOCKING) != 0,
        .timeout_ns = eng_config_int(cfg, ENG_CFG_TIMEOUT_MS) * 1000000,
    };
}

strata_status_t eng_ss_create(const eng_ss_params_t *params,
                              eng_state_server_t **ss_out)
{
    if (params->workers == 0 || !(params->epsilon >= 0) ||
        params->epsilon > 1 || params->timeout_ns <= 0) {
        util_error("state server: need workers >= 1 (got %" PRIu32
                   "), STRATA_ESYNC_EPSILON in [0, 1] (got %g) and a "
                   "positive timeout (got %" PRId64 " ns)",
                   params->workers, params->epsilon, params->timeout_ns);
        return STRATA_ERR_INVALID;
    }
    eng_state_server_t *ss = util_calloc(1, sizeof(*ss));
    ss_record_t *rec = util_calloc(params->workers, sizeof(*rec));
    if (!ss || !rec) {
        util_free(ss);
        util_free(rec);
        util_error("state server: out of memory for %" PRIu32 " workers",
                   params->workers);
        return STRATA_ERR_NOMEM;
    }
    ss->p = *params;
    if (!ss->p.clock)
        ss->p.clock = ss_monotonic_ns;
    ss->rec = rec;
    ss->live = params->workers;
    int64_t now = ss->p.clock(ss->p.clock_arg);
    for (uint32_t w = 0; w < params->workers; w++)
        rec[w].stamp_ns = now;
    *ss_out = ss;
    return STRATA_OK;
}

void eng_ss_destroy(eng_state_server_t *ss)
{
    if (!ss)
        return;
    util_free(ss->rec);
    util_free(ss);
}

/* ---- liveness ---- */

static void ss_kill(eng_state_server_t *ss, uint32_t w)
{
    if (ss->rec[w].dead)
        return;
    ss->rec[w].dead = true;
    ss->rec[w].ready = false;
    ss->live--;
}

static uint32_t ss_expire_at(eng_state_server_t *ss, int64_t now)
{
    uint32_t dropped = 0;
    for (uint32_t w = 0; w < ss->p.workers; w++) {
        const ss_record_t *r = &ss->rec[w];
        double silent = (double)(now - r->stamp_ns) / 1e9;
        double timeout = (double)ss->p.timeout_ns / 1e9;
        /* A worker is silent while it computes a step (allow for it) and
         * while it aggregates (its loss shows on its connections). */
        if (r->dead || r->syncing || silent <= timeout + r->c)
            continue;
        util_error("state server: worker %" PRIu32 " silent for %.3f s (step "
                   "%.3f s, timeout %.3f s): dropped from round %" PRIu64,
                   w, silent, r->c, timeout, ss->round);
        ss_kill(ss, w);
        dropped++;
    }
    return dropped;
}

uint32_t eng_ss_expire(eng_state_server_t *ss)
{
    return ss_expire_at(ss, ss->p.clock(ss->p.clock_arg));
}

strata_status_t eng_ss_drop(eng_state_server_t *ss, uint32_t worker)
{
    if (worker >= ss->p.workers) {
        util_error("state server: worker %" PRIu32 " does not exist (%" PRIu32
                   " workers)",
                   worker, ss->p.workers);
        return STRATA_ERR_INVALID;
    }
    ss_kill(ss, worker);
    return STRATA_OK;
}

strata_status_t eng_ss_rejoin(eng_state_server_t *ss, uint32_t worker)
{
    if (worker >= ss->p.workers || !ss->rec[worker].dead) {
        util_error("state server: worker %" PRIu32 " cannot rejoin: %s", worker,
                   worker >= ss->p.workers ? "it does not exist"
                                           : "it was never dropped");
        return STRATA_ERR_STATE;
    }
    ss_record_t *r = &ss->rec[worker];
    double c = r->c, rtt = r->rtt;
    bool known = r->known;
    *r = (ss_record_t){.c = c,
                       .rtt = rtt,
                       .known = known,
                       .stamp_ns = ss->p.clock(ss->p.clock_arg)};
    ss->live++;
    return STRATA_OK;
}

/* ---- decisions ---- */

static strata_status_t ss_check_time(uint32_t worker, double seconds,
                                     double rtt)
{
    if (seconds > 0 && isfinite(seconds) && rtt >= 0 && isfinite(rtt))
        return STRATA_OK;
    util_error("state server: worker %" PRIu32 " reported a step of %g s and "
               "a round trip of %g s; expected a positive and a non-negative "
               "finite time",
               worker, seconds, rtt);
    return STRATA_ERR_INVALID;
}

static strata_status_t ss_check_query(const eng_state_server_t *ss,
                                      const eng_ss_query_t *q)
{
    if (q->worker >= ss->p.workers) {
        util_error("state server: query from worker %" PRIu32 ", but there "
                   "are %" PRIu32 " workers",
                   q->worker, ss->p.workers);
        return STRATA_ERR_INVALID;
    }
    strata_status_t st =
        ss_check_time(q->worker, q->step_seconds, q->rtt_seconds);
    if (st != STRATA_OK)
        return st;
    if (ss->rec[q->worker].dead) {
        util_error("state server: worker %" PRIu32 " was dropped; its query "
                   "for round %" PRIu64 " is refused",
                   q->worker, q->round);
        return STRATA_ERR_PEER;
    }
    if (q->round < ss->round) {
        util_error("state server: worker %" PRIu32 " queried in round %" PRIu64
                   ", but round %" PRIu64 " has begun",
                   q->worker, q->round, ss->round);
        return STRATA_ERR_STATE;
    }
    return STRATA_OK;
}

/* The first query of a later round starts it: nobody has stepped or is
 * READY in it yet. */
static void ss_begin_round(eng_state_server_t *ss, uint64_t round, int64_t now)
{
    ss->round = round;
    for (uint32_t w = 0; w < ss->p.workers; w++) {
        if (ss->rec[w].syncing) /* its silence counts from now */
            ss->rec[w].stamp_ns = now;
        ss->rec[w].steps = 0;
        ss->rec[w].planned = 0;
        ss->rec[w].started = false;
        ss->rec[w].ready = false;
        ss->rec[w].syncing = false;
    }
}

/* The live worker with the largest step duration (ties: the lowest id), or
 * UINT32_MAX while some live worker has not reported one. */
static uint32_t ss_slowest(const eng_state_server_t *ss)
{
    uint32_t s = UINT32_MAX;
    for (uint32_t w = 0; w < ss->p.workers; w++) {
        const ss_record_t *r = &ss->rec[w];
        if (r->dead)
            continue;
        if (!r->known)
            return UINT32_MAX;
        if (s == UINT32_MAX || r->c > ss->rec[s].c)
            s = w;
    }
    return s;
}

/* Steps a READY decided now lands after the batch in hand (non-blocking). */
static uint32_t ss_late_steps(const eng_state_server_t *ss,
                              const ss_record_t *r)
{
    return ss->p.nonblocking ? (uint32_t)floor(r->rtt / r->c) : 0;
}

/* Worker w is READY when it is the slowest, or when the step it is about to
 * take (and, non-blocking, those a late READY lands in) would end after the
 * slowest's last step, less the slack. The slowest's current step started
 * when its latest query arrived; once READY it has planned - steps to go.
 * (Algorithm 2's "the slowest is READY" clause is this with nothing left:
 * here READY means "train the batch in hand, then aggregate", so the slowest
 * is READY from its first query and the time left decides.) */
static bool ss_ready(const eng_state_server_t *ss, uint32_t w, int64_t now)
{
    uint32_t s = ss_slowest(ss);
    if (s == UINT32_MAX || !ss->rec[s].started)
        return false;
    if (w == s)
        return true;
    const ss_record_t *rs = &ss->rec[s], *r = &ss->rec[w];
    double left = rs->ready ? rs->planned - rs->steps : 1;
    double rest = left * rs->c - (double)(now - rs->stamp_ns) / 1e9;
    double own = r->c * (1 + ss_late_steps(ss, r));
    return own + ss->p.epsilon * rs->c > rest;
}

strata_status_t eng_ss_query(eng_state_server_t *ss, const eng_ss_query_t *q,
                             eng_ss_decision_t *decision_out)
{
    strata_status_t st = ss_check_query(ss, q);
    if (st != STRATA_OK)
        return st;
    int64_t now = ss->p.clock(ss->p.clock_arg);
    ss_record_t *r = &ss->rec[q->worker];
    r->stamp_ns = now; /* heard from: it is not the one to expire */
    ss_expire_at(ss, now);
    if (q->round > ss->round)
        ss_begin_round(ss, q->round, now);
    r->c = q->step_seconds;
    r->rtt = q->rtt_seconds;
    r->steps = q->steps;
    r->known = true;
    r->started = true;
    if (!r->ready && ss_ready(ss, q->worker, now)) {
        r->ready = true;
        r->planned = q->steps + 1 + ss_late_steps(ss, r);
    }
    *decision_out = r->ready ? ENG_SS_READY : ENG_SS_NOT_READY;
    return STRATA_OK;
}

strata_status_t eng_ss_announce(eng_state_server_t *ss, uint32_t worker,
                                double step_seconds)
{
    eng_ss_query_t q = {worker, ss->round, 0, step_seconds, 0};
    strata_status_t st = ss_check_query(ss, &q);
    if (st != STRATA_OK)
        return st;
    ss_record_t *r = &ss->rec[worker];
    r->c = step_seconds;
    r->known = true;
    r->stamp_ns = ss->p.clock(ss->p.clock_arg);
    return STRATA_OK;
}

strata_status_t eng_ss_syncing(eng_state_server_t *ss, uint32_t worker,
                               uint64_t round)
{
    if (worker >= ss->p.workers || ss->rec[worker].dead) {
        util_error("state server: worker %" PRIu32 " %s", worker,
                   worker >= ss->p.workers ? "does not exist" : "was dropped");
        return worker >= ss->p.workers ? STRATA_ERR_INVALID : STRATA_ERR_PEER;
    }
    if (round == ss->round)
        ss->rec[worker].syncing = true;
    ss->rec[worker].stamp_ns = ss->p.clock(ss->p.clock_arg);
    return STRATA_OK;
}

bool eng_ss_must_reply(const eng_state_server_t *ss, eng_ss_decision_t decision)
{
    return !ss->p.nonblocking || decision == ENG_SS_READY;
}

bool eng_ss_is_live(const eng_state_server_t *ss, uint32_t worker)
{
    return worker < ss->p.workers && !ss->rec[worker].dead;
}

uint32_t eng_ss_live_count(const eng_state_server_t *ss)
{
    return ss->live;
}

uint64_t eng_ss_round(const eng_state_server_t *ss)
{
    return ss->round;
}

uint32_t eng_ss_planned_steps(const eng_state_server_t *ss, uint32_t worker)
{
    return worker < ss->p.workers ? ss->rec[worker].planned : 0;
}
