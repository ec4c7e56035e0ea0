/*
 * A lost aggregator's shard taken over by a survivor (issue 16, item 3;
 * coord_protect.c has the coordinator's part, agg_protect.c the rebuild).
 *
 * The coordinator names the taker (the survivor holding the fewest shards,
 * then the lowest rank), which is also the rebuilder: the rebuilt shard,
 * checked against its CRC32C, is already here. On TAKEOVER (the lost
 * aggregator, the taker, the protected clock P, the resume clock R) every
 * survivor moves the shard in its layout (a region of its own at the
 * taker, layout.h); protection goes on when the taker is a spare (it
 * holds the lost shard's place), else it stops (eng_agg_protect_moved).
 * The taker installs each of the shard's partitions: the model, momentum
 * and fp32 master of the snapshot at P, and a tracker at R, as if every
 * clock before R were applied: clocks P..R-1 of the shard are lost, no
 * other shard is rolled back. Every worker still in the job gets receive
 * slots for the region (TAKEN) and answers where the shard's pieces live
 * in its parameters (PARAMS, PARAMS_END); it is then written the model of
 * clock R, and its pushes from R on are reduced as any others. Moved
 * partitions are neither staged, nor read in place, nor checkpointed.
 */
#include <inttypes.h>
#include <string.h>

#include "engine/aggregator.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/log.h"

/* The tracker at each worker's resume clock (the members' last segments,
 * each group at one clock of it: eng_members_resume), the workers moved in
 * the order of their groups' clocks: a move must not go below the least
 * clock. */
static strata_status_t eng_takeover_moves(strata_ctx_t *ctx, eng_apart_t *ap,
                                          const int64_t *resume)
{
    eng_agg_t *a = ctx->agg;
    uint32_t nw = (uint32_t)ctx->nworkers;
    for (uint32_t k = 0, w; k < nw; k++) {
        int64_t low = INT64_MAX;
        uint32_t next = UINT32_MAX;
        for (w = 0; w < nw; w++) {
            const eng_segment_t *s = eng_members_current(a->members, w);
            if (!a->dropped[w] && ap->seg_at[w] != UINT32_MAX &&
                resume[w] + s->offset < low) {
                low = resume[w] + s->offset;
                next = w;
            }
        }
        if (next == UINT32_MAX)
            break;
        const eng_segment_t *s = eng_members_current(a->members, next);
        strata_status_t st =
            eng_tracker_move_worker(ap->tracker, next, s->group, low);
        if (st != STRATA_OK)
            return st;
        atomic_store_explicit(&ap->done[s->group], low, memory_order_relaxed);
        ap->seg_at[next] = UINT32_MAX; /* moved: set below */
    }
    for (uint32_t w = 0; w < nw; w++)
        ap->seg_at[w] = eng_members_nsegments(a->members, w) - 1;
    ap->moves = 0;
    return STRATA_OK;
}

/* The partition's state as if every clock of each worker before its
 * resume clock were applied and served: its next push is of that clock,
 * and it wants that clock's model. */
static strata_status_t eng_takeover_at(strata_ctx_t *ctx, eng_apart_t *ap,
                                       const int64_t *resume)
{
    eng_agg_t *a = ctx->agg;
    bool moved = false;
    for (uint32_t w = 0; w < (uint32_t)ctx->nworkers; w++) {
        ap->arrived[w] = ap->applied[w] = resume[w] - 1;
        ap->want[w] = resume[w];
        ap->served[w] = resume[w] - 1;
        moved |= eng_members_nsegments(a->members, w) > 1;
        if (!a->dropped[w])
            continue;
        strata_status_t st = eng_tracker_drop_worker(ap->tracker, w);
        if (st != STRATA_OK)
            return st;
        ap->retired[w] = true;
    }
    ap->initialized = ap->fresh = true;
    ap->unserved = 0;
    ap->stage_clock = ap->prot_at = ap->ckpt_at = -1;
    if (moved) /* gssp after a regroup: groups resume at their own clocks */
        return eng_takeover_moves(ctx, ap, resume);
    for (uint32_t g = 0; g < ctx->policy->ngroups; g++) {
        int64_t c = eng_tracker_group_clock(ap->tracker, g);
        if (c == ENG_TRACKER_INF || c >= resume[0])
            continue;
        strata_status_t st =
            eng_tracker_advance_group(ap->tracker, g, resume[0]);
        if (st != STRATA_OK)
            return st;
        atomic_store_explicit(&ap->done[g], resume[0], memory_order_relaxed);
    }
    return STRATA_OK;
}

