/*
 * Workers back in a running job: a process started again with the job's
 * settings and the rank of a worker the job dropped takes its place. The
 * coordinator admits it only in that place, and refuses anything else
 * naming why (the rank retries until STRATA_JOIN_TIMEOUT_MS, then fails
 * with that reason). Its first clock J is agreed with every aggregator
 * (REJOIN_ASK, REJOIN_AT, REJOIN: engine/agg_rejoin.c), one worker at a time
 * and never while a drop is, before it is welcomed with J: it then
 * connects to the aggregators, commits the layout every worker has, is
 * served the model of clock J, and trains on from there.
 *
 * Rounds (esync, fedavg) are clocks: the rejoiner syncs from round J on,
 * with the global model of J, and esync's State Server counts it live
 * again from then. Under gssp (GDTopK too) it comes back in its group,
 * whose clocks its own map to with the offset of its membership segment:
 * no rejoin is agreed while a regroup is, nor a regroup while a rejoin is
 * (the policy's holds_rejoin and rejoined), and the grouping counts it
 * again once it has reported its steps.
 */
#include "engine/coord.h"

#include <stdio.h>

#include "util/log.h"

void eng_coord_rejoin_open(strata_ctx_t *ctx)
{
    if (ctx->coord->ending || ctx->coord_listener)
        return;
    strata_status_t st =
        tp_listen(ctx->coord_tp, ctx->coord_bind, &ctx->coord_listener);
    if (st != STRATA_OK)
        util_warn("cannot listen again at %s for a dropped worker to come "
                  "back: %s",
                  ctx->coord_bind, strata_strerror(st));
    else
        util_debug("the coordinator listens again at %s", ctx->coord_bind);
}

void eng_coord_rejoin_close(strata_ctx_t *ctx, bool ending)
{
    eng_coord_t *c = ctx->coord;
    c->ending |= ending;
    for (int r = ctx->naggs; r < ctx->size && !c->ending; r++)
        if (c->by_rank[r] && c->by_rank[r]->dropped)
            return; /* it may still come back */
    if (ctx->coord_listener) {
        tp_listener_close(ctx->coord_listener);
        ctx->coord_listener = NULL;
        util_debug("the coordinator stops listening");
    }
}

/* Why the rank cannot take a place in the running job; NULL: it can. */
static const char *eng_rejoin_refusal(strata_ctx_t *ctx, int rank, char *buf,
                                      size_t cap)
{
    eng_coord_t *c = ctx->coord;
    eng_member_t *old = c->by_rank[rank];
    if (rank < ctx->naggs)
        snprintf(buf, cap,
                 "rank %d is an aggregator of this running job: only a "
                 "worker the job dropped can rejoin",
                 rank);
    else if (!old->dropped)
        snprintf(buf, cap,
                 "rank %d is still in the job (%s): only a worker the job "
                 "dropped can rejoin",
                 rank, old->bye ? "it finished" : "not dropped");
    else if (old->drop_queued || c->dropping == rank - ctx->naggs)
        snprintf(buf, cap,
                 "rank %d is being dropped: its place is free once every "
                 "aggregator agreed its last clock",
                 rank);
    else if (eng_fatal(ctx))
        snprintf(buf, cap, "the job has failed");
    else
        return NULL;
    return buf;
}

void eng_coord_rejoin_hello(strata_ctx_t *ctx, eng_member_t *m, int rank,
                            eng_rbuf_t *r)
{
    eng_coord_t *c = ctx->coord;
    char why[512];
    if (eng_rejoin_refusal(ctx, rank, why, sizeof(why))) {
        eng_coord_refuse(m, UTIL_LOG_WARN, why);
        return;
    }
    eng_member_t *old = c->by_rank[rank];
    m->peer.rank = rank;
    m->hello = true; /* its name, for the settings' message */
    if (!eng_coord_settings_match(ctx, m, r, why, sizeof(why))) {
        m->hello = false;
        eng_coord_refuse(m, UTIL_LOG_WARN, why);
        return;
    }
    unsigned naddrs = eng_get_u8(r); /* a worker listens nowhere */
    unsigned spare = eng_get_u8(r);  /* nor is it a spare */
    if (!eng_rbuf_ok(r) || naddrs != 0 || spare != 0) {
        m->hello = false;
        eng_coord_refuse(m, UTIL_LOG_WARN, "it sent a malformed HELLO");
        return;
    }
    m->rejoining = m->rejoin_queued = true;
    m->rejoin_from = old->drop_at;
    m->rejoin_shrunk = old->drop_from;
    c->by_rank[rank] = m;
    eng_live_watch(ctx, rank);
    util_warn("%s is back in the place of dropped %s; agreeing the clock it "
              "trains from",
              eng_member_name(m), eng_member_name(old));
    eng_coord_rejoin_next(ctx);
}

/* How long a rejoin waits for an aggregator that still takes the same
 * worker back from its previous rejoin before it asks again. */
#define ENG_REJOIN_RETRY_MS 50

static void eng_coord_rejoin_retry(strata_ctx_t *ctx)
{
    eng_coord_rejoin_next(ctx);
}

