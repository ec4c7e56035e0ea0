/*
 * The worker's side of a takeover (issue 16): an aggregator is lost while
 * its shard is protected, and a survivor (the taker) holds the rebuilt
 * shard from a resume clock R on.
 *
 * Loss. The worker outlives the broken link: what was queued for it is
 * dropped (its pieces done with their buffers), a push read in place there
 * counts as consumed, and later pushes of its partitions are not written.
 * It tells the coordinator (LOST) the first clock it cannot push without
 * those partitions' model, then asks why the job failed as for any lost
 * peer (FAILED): with no TAKEOVER within STRATA_TIMEOUT_MS the job fails
 * naming the aggregator. PUSHED is held meanwhile.
 *
 * TAKEOVER (lost, taker, P, R) from the coordinator: the shard moves to the
 * taker in the layout (a region of the taker's own); the pushes of its
 * partitions before R are not written, those from R on go to the taker
 * once its TAKEN said where its slots of that region are (answered by
 * PARAMS: where the moved pieces land here). Their pulls wait for the
 * taker's first model write, of clock R (the snapshot of P: clocks P..R-1
 * of the shard are lost), so a pull held by the lost aggregator completes
 * with the taker's model. Under esync and fedavg the application writes
 * its parameters between two syncs, so the policy holds PARAMS (and with it
 * that write) until the application is in a sync's exchange (take_now).
 */
#include <inttypes.h>

#include "engine/worker.h"
#include "util/alloc.h"
#include "util/log.h"

bool eng_worker_outlives(const strata_ctx_t *ctx)
{
    return ctx->naggs > 1 && !ctx->policy->sum_only &&
           eng_config_int(ctx->cfg, ENG_CFG_PROTECT_EVERY) > 0;
}

/* A queued post of link l that will not be written: its pieces from
 * `first` on are done, and no longer awaited for PUSHED. */
static void eng_post_drop(strata_ctx_t *ctx, eng_link_t *l, const eng_post_t *e,
                          uint32_t first)
{
    eng_worker_t *w = ctx->worker;
    const eng_layout_t *lay = w->layout;
    const eng_partition_t *part = &lay->parts[e->part];
    if (e->kind == ENG_OP_INIT)
        return;
    /* A GDTopK push's pieces were done when it was prepared, and those of
     * one read in place are when it is consumed (eng_link_lose). */
    if (e->kind == ENG_OP_TOPK ||
        (l->in_place && l->in_place[part->held_index])) {
        w->unlanded[e->clock & 1]--;
        return;
    }
    for (uint32_t k = first; k < part->npieces; k++) {
        const eng_piece_t *pc = &lay->pieces[part->first_piece + k];
        eng_piece_done(ctx, w->tensors[pc->tensor].push_req[e->clock & 1],
                       STRATA_OK);
        w->unlanded[e->clock & 1]--;
    }
}

/* LOST: the first clock this worker cannot push until a takeover: a push
 * of c needs the model of c - 1 on every partition, and those of the lost
 * aggregator no longer move. */
static void eng_say_lost(strata_ctx_t *ctx, const eng_link_t *l)
{
    const eng_worker_t *w = ctx->worker;
    int64_t min = INT64_MAX;
    for (uint32_t p = 0; p < w->layout->nparts; p++)
        if (w->layout->parts[p].holder == l->agg && w->pulled[p] < min)
            min = w->pulled[p];
    unsigned char buf[32];
    eng_wbuf_t m;
    eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_LOST);
    eng_put_u32(&m, l->agg);
    eng_put_i64(&m, min == INT64_MAX ? 0 : min + 2);
    if (eng_send(&ctx->coord_peer, &m, NULL) != STRATA_OK)
        util_debug("cannot say LOST of aggregator rank %u", l->agg);
}