/* Grow an array of n items of `size` bytes to `to`, the new ones zero. */
static strata_status_t eng_grow(void **p, size_t size, size_t n, size_t to)
{
    void *q = util_calloc(to ? to : 1, size);
    if (!q)
        return STRATA_ERR_NOMEM;
    if (*p)
        memcpy(q, *p, size * n);
    util_free(*p);
    *p = q;
    return STRATA_OK;
}

/* Room on a worker's connection for the moved partitions: where their
 * pieces land in its parameters, their zero-copy state (never in place),
 * the model writes that can be due for them (the queue, in order). */
static strata_status_t eng_takeover_grow_link(eng_agg_t *a, eng_wlink_t *l,
                                              uint32_t nparts0,
                                              uint32_t npieces0)
{
    strata_status_t st = util_ring_reserve(&l->q, eng_wlink_qroom(a->nparts));
    if (st == STRATA_OK)
        st = eng_grow((void **)&l->dst, sizeof(*l->dst), npieces0, a->npieces);
    if (st == STRATA_OK)
        st = eng_grow((void **)&l->in_place, sizeof(*l->in_place), nparts0,
                      a->nparts);
    if (st == STRATA_OK)
        st = eng_grow((void **)&l->held, sizeof(*l->held), nparts0, a->nparts);
    if (st == STRATA_OK)
        st = eng_grow((void **)&l->rslots, sizeof(*l->rslots), l->nrslots,
                      a->nregions);
    if (st == STRATA_OK)
        st = eng_grow((void **)&l->rslots_mr, sizeof(*l->rslots_mr), l->nrslots,
                      a->nregions);
    if (st == STRATA_OK)
        l->nrslots = a->nregions;
    return st;
}

/* TAKEN: the worker's receive slots for the region (2 * its bytes: one
 * per clock parity); it answers PARAMS for the region's pieces. */
static strata_status_t eng_takeover_slots(strata_ctx_t *ctx, eng_wlink_t *l,
                                          uint32_t shard, uint32_t region,
                                          int64_t resume)
{
    eng_agg_t *a = ctx->agg;
    uint64_t bytes = 2 * a->regions[region - 1].bytes;
    tp_rdesc_t d;
    strata_status_t st =
        tp_mem_alloc(l->peer.tp, bytes ? bytes : 64, TP_ACCESS_REMOTE_WRITE,
                     &l->rslots[region - 1], &l->rslots_mr[region - 1]);
    if (st == STRATA_OK)
        st = tp_mr_export(l->rslots_mr[region - 1], l->peer.ep, &d);
    if (st != STRATA_OK)
        return st;
    unsigned char buf[64];
    eng_wbuf_t m;
    eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_TAKEN);
    eng_put_u32(&m, shard);
    eng_put_u32(&m, region);
    eng_put_i64(&m, resume);
    eng_put_u64(&m, d.addr);
    eng_put_u64(&m, d.len);
    eng_put_u64(&m, d.key);
    l->taking = region;
    return eng_send(&l->peer, &m, NULL);
}

/* The model region of a taken shard: its partitions' models, registered
 * with every transport (the source of their model writes). */
