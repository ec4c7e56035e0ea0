/*
 * When the aggregator reduces, and what pulls it then serves.
 *
 * Synchronous groups (bsp, ssp, asp, gssp with intra 0, esync, fedavg): group
 * g's next clock c on a partition is complete once every member of (g, c) —
 * the workers whose membership segment maps one of their pushes to g's clock
 * c (engine/members.h), before the clock a dropped one is out from — has
 * landed that push and said that it landed everywhere (PUSHED). Their slots
 * are reduced in one pass, the update applied with the policy's scale, and
 * the tracker advances the group.
 *
 * Apply on arrival (gssp with intra > 0): each worker's next push is applied
 * alone as soon as it lands, and the tracker advances the worker.
 *
 * Regrouping: a worker's move into its next segment is made on a partition's
 * tracker once its last push of the previous segment is applied there, and
 * its pushes of the new segment wait for that move; the new group cannot
 * complete the joining clock without it, so nothing is lost or applied
 * twice whichever partition gets there first.
 */
#include <string.h>

#include "engine/aggregator.h"
#include "util/log.h"

/* The source of worker w's push of worker clock wc. */
static eng_src_t eng_src_of(const eng_agg_t *a, const eng_apart_t *ap,
                            uint32_t w, int64_t wc)
{
    return (eng_src_t){.p = eng_src_addr(a, eng_agg_src_link(a, w, wc),
                                         (uint32_t)(ap - a->parts), wc),
                       .nsparse = ap->nsparse[2 * w + (uint32_t)(wc & 1)]};
}

/* The local steps behind worker w's deltas of clock wc; 0 until its ROUND
 * message has come (it precedes the writes on the connection). */
static uint32_t eng_steps_of(const eng_agg_t *a, uint32_t w, int64_t wc)
{
    const eng_wlink_t *l = eng_agg_src_link(a, w, wc);
    return l && l->round_clock[wc & 1] == wc ? l->round_steps[wc & 1] : 0;
}

typedef struct eng_unit {
    int64_t clock;  /* the group's (or, on arrival, the worker's) clock */
    size_t n;       /* sources in a->srcs */
    uint32_t size;  /* members of (g, clock) */
    uint64_t steps; /* total local steps of the sources */
} eng_unit_t;

uint32_t eng_agg_live_at(const strata_ctx_t *ctx, int64_t clock)
{
    const eng_agg_t *a = ctx->agg;
    uint32_t live = (uint32_t)ctx->nworkers;
    for (uint32_t k = 0; k < a->nshrink; k++)
        live -= a->shrink_at[k] <= clock;
    for (uint32_t k = 0; k < a->ngrow; k++)
        live += a->grow_at[k] <= clock;
    return live;
}

/* Whether worker w's push of clock wc may be reduced: landed here, and
 * landed everywhere (PUSHED, or a drop's boundary says it counts) when
 * workers may be dropped. A
 * counted push of a worker whose connection is gone that never landed is
 * lost: the job fails naming it. */
static bool eng_push_ready(strata_ctx_t *ctx, const eng_apart_t *ap, uint32_t w,
                           int64_t wc, bool staging)
{
    eng_agg_t *a = ctx->agg;
    if (staging) /* landed here, from a worker in the job */
        return ap->arrived[w] >= wc && a->until[w] == INT64_MAX;
    bool out = a->until[w] != INT64_MAX && wc < a->until[w];
    if (ap->arrived[w] >= wc)
        return out || !a->drops || a->pushed[w] >= wc;
    if (out && (!a->links[w] || !a->links[w]->peer.ep))
        eng_fail(ctx, STRATA_ERR_PEER,
                 "worker rank %d is out of the job from its clock %lld on, "
                 "but its push of clock %lld for partition %u never landed "
                 "here",
                 ctx->naggs + (int)w, (long long)a->until[w], (long long)wc,
                 ap->index);
    return false;
}

/* Remember whose pushes a unit applied (retiring needs it). */
static void eng_add_src(eng_agg_t *a, const eng_apart_t *ap, size_t k,
                        uint32_t w, int64_t wc)
{
    a->srcs[k] = eng_src_of(a, ap, w, wc);
    a->src_w[k] = w;
    a->src_wc[k] = wc;
}

