/*
 * Dropping workers, under every policy: a worker that dies or falls silent
 * once training started is dropped while at least STRATA_MIN_WORKERS
 * remain, and the others go on. Its boundary is agreed with every
 * aggregator (engine/agg_drop.c): each is asked how far the worker got
 * (DROP_ASK, answered by DROP_AT), then told from which of its clocks it is
 * out and from which clock one fewer worker is live (DROP). One drop is
 * agreed at a time.
 *
 * The coordinator's part of esync: the ESync State Server answers workers'
 * queries (engine/state_server.h decides), and drops those it hears
 * nothing from.
 */
#include <inttypes.h>

#include "engine/coord.h"
#include "util/log.h"

static void eng_coord_ss_free(strata_ctx_t *ctx)
{
    eng_ss_destroy(ctx->coord->ss);
    ctx->coord->ss = NULL;
}

static void eng_coord_tick(strata_ctx_t *ctx);

/* How often silent workers are looked for: often next to the timeout. */
static uint64_t eng_tick_ns(const strata_ctx_t *ctx)
{
    uint64_t ns = (uint64_t)ctx->timeout_ms * 1000000u / 8;
    return ns < 10000000u ? 10000000u : ns;
}

/* The State Server starts with training. */
static void eng_coord_ss_start(strata_ctx_t *ctx)
{
    if (ctx->coord->ss)
        return;
    eng_ss_params_t p;
    eng_ss_params_from_config(ctx->cfg, (uint32_t)ctx->nworkers, &p);
    strata_status_t st = eng_ss_create(&p, &ctx->coord->ss);
    if (st != STRATA_OK) {
        eng_fail(ctx, st, "cannot start the State Server: %s",
                 strata_strerror(st));
        return;
    }
    ctx->tick_timer = (eng_timer_t){.at_ns = util_now_ns() + eng_tick_ns(ctx),
                                    .fn = eng_coord_tick};
}

/* ---- dropping ---- */

void eng_coord_tell_aggs(strata_ctx_t *ctx, eng_wbuf_t *msg, const char *what)
{
    for (int a = 0; a < ctx->naggs; a++) {
        eng_member_t *agg = ctx->coord->by_rank[a];
        strata_status_t st =
            agg && agg->peer.ep ? eng_send(&agg->peer, msg, NULL) : STRATA_OK;
        if (st != STRATA_OK)
            eng_fail(ctx, st, "cannot send %s to aggregator %d: %s", what, a,
                     strata_strerror(st));
    }
}

bool eng_coord_resume_clocks(strata_ctx_t *ctx, int64_t from, int64_t *at,
                             int64_t *lo_out, int64_t *hi_out)
{
    const eng_coord_policy_t *p = eng_coord_policy(ctx);
    if (p->takeover && p->takeover(ctx, from, at) != STRATA_OK)
        return false;
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (int w = 0; w < ctx->nworkers; w++) {
        const eng_member_t *m = ctx->coord->by_rank[ctx->naggs + w];
        if (!p->takeover)
            at[w] = from;
        if (!m || m->bye || m->dropped)
            continue;
        lo = at[w] < lo ? at[w] : lo;
        hi = at[w] > hi ? at[w] : hi;
    }
    *lo_out = lo == INT64_MAX ? from : lo;
    *hi_out = hi == INT64_MIN ? from : hi;
    return true;
}

void eng_coord_drop_next(strata_ctx_t *ctx)
{
    eng_coord_t *c = ctx->coord;
    if (c->dropping >= 0 || c->joining >= 0 || eng_fatal(ctx))
        return;
    for (int r = ctx->naggs; r < ctx->size; r++) {
        eng_member_t *m = c->by_rank[r];
        if (!m || !m->drop_queued)
            continue;
        m->drop_queued = false;
        c->dropping = r - ctx->naggs;
        c->drop_answers = 0;
        c->drop_pushed = -1;
        c->drop_reached = 0;
        unsigned char buf[16];
        eng_wbuf_t msg;
        eng_wbuf_init(&msg, buf, sizeof(buf), ENG_MSG_DROP_ASK);
        eng_put_u32(&msg, (uint32_t)c->dropping);
        eng_coord_tell_aggs(ctx, &msg, "DROP_ASK");
        return;
    }
}