static strata_status_t eng_takeover_region(strata_ctx_t *ctx, uint32_t shard)
{
    eng_agg_t *a = ctx->agg;
    strata_status_t st = eng_grow((void **)&a->regions, sizeof(*a->regions),
                                  a->nregions, a->nregions + 1);
    if (st != STRATA_OK)
        return st;
    eng_region_t *rg = &a->regions[a->nregions++];
    rg->shard = shard;
    rg->bytes = a->layout->shard_bytes[shard];
    rg->out = util_aligned_alloc(4096, rg->bytes ? rg->bytes : 64);
    if (!rg->out)
        return STRATA_ERR_NOMEM;
    for (int p = 0; p < ENG_NPROV; p++)
        if (ctx->data_tp[p]) {
            st = tp_mr_reg(ctx->data_tp[p], rg->out, rg->bytes ? rg->bytes : 64,
                           TP_ACCESS_LOCAL, &rg->out_mr[p]);
            if (st != STRATA_OK)
                return st;
        }
    return STRATA_OK;
}

/* The partitions of the rebuilt shard (snap: its snapshot at the protected
 * clock) join this aggregator's at clock `resume`. */
static strata_status_t eng_takeover_parts(strata_ctx_t *ctx,
                                          const unsigned char *snap,
                                          uint32_t shard, const int64_t *resume)
{
    eng_agg_t *a = ctx->agg;
    const eng_layout_t *lay = a->layout;
    uint32_t n = lay->held_nparts[a->shard];
    uint64_t state = lay->shard_bytes[shard]; /* agg_protect.c's payload */
    for (uint32_t i = a->nparts; i < n; i++) {
        eng_apart_t *ap = &a->parts[i];
        *ap = (eng_apart_t){.index = lay->held_parts[a->shard][i]};
        ap->part = &lay->parts[ap->index];
        a->nparts = i + 1; /* freed with the others from here on */
        const eng_piece_t *pc0 = &lay->pieces[ap->part->first_piece];
        strata_status_t st = a->upd.ops->check(&a->upd, ap->part->dtype,
                                               lay->tensors[pc0->tensor].name);
        if (st == STRATA_OK)
            st = eng_apart_init(ctx, ap);
        if (st != STRATA_OK)
            return st;
        for (uint32_t k = 0; k < ap->part->npieces; k++)
            a->piece_local[ap->part->first_piece + k] = (int32_t)a->npieces++;
        memcpy(eng_agg_model(a, ap), snap + ap->part->shard_off,
               ap->part->bytes);
        size_t fl = ap->part->count * sizeof(float);
        if (ap->momentum) {
            memcpy(ap->momentum, snap + state, fl);
            state += fl;
        }
        if (ap->master) {
            memcpy(ap->master, snap + state, fl);
            state += fl;
        }
        st = eng_takeover_at(ctx, ap, resume);
        if (st != STRATA_OK)
            return st;
        /* Whole: a thread reading metrics may look at it from now on. */
        atomic_store_explicit(&a->nparts_shown, a->nparts,
                              memory_order_release);
    }
    return STRATA_OK;
}