void eng_link_lose(strata_ctx_t *ctx, eng_link_t *l)
{
    eng_worker_t *w = ctx->worker;
    if (l->lost)
        return;
    l->lost = true;
    eng_metrics_stamp(&ctx->cnt.tk_loss_ns);
    if (!l->broken) {
        l->broken = true;
        w->nbroken++;
    }
    /* The transport completed every write posted to it (with an error)
     * before the disconnect: what is left was never posted. */
    for (const eng_post_t *e; (e = util_ring_peek(&l->q));
         util_ring_pop(&l->q)) {
        eng_post_drop(ctx, l, e, l->qpiece);
        l->qpiece = 0;
    }
    l->fuse_n = 0;
    for (uint32_t si = 0; l->in_place && si < w->layout->held_nparts[l->agg];
         si++)
        while (l->in_place[si] && l->zc_consumed[si] < l->zc_queued[si])
            eng_zc_consume(ctx, l, si, l->zc_consumed[si] + 1);
    eng_say_lost(ctx, l);
}

/* The taker's link holds `n` more partitions, from held index `from` on,
 * in region `region`: its queue, zero-copy arrays and regions grow (the
 * moved partitions are never read in place), and their staging is made
 * if a tensor is staged on it. */
static strata_status_t eng_link_grow(strata_ctx_t *ctx, eng_link_t *l,
                                     uint32_t from, uint32_t region)
{
    eng_worker_t *w = ctx->worker;
    const eng_layout_t *lay = w->layout;
    uint32_t n = lay->held_nparts[l->agg];
    strata_status_t st = util_ring_reserve(&l->q, eng_link_qroom(n));
    if (st != STRATA_OK)
        return st;
    if (l->in_place) {
        bool *ip = util_realloc(l->in_place, n * sizeof(*ip));
        if (ip)
            l->in_place = ip;
        int64_t *zq = util_realloc(l->zc_queued, n * sizeof(*zq));
        if (zq)
            l->zc_queued = zq;
        int64_t *zc = util_realloc(l->zc_consumed, n * sizeof(*zc));
        if (zc)
            l->zc_consumed = zc;
        if (!ip || !zq || !zc)
            return STRATA_ERR_NOMEM;
        for (uint32_t i = from; i < n; i++) {
            l->in_place[i] = false;
            l->zc_queued[i] = l->zc_consumed[i] = -1;
        }
    }
    eng_lregion_t *rg = util_realloc(l->regions, region * sizeof(*l->regions));
    if (!rg)
        return STRATA_ERR_NOMEM;
    l->regions = rg;
    rg = &l->regions[region - 1];
    *rg = (eng_lregion_t){0};
    bool staged = false;
    for (uint32_t i = 0; i < w->ntensors; i++)
        staged |= !w->tensors[i].reg[l->prov].param;
    if (!staged)
        return STRATA_OK;
    return eng_stage_alloc(
        l, lay->parts[lay->held_parts[l->agg][from]].region_bytes, &rg->stage,
        &rg->stage_mr, &rg->stage_desc);
}

/* Link l's TAKEN for the region its shard now lies in: its slots noted,
 * answered by where the moved pieces land here. */