/* Group g's next clock on the partition, if every live member landed it
 * (and it counts; with `staging`, before that is known). */
static bool eng_group_ready(strata_ctx_t *ctx, eng_apart_t *ap, uint32_t g,
                            eng_unit_t *u, bool staging)
{
    eng_agg_t *a = ctx->agg;
    bool by_steps = ctx->policy->weight_by_steps; /* rounds only */
    int64_t c = eng_tracker_group_clock(ap->tracker, g);
    if (c == ENG_TRACKER_INF) /* every member was dropped */
        return false;
    *u = (eng_unit_t){.clock = c};
    uint32_t nmem;
    const uint32_t *mem = eng_members_of(a->members, g, &nmem);
    for (uint32_t k = 0; k < nmem; k++) {
        uint32_t w = mem[k], seg;
        int64_t wc;
        if (!eng_members_at(a->members, w, g, c, &seg, &wc) ||
            !eng_agg_counts(a, w, wc))
            continue;
        u->size++;
        uint32_t steps = by_steps ? eng_steps_of(a, w, wc) : 0;
        if (!eng_push_ready(ctx, ap, w, wc, staging) ||
            (ap->seg_at[w] < seg && !ap->retired[w]) ||
            (by_steps && steps == 0))
            return false;
        eng_add_src(a, ap, u->n++, w, wc);
        u->steps += steps;
    }
    return u->n > 0;
}

/* Worker w's next push, if it landed and belongs to the segment its tracker
 * move has reached (apply on arrival). */
static bool eng_worker_ready(strata_ctx_t *ctx, eng_apart_t *ap, uint32_t w,
                             eng_unit_t *u)
{
    eng_agg_t *a = ctx->agg;
    if (ap->retired[w])
        return false;
    uint32_t i = ap->seg_at[w];
    const eng_segment_t *s = eng_members_segment(a->members, w, i);
    int64_t tc = eng_tracker_worker_clock(ap->tracker, w);
    int64_t wc = tc - s->offset;
    if (!eng_agg_counts(a, w, wc) || !eng_push_ready(ctx, ap, w, wc, false) ||
        (i + 1 < eng_members_nsegments(a->members, w) &&
         wc >= eng_members_segment(a->members, w, i + 1)->start))
        return false;
    *u = (eng_unit_t){.clock = tc, .n = 1, .size = 1};
    eng_add_src(a, ap, 0, w, wc);
    if (ctx->policy->scale_by_group) {
        uint32_t nmem, seg;
        int64_t other;
        const uint32_t *mem = eng_members_of(a->members, s->group, &nmem);
        u->size = 0;
        for (uint32_t k = 0; k < nmem; k++)
            u->size += eng_members_at(a->members, mem[k], s->group, tc, &seg,
                                      &other) &&
                       eng_agg_counts(a, mem[k], other);
    }
    return true;
}

/* What the unit's sum is multiplied by. */
static double eng_unit_scale(strata_ctx_t *ctx, const eng_unit_t *u,
                             uint64_t staleness)
{
    return eng_policy_scale(ctx->policy, eng_agg_live_at(ctx, u->clock),
                            u->size, u->n, u->steps, staleness);
}

/* Reduce the unit's sources into the partition and advance the tracker: the
 * group g, or with `worker` >= 0 that worker alone. */