strata_status_t eng_agg_takeover_msg(strata_ctx_t *ctx, eng_rbuf_t *r)
{
    eng_agg_t *a = ctx->agg;
    uint32_t lost = eng_get_u32(r), taker = eng_get_u32(r);
    int64_t clock = eng_get_i64(r), resume = eng_get_i64(r);
    if (!eng_rbuf_ok(r) || lost >= (uint32_t)ctx->naggs ||
        taker >= (uint32_t)ctx->naggs || lost == taker || lost == a->shard ||
        clock < 1 || resume < clock || !a->prot)
        return STRATA_ERR_PROTO;
    eng_metrics_takeover(ctx, lost, taker, clock, resume);
    uint32_t region;
    strata_status_t st = eng_layout_move(a->layout, lost, taker, &region);
    if (st != STRATA_OK)
        return st;
    if (a->ckpt) {
        util_warn("shard %u: no more checkpoints after the takeover of "
                  "shard %u (the shards no longer have the layout's holders)",
                  a->shard, lost);
        eng_agg_ckpt_free(a);
    }
    if (taker != a->shard) {
        st = eng_agg_protect_moved(ctx, lost, taker);
        util_info("shard %u: shard %u is taken over by aggregator %u from "
                  "clock %" PRId64,
                  a->shard, lost, taker, resume);
        return st;
    }
    if (region == UINT32_MAX) /* a shard without partitions */
        return eng_agg_protect_moved(ctx, lost, taker);
    const unsigned char *snap = eng_agg_protect_rebuilt(a, lost, clock);
    uint32_t nparts0 = a->nparts, npieces0 = a->npieces;
    if (!snap || region != a->nregions + 1 ||
        a->layout->held_nparts[a->shard] > a->parts_cap) {
        util_error("shard %u: told to take over shard %u at clock %" PRId64
                   ", but %s",
                   a->shard, lost, clock,
                   snap ? "it does not fit the room reserved at the commit"
                        : "that shard was not rebuilt here at that clock");
        return STRATA_ERR_STATE;
    }
    /* Each worker's resume clock, as the coordinator told it */
    int64_t *at = util_calloc((size_t)ctx->nworkers, sizeof(*at));
    if (!at)
        return STRATA_ERR_NOMEM;
    eng_members_resume(a->members, resume, at);
    st = eng_takeover_region(ctx, lost);
    if (st == STRATA_OK)
        st = eng_takeover_parts(ctx, snap, lost, at);
    if (st == STRATA_OK)
        st = eng_agg_protect_moved(ctx, lost, taker);
    for (eng_wlink_t *l = a->accepted; st == STRATA_OK && l; l = l->next)
        if (l->slots_sent)
            st = eng_takeover_grow_link(a, l, nparts0, npieces0);
    for (int w = 0; st == STRATA_OK && w < ctx->nworkers; w++) {
        eng_wlink_t *l = a->links[w];
        if (l && l->peer.ep && !l->left && !a->dropped[w])
            st = eng_takeover_slots(ctx, l, lost, region, at[w]);
    }
    util_free(at);
    if (st != STRATA_OK)
        return st;
    a->taken_resume = resume;
    a->taken_ns = util_now_ns();
    a->taken_left = a->nparts - nparts0;
    eng_metrics_stamp(&ctx->cnt.tk_installed_ns);
    util_info("shard %u: took shard %u over: %u partitions, %" PRIu64
              " bytes, the model of clock %" PRId64 " (or later, under gssp "
              "after a regroup) from its snapshot of clock %" PRId64
              " (clocks %" PRId64 "..%" PRId64 " of it lost)",
              a->shard, lost, a->nparts - nparts0, a->layout->shard_bytes[lost],
              resume, clock, clock, resume - 1);
    return STRATA_OK;
}

void eng_agg_takeover_ready(strata_ctx_t *ctx, eng_wlink_t *l)
{
    eng_agg_t *a = ctx->agg;
    l->ready = l->taking;
    l->taking = 0;
    for (uint32_t i = 0; i < a->nparts; i++)
        if (a->parts[i].part->region == l->ready)
            eng_serve(ctx, i);
}

void eng_agg_takeover_applied(strata_ctx_t *ctx, eng_apart_t *ap, int64_t clock)
{
    eng_agg_t *a = ctx->agg;
    if (!ap->fresh)
        return;
    ap->fresh = false;
    if (--a->taken_left > 0)
        return;
    eng_metrics_stamp(&ctx->cnt.tk_resumed_ns);
    util_info("shard %u: the first clock of the shard taken over (%" PRId64
              ") applied, %.1f ms after TAKEOVER",
              a->shard, clock, (double)(util_now_ns() - a->taken_ns) / 1e6);
}

void eng_agg_takeover_free(eng_agg_t *a)
{
    for (uint32_t r = 0; r < a->nregions; r++) {
        for (int p = 0; p < ENG_NPROV; p++)
            if (a->regions[r].out_mr[p])
                tp_mr_dereg(a->regions[r].out_mr[p]);
        util_free(a->regions[r].out);
    }
    util_free(a->regions);
}