static void eng_coord_drop(strata_ctx_t *ctx, eng_member_t *m, const char *why)
{
    eng_coord_t *c = ctx->coord;
    uint32_t w = (uint32_t)(m->peer.rank - ctx->naggs);
    util_warn("dropping worker %s: %s; the %d others go on without it",
              eng_member_name(m), why, ctx->nworkers - c->ndropped - 1);
    m->dropped = true;
    snprintf(m->drop_why, sizeof(m->drop_why), "%s", why);
    c->nbye++; /* it will not say BYE */
    c->ndropped++;
    eng_live_unwatch(ctx, m->peer.rank);
    eng_launch_tell(&ctx->launch, "dropped %d", m->peer.rank);
    if (m->peer.ep) /* silent, not gone: it reads this when it wakes */
        eng_coord_send_dropped(m);
    if (c->ss && eng_ss_is_live(c->ss, w))
        eng_ss_drop(c->ss, w);
    m->drop_queued = true;
    eng_coord_drop_next(ctx);
    eng_coord_rejoin_open(ctx);
}

bool eng_coord_drop_lost(strata_ctx_t *ctx, eng_member_t *m, const char *why)
{
    if (m->peer.rank < ctx->naggs || !ctx->coord->layout_sent)
        return false;
    if (m->rejoining) { /* dropped once its clock is agreed */
        m->rejoin_lost = true;
        snprintf(m->drop_why, sizeof(m->drop_why), "%s", why);
        return true;
    }
    int left = ctx->nworkers - ctx->coord->ndropped - 1;
    int64_t min = eng_config_int(ctx->cfg, ENG_CFG_MIN_WORKERS);
    if (left < min) {
        eng_fail(ctx, STRATA_ERR_PEER,
                 "worker %s %s; the job cannot go on with %d workers "
                 "(STRATA_MIN_WORKERS=%lld)",
                 eng_member_name(m), why, left, (long long)min);
        return true;
    }
    eng_coord_drop(ctx, m, why);
    return true;
}

/* Every aggregator answered: the worker's clocks up to the newest one any
 * of them was told landed everywhere count, and one fewer worker is live
 * from past that and past every clock any of them reached. */
void eng_coord_on_drop_at(strata_ctx_t *ctx, eng_member_t *m, eng_rbuf_t *r)
{
    eng_coord_t *c = ctx->coord;
    uint32_t w = eng_get_u32(r);
    int64_t pushed = eng_get_i64(r), reached = eng_get_i64(r);
    if (!eng_rbuf_ok(r) || m->peer.rank >= ctx->naggs || c->dropping < 0 ||
        w != (uint32_t)c->dropping || pushed < -1 || reached < 0) {
        eng_fail(ctx, STRATA_ERR_PROTO, "unexpected DROP_AT from %s",
                 eng_member_name(m));
        return;
    }
    c->drop_pushed = pushed > c->drop_pushed ? pushed : c->drop_pushed;
    c->drop_reached = reached > c->drop_reached ? reached : c->drop_reached;
    if (++c->drop_answers < eng_coord_naggs(ctx))
        return;
    eng_member_t *v = c->by_rank[ctx->naggs + (int)w];
    v->drop_at = c->drop_pushed + 1;
    /* Its last clock still counts it live, where none was reduced yet. */
    int64_t from = v->drop_at > c->drop_reached ? v->drop_at : c->drop_reached;
    v->drop_from = from;
    unsigned char buf[32];
    eng_wbuf_t msg;
    eng_wbuf_init(&msg, buf, sizeof(buf), ENG_MSG_DROP);
    eng_put_u32(&msg, w);
    eng_put_i64(&msg, v->drop_at);
    eng_put_i64(&msg, from);
    eng_coord_tell_aggs(ctx, &msg, "DROP");
    util_warn("worker %s dropped: its first %lld clocks count, none from "
              "clock %lld on (lost); %d workers train on, the gradient "
              "scaled for them from clock %lld",
              eng_member_name(v), (long long)v->drop_at, (long long)v->drop_at,
              ctx->nworkers - c->ndropped, (long long)from);
    c->dropping = -1;
    if (eng_coord_policy(ctx)->left)
        eng_coord_policy(ctx)->left(ctx, v);
    eng_coord_drop_next(ctx);
    eng_coord_rejoin_next(ctx);
}

