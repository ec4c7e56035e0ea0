/*
 * A dropped worker back in the job: a new process started with the job's
 * settings and the rank of a worker the job dropped (the coordinator admits
 * it, engine/coord_rejoin.c).
 *
 * The coordinator asks every aggregator how far it got (REJOIN_ASK): each
 * stops reducing and answers with the newest clock its trackers reached
 * (REJOIN_AT). Its REJOIN then names
 *   B  the worker's boundary when it was dropped: its old process's pushes
 *      before B count, as they did;
 *   J  the clock the new process starts at: past every clock reached
 *      anywhere, so no aggregator reduced a clock from J on without it and
 *      every one reduces them with it, and with one more worker live (the
 *      gradient scale).
 * The old process's clocks in [B, J) never count. On each partition the
 * worker rejoins the tracker at J once every counted push of its old
 * process is applied there, and its first pull is the model of clock J.
 * Each worker has one such gap: while a partition here still waits to take
 * it back, REJOIN_AT says so (lags) and the coordinator answers REJOIN with
 * J = 0, "not now", and asks again later.
 *
 * Under gssp the worker comes back in its membership segment (its group
 * and clock offset, engine/members.h), which no regroup changed while it
 * was out: its clock J is its group's clock J + offset. Groups' clocks run
 * apart, so "reached" is its group's: the newest clock of that group any
 * tracker reached, any member's tracker clock in it, any member's segment
 * start in it, and the trackers' minimum (the tracker takes nobody below
 * it). A rejoin waits (lags) while a partition still has a regroup's move
 * to make or the worker's old pushes to apply, so the tracker takes it
 * back at once, while reductions are held. The live count (the gradient
 * scale) is one per clock for every group, so one more worker is live
 * from past every clock reached in any group and from the clock its drop
 * took one off, and from J + offset: no aggregator reduced such a clock
 * with the count before, none counts it twice. Its own first clocks may
 * so still be scaled as without it while its group catches up.
 */
#include "engine/aggregator.h"
#include "util/alloc.h"
#include "util/log.h"

strata_status_t eng_agg_live_note(eng_agg_t *a, int64_t clock, bool grow)
{
    int64_t **at = grow ? &a->grow_at : &a->shrink_at;
    uint32_t *n = grow ? &a->ngrow : &a->nshrink;
    uint32_t *cap = grow ? &a->grow_cap : &a->shrink_cap;
    if (*n == *cap) {
        uint32_t c = *cap ? 2 * *cap : 8;
        int64_t *p = util_realloc(*at, c * sizeof(**at));
        if (!p) {
            util_error("out of memory noting a change of the live workers");
            return STRATA_ERR_NOMEM;
        }
        *at = p;
        *cap = c;
    }
    (*at)[(*n)++] = clock;
    return STRATA_OK;
}

bool eng_agg_rejoin_early(strata_ctx_t *ctx, eng_wlink_t *l, int w)
{
    eng_agg_t *a = ctx->agg;
    if (!a->layout || !a->dropped[w] || a->early[w])
        return false;
    a->early[w] = l; /* its JOIN is taken with the REJOIN naming it */
    return true;
}

/* Worker w's membership segment now (the one it comes back in). */
static const eng_segment_t *eng_rejoin_segment(const eng_agg_t *a, uint32_t w)
{
    return eng_members_current(a->members, w);
}

strata_status_t eng_agg_rejoin_part(strata_ctx_t *ctx, eng_apart_t *ap,
                                    uint32_t w)
{
    eng_agg_t *a = ctx->agg;
    const eng_segment_t *s = eng_rejoin_segment(a, w);
    ap->rejoin[w] = false;
    ap->retired[w] = false;
    /* Every clock before J is done for it here: its counted pushes are
     * applied, the gap's never count. Dropped again before it pushed, it
     * retires at once. */
    ap->applied[w] = a->gap_hi[w] - 1;
    return eng_tracker_rejoin_worker(ap->tracker, w, s->group,
                                     a->gap_hi[w] + s->offset);
}

/* gssp: groups' clocks run apart, and regroups move workers. */
static bool eng_agg_grouped(const strata_ctx_t *ctx)
{
    return ctx->policy->ops->agg == &eng_agg_gssp;
}

/* Whether a partition still waits to take worker w back after its last
 * rejoin (its old process's counted pushes not all applied there): one
 * gap of lost clocks is kept per worker, so the next rejoin waits. Under
 * gssp also while a partition has a regroup's tracker move to make or the
 * old process's pushes to apply (see the top). */
static bool eng_agg_rejoin_lags(strata_ctx_t *ctx, uint32_t w)
{
    const eng_agg_t *a = ctx->agg;
    for (uint32_t i = 0; i < a->nparts; i++)
        if (a->parts[i].rejoin[w] ||
            (eng_agg_grouped(ctx) &&
             (a->parts[i].moves > 0 || !a->parts[i].retired[w])))
            return true;
    return false;
}

static void eng_raise(int64_t *v, int64_t to)
{
    if (to != ENG_TRACKER_INF && to > *v)
        *v = to;
}

/* The newest clock reached that worker w's first clock back must pass, in
 * its own clocks: under gssp its group's (see the top), else any. */