static void eng_reduce_unit(strata_ctx_t *ctx, eng_apart_t *ap, uint32_t g,
                            int64_t worker, const eng_unit_t *u)
{
    eng_agg_t *a = ctx->agg;
    void *out = eng_agg_model(a, ap);
    uint64_t staleness = 0;
    strata_status_t st =
        worker >= 0
            ? eng_tracker_record_update(ap->tracker, (uint32_t)worker, NULL,
                                        &staleness)
            : eng_tracker_record_group_update(ap->tracker, g, NULL, &staleness);
    double scale = eng_unit_scale(ctx, u, staleness);
    a->upd.lr = eng_agg_lr_at(a, u->clock); /* strata_set_lr's schedule */
    uint64_t t0 = util_now_ns();
    atomic_fetch_add_explicit(&ctx->cnt.reduce_wait_ns,
                              t0 > ap->arrived_ns ? t0 - ap->arrived_ns : 0,
                              memory_order_relaxed);
    if (st == STRATA_OK &&
        !eng_agg_stage_take(ctx, ap, u->clock, (uint32_t)u->n, scale))
        st = a->upd.ops->apply(&a->upd, ap->part->dtype, out, ap->master,
                               ap->momentum, a->srcs, u->n, ap->part->count,
                               scale);
    uint64_t t1 = util_now_ns();
    if (st == STRATA_OK)
        st = worker >= 0
                 ? eng_tracker_advance_worker(ap->tracker, (uint32_t)worker,
                                              u->clock + 1)
                 : eng_tracker_advance_group(ap->tracker, g, u->clock + 1);
    if (st != STRATA_OK) {
        eng_fail(ctx, st,
                 "updating partition %u for group %u at clock %lld "
                 "failed: %s",
                 ap->index, g, (long long)u->clock, strata_strerror(st));
        return;
    }
    int64_t gc = eng_tracker_group_clock(ap->tracker, g);
    if (gc != ENG_TRACKER_INF)
        atomic_store_explicit(&ap->done[g], gc, memory_order_relaxed);
    atomic_fetch_add_explicit(&ctx->cnt.reductions, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&ctx->cnt.reduce_ns, t1 - t0,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&ctx->cnt.updates, 1, memory_order_relaxed);
    for (size_t k = 0; k < u->n; k++)
        ap->applied[a->src_w[k]] = a->src_wc[k];
    if (a->taken_left)
        eng_agg_takeover_applied(ctx, ap, u->clock);
}

strata_status_t eng_agg_moves(strata_ctx_t *ctx, eng_apart_t *ap)
{
    eng_agg_t *a = ctx->agg;
    for (uint32_t w = 0; ap->moves > 0 && w < (uint32_t)ctx->nworkers; w++) {
        uint32_t nseg = eng_members_nsegments(a->members, w);
        while (ap->seg_at[w] + 1 < nseg) {
            const eng_segment_t *cur =
                eng_members_segment(a->members, w, ap->seg_at[w]);
            const eng_segment_t *next =
                eng_members_segment(a->members, w, ap->seg_at[w] + 1);
            if (!ap->retired[w] && eng_tracker_worker_clock(ap->tracker, w) <
                                       next->start + cur->offset)
                break; /* its last push of cur is not applied yet */
            if (!ap->retired[w]) {
                strata_status_t st = eng_tracker_move_worker(
                    ap->tracker, w, next->group, next->start + next->offset);
                if (st != STRATA_OK)
                    return st;
            }
            if (++ap->seg_at[w] + 1 == nseg)
                ap->moves--;
        }
    }
    return STRATA_OK;
}

/* Workers out of the job leave the partition's tracker (and every
 * minimum) once every push of theirs that counts is applied. */
static strata_status_t eng_agg_retire(strata_ctx_t *ctx, eng_apart_t *ap)
{
    eng_agg_t *a = ctx->agg;
    for (uint32_t w = 0; ap->unretired > 0 && w < (uint32_t)ctx->nworkers;
         w++) {
        /* a worker back (rejoin) retires its old process's pushes */
        int64_t end = ap->rejoin[w] ? a->gap_lo[w] : a->until[w];
        if (!(a->dropped[w] || ap->rejoin[w]) || ap->retired[w] ||
            ap->applied[w] < end - 1)
            continue;
        strata_status_t st = eng_tracker_drop_worker(ap->tracker, w);
        if (st == STRATA_OK && ap->rejoin[w])
            st = eng_agg_rejoin_part(ctx, ap, w);
        else
            ap->retired[w] = true;
        if (st != STRATA_OK)
            return st;
        ap->unretired--;
    }
    return ap->moves ? eng_agg_moves(ctx, ap) : STRATA_OK;
}

int64_t eng_agg_reached(strata_ctx_t *ctx)
{
    eng_agg_t *a = ctx->agg;
    int64_t reached = 0;
    for (uint32_t i = 0; i < a->nparts; i++) {
        const eng_apart_t *ap = &a->parts[i];
        for (uint32_t g = 0; g < ctx->policy->ngroups; g++) {
            int64_t c = eng_tracker_group_clock(ap->tracker, g);
            if (c != ENG_TRACKER_INF && c > reached)
                reached = c;
        }
        for (uint32_t w = 0; w < (uint32_t)ctx->nworkers; w++) {
            int64_t c = eng_tracker_worker_clock(ap->tracker, w);
            if (c != ENG_TRACKER_INF && c > reached)
                reached = c;
        }
    }
    return reached;
}