void eng_coord_rejoin_next(strata_ctx_t *ctx)
{
    eng_coord_t *c = ctx->coord;
    if (c->dropping >= 0 || c->joining >= 0 || eng_fatal(ctx) ||
        (eng_coord_policy(ctx)->holds_rejoin &&
         eng_coord_policy(ctx)->holds_rejoin(ctx)))
        return;
    for (int r = ctx->naggs; r < ctx->size; r++) {
        eng_member_t *m = c->by_rank[r];
        if (!m || !m->rejoin_queued)
            continue;
        m->rejoin_queued = false;
        c->joining = r - ctx->naggs;
        c->join_answers = 0;
        c->join_reached = c->join_any = 0;
        c->join_lags = false;
        unsigned char buf[16];
        eng_wbuf_t msg;
        eng_wbuf_init(&msg, buf, sizeof(buf), ENG_MSG_REJOIN_ASK);
        eng_put_u32(&msg, (uint32_t)c->joining);
        eng_coord_tell_aggs(ctx, &msg, "REJOIN_ASK");
        return;
    }
}

/* An aggregator still takes this rank back from its previous rejoin (a
 * partition there has not applied the pushes of the process before; under
 * gssp also those of the process just dropped, or a regroup's moves): not
 * now (REJOIN with J = 0 lets the aggregators go on), again a little later.
 * The new process waits for its WELCOME meanwhile. */
static void eng_coord_rejoin_later(strata_ctx_t *ctx, eng_member_t *v)
{
    eng_coord_t *c = ctx->coord;
    unsigned char buf[48];
    eng_wbuf_t msg;
    eng_wbuf_init(&msg, buf, sizeof(buf), ENG_MSG_REJOIN);
    eng_put_u32(&msg, (uint32_t)c->joining);
    eng_put_i64(&msg, v->rejoin_from);
    eng_put_i64(&msg, 0);
    eng_put_i64(&msg, v->rejoin_shrunk);
    eng_coord_tell_aggs(ctx, &msg, "REJOIN");
    if (!v->rejoin_waited)
        util_info("%s waits: an aggregator still takes its rank back from "
                  "its previous rejoin or drop",
                  eng_member_name(v));
    v->rejoin_waited = true;
    c->joining = -1;
    v->rejoin_queued = true;
    eng_coord_drop_next(ctx); /* whatever waited for it */
    ctx->rejoin_timer =
        (eng_timer_t){.at_ns = util_now_ns() + ENG_REJOIN_RETRY_MS * 1000000ull,
                      .fn = eng_coord_rejoin_retry};
}

/* Every aggregator answered: the rejoiner trains from past every clock
 * reached anywhere (and past its old boundary). */
void eng_coord_on_rejoin_at(strata_ctx_t *ctx, eng_member_t *m, eng_rbuf_t *r)
{
    eng_coord_t *c = ctx->coord;
    uint32_t w = eng_get_u32(r);
    int64_t reached = eng_get_i64(r);
    unsigned lags = eng_get_u8(r);
    int64_t any = eng_get_i64(r);
    if (!eng_rbuf_ok(r) || m->peer.rank >= ctx->naggs || c->joining < 0 ||
        w != (uint32_t)c->joining || reached < 0 || lags > 1 || any < 0) {
        eng_fail(ctx, STRATA_ERR_PROTO, "unexpected REJOIN_AT from %s",
                 eng_member_name(m));
        return;
    }
    c->join_reached = reached > c->join_reached ? reached : c->join_reached;
    c->join_any = any > c->join_any ? any : c->join_any;
    c->join_lags |= lags;
    if (++c->join_answers < eng_coord_naggs(ctx))
        return;
    eng_member_t *v = c->by_rank[ctx->naggs + (int)w];
    if (c->join_lags) {
        eng_coord_rejoin_later(ctx, v);
        return;
    }
    int64_t at =
        c->join_reached > v->rejoin_from ? c->join_reached : v->rejoin_from;
    at = at < 1 ? 1 : at;
    unsigned char buf[48];
    eng_wbuf_t msg;
    eng_wbuf_init(&msg, buf, sizeof(buf), ENG_MSG_REJOIN);
    eng_put_u32(&msg, w);
    eng_put_i64(&msg, v->rejoin_from);
    eng_put_i64(&msg, at);
    /* One more live from past every clock reached in any group: clocks of
     * a group ahead of its own were reduced with the count before. */
    eng_put_i64(&msg, v->rejoin_shrunk > c->join_any ? v->rejoin_shrunk
                                                     : c->join_any);
    eng_coord_tell_aggs(ctx, &msg, "REJOIN");
    c->joining = -1;
    v->rejoining = false;
    c->nbye--; /* it says BYE again */
    c->ndropped--;
    util_warn("worker %s rejoined: it trains from clock %lld; clocks %lld to "
              "%lld of its rank were lost; %d workers train on, the gradient "
              "scaled for them from clock %lld",
              eng_member_name(v), (long long)at, (long long)v->rejoin_from,
              (long long)at - 1, ctx->nworkers - c->ndropped, (long long)at);
    eng_launch_tell(&ctx->launch, "rejoined %d", v->peer.rank);
    if (c->ss && eng_ss_rejoin(c->ss, w) != STRATA_OK) {
        eng_fail(ctx, STRATA_ERR_STATE,
                 "the State Server cannot count %s again", eng_member_name(v));
        return;
    }
    if (v->rejoin_lost) { /* it went while its clock was agreed */
        eng_coord_drop_lost(ctx, v, v->drop_why);
    } else {
        eng_coord_send_roster(ctx, v, at);
        if (eng_coord_policy(ctx)->rejoined)
            eng_coord_policy(ctx)->rejoined(ctx, v);
    }
    eng_coord_drop_next(ctx);
    eng_coord_rejoin_next(ctx);
    eng_coord_rejoin_close(ctx, false);
}