static int64_t eng_agg_rejoin_reached(strata_ctx_t *ctx, uint32_t w)
{
    eng_agg_t *a = ctx->agg;
    if (!eng_agg_grouped(ctx))
        return eng_agg_reached(ctx);
    const eng_segment_t *s = eng_rejoin_segment(a, w);
    uint32_t nw = (uint32_t)ctx->nworkers;
    int64_t reached = 0;
    for (uint32_t v = 0; v < nw; v++) {
        const eng_segment_t *sv = eng_members_current(a->members, v);
        if (sv->group == s->group)
            eng_raise(&reached, sv->start + sv->offset);
    }
    for (uint32_t i = 0; i < a->nparts; i++) {
        const eng_tracker_t *t = a->parts[i].tracker;
        eng_raise(&reached, eng_tracker_group_clock(t, s->group));
        eng_raise(&reached, eng_tracker_min_clock(t));
        for (uint32_t v = 0; v < nw; v++)
            if (eng_tracker_group_of(t, v) == s->group)
                eng_raise(&reached, eng_tracker_worker_clock(t, v));
    }
    return reached > s->offset ? reached - s->offset : 0;
}

static strata_status_t eng_on_rejoin_ask(strata_ctx_t *ctx, eng_rbuf_t *r)
{
    eng_agg_t *a = ctx->agg;
    uint32_t w = eng_get_u32(r);
    if (!eng_rbuf_ok(r) || w >= (uint32_t)ctx->nworkers || !a->dropped[w])
        return STRATA_ERR_PROTO;
    a->held++;
    unsigned char buf[32];
    eng_wbuf_t m;
    eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_REJOIN_AT);
    eng_put_u32(&m, w);
    eng_put_i64(&m, eng_agg_rejoin_reached(ctx, w));
    eng_put_u8(&m, eng_agg_rejoin_lags(ctx, w));
    eng_put_i64(&m, eng_agg_reached(ctx));
    return eng_send(&ctx->coord_peer, &m, NULL);
}

/* The worker's state as if it had pushed every clock before J. */
static strata_status_t eng_rejoin_parts(strata_ctx_t *ctx, uint32_t w,
                                        int64_t at)
{
    eng_agg_t *a = ctx->agg;
    for (uint32_t i = 0; i < a->nparts; i++) {
        eng_apart_t *ap = &a->parts[i];
        ap->arrived[w] = at - 1;
        ap->want[w] = at;
        ap->served[w] = ctx->policy->sum_only ? at : at - 1;
        if (!ap->retired[w]) { /* once its counted pushes are applied */
            ap->rejoin[w] = true;
            continue;
        }
        strata_status_t st = eng_agg_rejoin_part(ctx, ap, w);
        if (st != STRATA_OK)
            return st;
    }
    return STRATA_OK;
}

static strata_status_t eng_on_rejoin(strata_ctx_t *ctx, eng_rbuf_t *r)
{
    eng_agg_t *a = ctx->agg;
    uint32_t w = eng_get_u32(r);
    int64_t from = eng_get_i64(r), at = eng_get_i64(r);
    int64_t live = eng_get_i64(r); /* one more live from at least this */
    if (eng_rbuf_ok(r) && w < (uint32_t)ctx->nworkers && a->dropped[w] &&
        a->held > 0 && at == 0) { /* not now: an aggregator still lags */
        a->held--;
        eng_agg_progress(ctx);
        return STRATA_OK;
    }
    if (!eng_rbuf_ok(r) || w >= (uint32_t)ctx->nworkers || !a->dropped[w] ||
        a->held == 0 || from < 0 || at < from || at < 1 || live < 0 ||
        from != a->until[w] || eng_agg_rejoin_lags(ctx, w))
        return STRATA_ERR_PROTO;
    a->held--;
    int64_t grow = eng_agg_shrink_clock(a, w, from, live);
    int64_t back = at + eng_rejoin_segment(a, w)->offset;
    strata_status_t st = eng_agg_live_note(a, back > grow ? back : grow, true);
    if (st != STRATA_OK)
        return st;
    a->gap_lo[w] = from;
    a->gap_hi[w] = at;
    a->until[w] = INT64_MAX;
    a->pushed[w] = at - 1;
    a->dropped[w] = false;
    a->ngone--;
    a->prev[w] = a->links[w]; /* NULL: its last process never joined here */
    a->njoined -= a->links[w] != NULL;
    a->links[w] = NULL;
    st = eng_rejoin_parts(ctx, w, at);
    if (st != STRATA_OK)
        return st;
    util_info("worker rank %d is back from clock %lld on (its clocks %lld to "
              "%lld do not count) in group %u at its clock %lld; %u workers "
              "live from clock %lld",
              ctx->naggs + (int)w, (long long)at, (long long)from,
              (long long)at - 1, eng_rejoin_segment(a, w)->group,
              (long long)back, eng_agg_live_at(ctx, back > grow ? back : grow),
              (long long)(back > grow ? back : grow));
    eng_wlink_t *l = a->early[w];
    a->early[w] = NULL;
    if (l)
        eng_agg_join(ctx, l, (int)w);
    eng_agg_progress(ctx);
    return STRATA_OK;
}

strata_status_t eng_agg_rejoin_msg(strata_ctx_t *ctx, unsigned type,
                                   eng_rbuf_t *r)
{
    if (type == ENG_MSG_REJOIN_ASK)
        return eng_on_rejoin_ask(ctx, r);
    if (type == ENG_MSG_REJOIN)
        return eng_on_rejoin(ctx, r);
    return STRATA_ERR_PROTO;
}