/* Periodic work of the policies (dropping silent workers). */
static void eng_coord_tick(strata_ctx_t *ctx)
{
    eng_coord_t *c = ctx->coord;
    if (!c || !c->ss || eng_fatal(ctx))
        return;
    eng_ss_expire(c->ss);
    for (int r = ctx->naggs; r < ctx->size; r++) {
        eng_member_t *m = c->by_rank[r];
        if (m && !m->dropped && !m->bye && !m->rejoining &&
            !eng_ss_is_live(c->ss, (uint32_t)(r - ctx->naggs)))
            if (!eng_coord_drop_lost(ctx, m,
                                     "silent for longer than "
                                     "STRATA_TIMEOUT_MS plus its step"))
                return;
    }
    ctx->tick_timer.at_ns = util_now_ns() + eng_tick_ns(ctx);
}

/* ---- the State Server ---- */

static void eng_answer(strata_ctx_t *ctx, eng_member_t *m, uint32_t seq,
                       uint64_t round, eng_ss_decision_t d, strata_status_t st,
                       uint64_t echo)
{
    unsigned char buf[64];
    eng_wbuf_t msg;
    eng_wbuf_init(&msg, buf, sizeof(buf), ENG_MSG_ANSWER);
    eng_put_u32(&msg, seq);
    eng_put_u64(&msg, round);
    eng_put_u8(&msg, (uint8_t)d);
    eng_put_u16(&msg, (uint16_t)(int16_t)st);
    eng_put_u64(&msg, echo);
    /* A worker may finalize before the answer to its last query (the one
     * for a round it will not take) arrives: a worker lost without BYE
     * fails the job through its disconnect. */
    strata_status_t sst = eng_send(&m->peer, &msg, NULL);
    if (sst != STRATA_OK && sst != STRATA_ERR_PEER) {
        eng_fail(ctx, sst, "cannot answer %s: %s", eng_member_name(m),
                 strata_strerror(sst));
    }
}

static void eng_coord_on_query(strata_ctx_t *ctx, eng_member_t *m,
                               eng_rbuf_t *r)
{
    eng_coord_t *c = ctx->coord;
    eng_ss_query_t q = {.worker = (uint32_t)(m->peer.rank - ctx->naggs)};
    uint32_t seq = eng_get_u32(r);
    q.round = eng_get_u64(r);
    q.steps = eng_get_u32(r);
    q.step_seconds = eng_get_f64(r);
    q.rtt_seconds = eng_get_f64(r);
    uint64_t echo = eng_get_u64(r);
    bool syncing = eng_get_u8(r) != 0;
    if (!eng_rbuf_ok(r) || !c->ss || m->peer.rank < ctx->naggs) {
        eng_fail(ctx, STRATA_ERR_PROTO, "unexpected or malformed QUERY from %s",
                 eng_member_name(m));
        return;
    }
    if (m->dropped) {
        eng_answer(ctx, m, seq, q.round, ENG_SS_NOT_READY, STRATA_ERR_PEER,
                   echo);
        return;
    }
    if (syncing) { /* no answer: it aggregates */
        eng_ss_syncing(c->ss, q.worker, q.round);
        return;
    }
    eng_ss_decision_t d = ENG_SS_NOT_READY;
    strata_status_t st = STRATA_OK;
    /* A query sent just before another worker began the next round (non-
     * blocking mode): moot, its sender is aggregating. */
    if (q.round >= eng_ss_round(c->ss))
        st = eng_ss_query(c->ss, &q, &d);
    if (st != STRATA_OK || eng_ss_must_reply(c->ss, d))
        eng_answer(ctx, m, seq, q.round, d, st, echo);
}

static bool eng_coord_esync_msg(strata_ctx_t *ctx, eng_member_t *m,
                                unsigned type, eng_rbuf_t *r)
{
    if (type != ENG_MSG_QUERY)
        return false;
    eng_coord_on_query(ctx, m, r);
    return true;
}

const eng_coord_policy_t eng_coord_esync = {
    .free = eng_coord_ss_free,
    .start = eng_coord_ss_start,
    .on_msg = eng_coord_esync_msg,
};