static void eng_take_region(strata_ctx_t *ctx, eng_link_t *l,
                            const eng_taken_t *t)
{
    eng_worker_t *w = ctx->worker;
    const eng_layout_t *lay = w->layout;
    unsigned char buf[8];
    eng_wbuf_t m;
    eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_PARAMS_END);
    strata_status_t st = STRATA_OK;
    if (lay->shard_nparts[t->shard] > 0) {
        uint32_t p = lay->shard_parts[t->shard][0];
        const eng_partition_t *p0 = &lay->parts[p];
        if (t->region != p0->region || t->resume != w->push_from[p] ||
            t->slots.len < 2 * p0->region_bytes ||
            l->regions[p0->region - 1].slots.len) {
            eng_fail_tell(ctx, STRATA_ERR_PROTO,
                          "TAKEN of shard %u (region %u, clock %" PRId64
                          ", %" PRIu64 " bytes of slots) from %s does not "
                          "match its TAKEOVER (region %u, clock %" PRId64
                          ", %" PRIu64 " bytes)",
                          t->shard, t->region, t->resume, t->slots.len,
                          eng_peer_name(&l->peer), p0->region, w->push_from[p],
                          2 * p0->region_bytes);
            return;
        }
        l->regions[p0->region - 1].slots = t->slots;
        st = eng_send_params_from(ctx, l, p0->held_index);
    }
    if (st == STRATA_OK)
        st = eng_send(&l->peer, &m, NULL);
    if (st != STRATA_OK) {
        eng_fail(ctx, st,
                 "cannot describe the parameter buffers of shard %u to %s: %s",
                 t->shard, eng_peer_name(&l->peer), strata_strerror(st));
        return;
    }
    eng_link_post(ctx, l);
}

/* The least clock pulled of the partitions whose taker's first model
 * write is awaited: the application can be in no later round. */
static int64_t eng_moved_pulled(const eng_worker_t *w)
{
    int64_t min = INT64_MAX;
    for (uint32_t p = 0; p < w->layout->nparts; p++)
        if (w->model_from[p] >= 0 && w->pulled[p] < min)
            min = w->pulled[p];
    return min;
}

/* TAKEN answered now, or held until the policy allows the model write. */
static void eng_take_or_hold(strata_ctx_t *ctx, eng_link_t *l,
                             const eng_taken_t *t)
{
    const eng_worker_policy_t *pol = eng_worker_policy(ctx);
    int64_t stuck = eng_moved_pulled(ctx->worker);
    if (pol->take_now && stuck != INT64_MAX && !pol->take_now(ctx, stuck)) {
        l->early = *t;
        l->taken_held = true;
        return;
    }
    eng_take_region(ctx, l, t);
}

void eng_worker_takeover_release(strata_ctx_t *ctx)
{
    eng_worker_t *w = ctx->worker;
    for (int a = 0; w->layout && a < ctx->naggs; a++)
        if (w->links[a].taken_held) {
            w->links[a].taken_held = false;
            eng_take_or_hold(ctx, &w->links[a], &w->links[a].early);
        }
}

void eng_worker_on_taken(strata_ctx_t *ctx, eng_link_t *l, eng_rbuf_t *r)
{
    const eng_layout_t *lay = ctx->worker->layout;
    eng_taken_t t = {.shard = eng_get_u32(r),
                     .region = eng_get_u32(r),
                     .resume = eng_get_i64(r)};
    t.slots = (tp_rdesc_t){
        .addr = eng_get_u64(r), .len = eng_get_u64(r), .key = eng_get_u64(r)};
    if (!eng_rbuf_ok(r) || t.shard >= lay->nshards) {
        eng_fail_tell(ctx, STRATA_ERR_PROTO, "malformed TAKEN from %s",
                      eng_peer_name(&l->peer));
        return;
    }
    /* Before its TAKEOVER (which comes over the coordinator's connection),
     * the shard's partitions are not this link's yet. */
    bool moved = lay->shard_nparts[t.shard] == 0 ||
                 lay->parts[lay->shard_parts[t.shard][0]].holder == l->agg;
    if (moved) {
        eng_take_or_hold(ctx, l, &t);
        return;
    }
    if (l->taken_early) {
        eng_fail_tell(ctx, STRATA_ERR_PROTO,
                      "a second TAKEN (shard %u) from %s before a TAKEOVER",
                      t.shard, eng_peer_name(&l->peer));
        return;
    }
    l->early = t;
    l->taken_early = true;
}

/* Per partition: pushes written from a clock on, and the clock of the
 * next model write when it is not the one after the last. */