/* One pass over the groups (or workers); whether anything was applied. */
static bool eng_reduce_pass(strata_ctx_t *ctx, uint32_t i)
{
    eng_agg_t *a = ctx->agg;
    eng_apart_t *ap = &a->parts[i];
    const eng_policy_t *pol = ctx->policy;
    bool on_arrival = pol->apply_on_arrival;
    uint32_t n = on_arrival ? (uint32_t)ctx->nworkers : pol->ngroups;
    bool progress = false;
    for (uint32_t k = 0; k < n && !eng_fatal(ctx); k++) {
        eng_unit_t u;
        if (ap->inflight > 0)
            continue;
        if (!(on_arrival ? eng_worker_ready(ctx, ap, k, &u)
                         : eng_group_ready(ctx, ap, k, &u, false))) {
            /* landed, not known to count yet: staged (agg_stage.c) */
            if (ap->staged && ap->stage_clock < 0 && ap->sinflight == 0 &&
                eng_group_ready(ctx, ap, k, &u, true))
                eng_agg_stage(ctx, ap, u.clock, (uint32_t)u.n,
                              eng_unit_scale(ctx, &u, 0));
            continue;
        }
        uint32_t g = on_arrival ? eng_tracker_group_of(ap->tracker, k) : k;
        eng_reduce_unit(ctx, ap, g, on_arrival ? (int64_t)k : -1, &u);
        eng_agg_ckpt_note(ctx, i);
        eng_agg_protect_note(ctx, i);
        strata_status_t st = ap->unretired ? eng_agg_retire(ctx, ap)
                             : ap->moves   ? eng_agg_moves(ctx, ap)
                                           : STRATA_OK;
        if (st != STRATA_OK)
            eng_fail(ctx, st, "regrouping on partition %u failed: %s",
                     ap->index, strata_strerror(st));
        uint64_t t0 = util_now_ns();
        eng_serve(ctx, i);
        atomic_fetch_add_explicit(&ctx->cnt.serve_ns, util_now_ns() - t0,
                                  memory_order_relaxed);
        for (size_t s = 0; s < u.n; s++) /* zero copy: after the serve */
            eng_agg_consumed(ctx, i, a->src_w[s], a->src_wc[s]);
        progress = true;
    }
    return progress;
}

void eng_try_reduce(strata_ctx_t *ctx, uint32_t i)
{
    eng_apart_t *ap = &ctx->agg->parts[i];
    strata_status_t st = ap->unretired ? eng_agg_retire(ctx, ap) : STRATA_OK;
    if (st != STRATA_OK)
        eng_fail(ctx, st, "retiring a worker on partition %u failed: %s",
                 ap->index, strata_strerror(st));
    while (ap->inflight == 0 && ap->unserved == 0 && ctx->agg->held == 0 &&
           !eng_fatal(ctx) && eng_reduce_pass(ctx, i))
        ;
}

bool eng_may_serve(strata_ctx_t *ctx, const eng_apart_t *ap, uint32_t w,
                   int64_t c)
{
    const eng_members_t *m = ctx->agg->members;
    uint32_t i = eng_members_find(m, w, c - 1);
    const eng_segment_t *s = eng_members_segment(m, w, i);
    int64_t tc = c + s->offset;
    if (ap->seg_at[w] < i)
        return false; /* its move into that segment is not made here yet */
    if (ap->seg_at[w] == i) /* and only with its own updates in it */
        return eng_tracker_may_pull(ap->tracker, w, tc) &&
               eng_tracker_worker_clock(ap->tracker, w) >= tc;
    /* It moved on, so its pushes of segment i are all applied: the rule
     * against the group it pushed them to. */
    const eng_policy_t *p = ctx->policy;
    int64_t gc = eng_tracker_group_clock(ap->tracker, s->group);
    int64_t min = eng_tracker_min_clock(ap->tracker);
    return (p->intra_staleness == ENG_TRACKER_INF ||
            gc >= tc - p->intra_staleness) &&
           (p->inter_staleness == ENG_TRACKER_INF ||
            min >= tc - p->inter_staleness);
}
