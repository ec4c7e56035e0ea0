/*
 * Workers dropped while the others go on, under every policy.
 *
 * An aggregator reduces a worker's push of clock c only once the worker said
 * that every write of c completed, at every aggregator (PUSHED). When the
 * coordinator loses a worker, it asks every aggregator how far the worker
 * got (DROP_ASK): each stops reducing and answers with the newest clock the
 * worker said so of and the newest clock its trackers reached (DROP_AT).
 * The coordinator's DROP then names
 *   B  the worker's boundary, one past the newest PUSHED anywhere: every
 *      aggregator holds each of its pushes before B in full, and none
 *      applied one from B on. Its pushes before B count, none after.
 *   K  the group clock from which one fewer worker is live (the gradient
 *      scale): B, or past every clock reached anywhere if that is later, so
 *      that no aggregator reduced a clock from K on with the old count and
 *      every one reduces them with the new (under gssp, also past the
 *      group clock of its last counted push, which every aggregator maps
 *      alike).
 * Every aggregator thus applies the same pushes with the same scale, and
 * the rounds in flight complete with the workers left.
 */
#include "engine/aggregator.h"
#include "util/log.h"

/* Whether every partition here holds worker w's push of clock c. */
static bool eng_agg_holds(const eng_agg_t *a, uint32_t w, int64_t c)
{
    for (uint32_t i = 0; i < a->nparts; i++)
        if (a->parts[i].arrived[w] < c)
            return false;
    return true;
}

static void eng_agg_announced(strata_ctx_t *ctx, uint32_t w, int64_t c)
{
    ctx->agg->pushed[w] = c;
    for (uint32_t i = 0; i < ctx->agg->nparts; i++)
        eng_try_reduce(ctx, i);
}

bool eng_agg_on_pushed(strata_ctx_t *ctx, eng_wlink_t *l, eng_rbuf_t *r)
{
    eng_agg_t *a = ctx->agg;
    int64_t c = eng_get_i64(r);
    /* Its writes precede it on the connection. */
    if (!eng_rbuf_ok(r) || c != a->pushed[l->widx] + 1 ||
        !eng_agg_holds(a, (uint32_t)l->widx, c))
        return false;
    eng_agg_announced(ctx, (uint32_t)l->widx, c);
    return true;
}

/* A push that goes to this aggregator alone needs no PUSHED: the worker
 * cannot have written another aggregator any part of it, so once every
 * partition landed here, all of it landed everywhere. That saves a
 * message and, on a sleeping aggregator, a wake-up per push for the small
 * models that are one partition. */
bool eng_agg_landed(strata_ctx_t *ctx, uint32_t w, int64_t c)
{
    eng_agg_t *a = ctx->agg;
    if (!a->one_holder || c != a->pushed[w] + 1 || !eng_agg_holds(a, w, c))
        return false;
    eng_agg_announced(ctx, w, c);
    return true;
}

void eng_agg_lost(strata_ctx_t *ctx, eng_wlink_t *l, const char *why)
{
    /* Before training the job cannot go on without it. */
    if (!ctx->agg->layout) {
        eng_fail_soon(ctx, STRATA_ERR_PEER,
                      "%s disconnected before finalizing (killed, or its "
                      "network failed): %s",
                      eng_peer_name(&l->peer), why);
        return;
    }
    /* The coordinator sees it too (its connection, or its silence) and
     * either drops it (DROP) or fails the job (ABORT), within the timeout;
     * until then its clocks wait. */
    util_info("%s disconnected before finalizing: %s; waiting for the "
              "coordinator to drop it",
              eng_peer_name(&l->peer), why);
    eng_wlink_forget(ctx, l);
}

static strata_status_t eng_on_drop_ask(strata_ctx_t *ctx, eng_rbuf_t *r)
{
    eng_agg_t *a = ctx->agg;
    uint32_t w = eng_get_u32(r);
    if (!eng_rbuf_ok(r) || w >= (uint32_t)ctx->nworkers)
        return STRATA_ERR_PROTO;
    a->held++;
    unsigned char buf[32];
    eng_wbuf_t m;
    eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_DROP_AT);
    eng_put_u32(&m, w);
    eng_put_i64(&m, a->pushed[w]);
    eng_put_i64(&m, eng_agg_reached(ctx));
    return eng_send(&ctx->coord_peer, &m, NULL);
}

int64_t eng_agg_shrink_clock(const eng_agg_t *a, uint32_t w, int64_t until,
                             int64_t from)
{
    const eng_segment_t *s = eng_members_segment(
        a->members, w,
        eng_members_find(a->members, w, until > 0 ? until - 1 : 0));
    return until + s->offset > from ? until + s->offset : from;
}

static strata_status_t eng_on_drop(strata_ctx_t *ctx, eng_rbuf_t *r)
{
    eng_agg_t *a = ctx->agg;
    uint32_t w = eng_get_u32(r);
    int64_t until = eng_get_i64(r), from = eng_get_i64(r);
    if (!eng_rbuf_ok(r) || w >= (uint32_t)ctx->nworkers || until < 0 ||
        a->held == 0)
        return STRATA_ERR_PROTO;
    a->held--;
    from = eng_agg_shrink_clock(a, w, until, from);
    strata_status_t st = eng_agg_live_note(a, from, false);
    if (st != STRATA_OK)
        return st;
    /* Nothing more is served to it. What it wrote before its boundary may
     * still be on the way: its connection stays until it closes (a silent
     * one, until this aggregator finalizes); what it writes from its
     * boundary on is not taken. */
    eng_wlink_t *l = a->links[w];
    if (l && !l->left) {
        l->left = true;
        l->peer.left = true;
        eng_wlink_forget(ctx, l);
    }
    util_info("worker rank %d is out from its clock %lld on; %u workers "
              "live from clock %lld",
              ctx->naggs + (int)w, (long long)until, eng_agg_live_at(ctx, from),
              (long long)from);
    atomic_fetch_add_explicit(&a->dropped_workers, 1, memory_order_relaxed);
    if (!a->dropped[w])
        eng_agg_worker_out(ctx, (int)w, until);
    eng_agg_progress(ctx);
    return STRATA_OK;
}

strata_status_t eng_agg_drop_msg(strata_ctx_t *ctx, unsigned type,
                                 eng_rbuf_t *r)
{
    if (type == ENG_MSG_DROP_ASK)
        return eng_on_drop_ask(ctx, r);
    if (type == ENG_MSG_DROP)
        return eng_on_drop(ctx, r);
    return STRATA_ERR_PROTO;
}