static strata_status_t eng_resume_setup(eng_worker_t *w)
{
    uint32_t n = w->layout->nparts;
    if (w->push_from)
        return STRATA_OK;
    w->push_from = util_malloc(n * sizeof(*w->push_from));
    w->model_from = util_malloc(n * sizeof(*w->model_from));
    if (!w->push_from || !w->model_from)
        return STRATA_ERR_NOMEM;
    for (uint32_t p = 0; p < n; p++) {
        w->push_from[p] = INT64_MIN;
        w->model_from[p] = -1;
    }
    return STRATA_OK;
}

/* Shard `lost` moves to link lt from clock R on. */
static strata_status_t eng_move_shard(strata_ctx_t *ctx, uint32_t lost,
                                      eng_link_t *lt, int64_t R)
{
    eng_worker_t *w = ctx->worker;
    eng_layout_t *lay = w->layout;
    uint32_t region;
    strata_status_t st = eng_resume_setup(w);
    if (st == STRATA_OK)
        st = eng_layout_move(lay, lost, lt->agg, &region);
    if (st != STRATA_OK || region == UINT32_MAX)
        return st;
    uint32_t n = lay->shard_nparts[lost];
    const uint32_t *sp = lay->shard_parts[lost];
    for (uint32_t i = 0; i < n; i++)
        w->push_from[sp[i]] = w->model_from[sp[i]] = R;
    return eng_link_grow(ctx, lt, lay->parts[sp[0]].held_index, region);
}

void eng_worker_on_takeover(strata_ctx_t *ctx, eng_rbuf_t *r)
{
    eng_worker_t *w = ctx->worker;
    uint32_t lost = eng_get_u32(r), taker = eng_get_u32(r);
    int64_t P = eng_get_i64(r), R = eng_get_i64(r);
    eng_link_t *ll = lost < (uint32_t)ctx->naggs ? &w->links[lost] : NULL;
    eng_link_t *lt = taker < (uint32_t)ctx->naggs ? &w->links[taker] : NULL;
    /* The coordinator says TAKEOVER once every worker said LOST. */
    if (!eng_rbuf_ok(r) || !ll || !lt || !ll->lost || !ll->broken || lt->lost ||
        P < 0 || R < P) {
        eng_fail_tell(ctx, STRATA_ERR_PROTO,
                      "malformed or unexpected TAKEOVER (aggregator rank %u "
                      "by rank %u, clocks %" PRId64 " and %" PRId64
                      ") from the coordinator",
                      lost, taker, P, R);
        return;
    }
    eng_metrics_takeover(ctx, lost, taker, P, R);
    strata_status_t st = eng_move_shard(ctx, lost, lt, R);
    if (st != STRATA_OK) {
        eng_fail(ctx, st, "cannot take shard %u over by aggregator rank %u: %s",
                 lost, taker, strata_strerror(st));
        return;
    }
    ll->broken = false;
    if (--w->nbroken == 0)
        eng_fail_soon_cancel(ctx);
    util_info("aggregator rank %u lost: shard %u taken over by aggregator "
              "rank %u, resumed at clock %" PRId64 " (protected at %" PRId64
              ": clocks %" PRId64 "..%" PRId64 " of it lost)",
              lost, lost, taker, R, P, P, R - 1);
    if (lt->taken_early) {
        lt->taken_early = false;
        eng_take_or_hold(ctx, lt, &lt->early);
    }
    eng_worker_announce(ctx);
    eng_link_post(ctx, lt);
}

void eng_takeover_free(strata_ctx_t *ctx)
{
    eng_worker_t *w = ctx->worker;
    for (int a = 0; w->layout && a < ctx->naggs; a++) {
        eng_link_t *l = &w->links[a];
        for (uint32_t r = 1; l->regions && r < w->layout->held_nregions[a]; r++)
            if (l->regions[r - 1].stage_mr)
                tp_mr_dereg(l->regions[r - 1].stage_mr);
        util_free(l->regions);
    }
    util_free(w->push_from);
    util_free(w->model_from);
}
