/*
 * The aggregator's side of the data path, on the progress thread.
 *
 * Memory. Per worker, one region of receive slots: every partition of the
 * shards it holds (one, or several with STRATA_SHARDS; layout.h) twice, once
 * per clock parity, so a worker can push clock c + 1 while clock c is being
 * reduced. One out region: the model of those shards in the tensors' dtypes
 * (SGD updates it in place; sum writes the sum there), the source of every
 * model write. Momentum buffers when SGD has momentum.
 *
 * Flow. A gradient write's immediate names the partition and the clock. When
 * every live member of the pusher's group has landed that clock, the group's
 * slots are reduced in one pass and the update applied (update.h); the
 * partition's tracker records the update and advances the group's clock;
 * then every worker waiting on the partition whose pull the tracker now
 * allows gets the fresh partition written into its parameter buffers, with
 * an immediate naming the clock served. A partition is not updated while
 * writes out of it are in flight, so a worker never receives a torn model.
 *
 * Each partition has its own tracker, so a partition is served as soon as it
 * is ready: reduction, update and model writes are pipelined across the
 * partitions of the shard.
 */
#include "engine/aggregator.h"

#include <stdio.h>
#include <string.h>

#include "agg/agg.h"
#include "engine/gdtopk.h"
#include "engine/imm.h"
#include "util/alloc.h"
#include "util/log.h"

static void eng_agg_on_recv(strata_ctx_t *ctx, eng_peer_t *peer, unsigned type,
                            eng_rbuf_t *r);
static void eng_agg_on_imm(strata_ctx_t *ctx, eng_peer_t *peer, uint32_t imm,
                           uint32_t len);
static void eng_agg_on_write_done(strata_ctx_t *ctx, eng_peer_t *peer,
                                  void *op_ctx, strata_status_t status);
static void eng_agg_on_disconnected(strata_ctx_t *ctx, eng_peer_t *peer,
                                    strata_status_t status);

static void eng_agg_on_accept(strata_ctx_t *ctx, tp_ep_t *ep, tp_ctx_t *tp);
static void eng_agg_cmd(strata_ctx_t *ctx, eng_cmd_t *cmd);
static void eng_agg_flush(strata_ctx_t *ctx);
static void eng_agg_on_coord_recv(strata_ctx_t *ctx, unsigned type,
                                  eng_rbuf_t *r);
static int64_t eng_agg_group_clock(strata_ctx_t *ctx, uint32_t g);
static void eng_agg_staleness(strata_ctx_t *ctx, uint64_t *hist,
                              size_t nbuckets);

static const eng_role_ops_t eng_agg_role = {
    .name = "aggregator",
    .on_accept = eng_agg_on_accept,
    .cmd = eng_agg_cmd,
    .flush = eng_agg_flush,
    .on_coord_msg = eng_agg_on_coord_recv,
    .group_clock = eng_agg_group_clock,
    .staleness = eng_agg_staleness,
};

/* The aggregator's connection to a worker. */
static const eng_peer_ops_t eng_wlink_ops = {
    .what = "worker",
    .on_message = eng_agg_on_recv,
    .on_imm = eng_agg_on_imm,
    .on_write_done = eng_agg_on_write_done,
    .on_disconnected = eng_agg_on_disconnected,
};

static int64_t eng_min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

strata_status_t eng_agg_create(strata_ctx_t *ctx)
{
    eng_agg_t *a = util_calloc(1, sizeof(*a));
    if (!a)
        goto nomem;
    ctx->agg = a;
    ctx->role_ops = &eng_agg_role;
    a->shard = (uint32_t)ctx->rank;
    size_t nw = (size_t)ctx->nworkers;
    a->links = util_calloc(nw, sizeof(*a->links));
    a->dropped = util_calloc(nw, sizeof(bool));
    a->srcs = util_calloc(nw, sizeof(*a->srcs));
    a->src_w = util_calloc(nw, sizeof(*a->src_w));
    a->src_wc = util_calloc(nw, sizeof(*a->src_wc));
    a->dense = util_calloc(nw, sizeof(*a->dense));
    a->pushed = util_malloc(nw * sizeof(*a->pushed));
    a->until = util_malloc(nw * sizeof(*a->until));
    a->gap_lo = util_calloc(nw, sizeof(*a->gap_lo));
    a->gap_hi = util_calloc(nw, sizeof(*a->gap_hi));
    a->prev = util_calloc(nw, sizeof(*a->prev));
    a->early = util_calloc(nw, sizeof(*a->early));
    if (!a->links || !a->dropped || !a->srcs || !a->src_w || !a->src_wc ||
        !a->dense || !a->pushed || !a->until || !a->gap_lo || !a->gap_hi ||
        !a->prev || !a->early)
        goto nomem;
    a->drops = eng_config_int(ctx->cfg, ENG_CFG_MIN_WORKERS) < ctx->nworkers;
    for (size_t w = 0; w < nw; w++) {
        a->pushed[w] = -1;
        a->until[w] = INT64_MAX;
    }
    const eng_policy_t *pol = ctx->policy;
    strata_status_t st = eng_members_create(pol->nworkers, pol->ngroups,
                                            pol->group_of, &a->members);
    if (st != STRATA_OK)
        return st;
    eng_update_init(&a->upd, ctx->cfg, pol->ops->rounds, a->dense);
    a->base_lr = a->upd.lr;
    return STRATA_OK;
nomem:
    util_error("out of memory for the aggregator");
    return STRATA_ERR_NOMEM;
}

/* ---- workers joining ---- */

static void eng_agg_on_accept(strata_ctx_t *ctx, tp_ep_t *ep, tp_ctx_t *tp)
{
    eng_wlink_t *l = util_calloc(1, sizeof(*l));
    if (!l) {
        util_error("out of memory admitting %s", tp_ep_peer(ep));
        tp_ep_close(ep);
        return;
    }
    l->widx = -1;
    l->round_clock[0] = l->round_clock[1] = -1;
    l->peer = (eng_peer_t){.ops = &eng_wlink_ops,
                           .q = &ctx->msgs,
                           .rank = -1,
                           .ep = ep,
                           .tp = tp,
                           .up = true,
                           .owner = l};
    tp_ep_set_ctx(ep, &l->peer);
    l->next = ctx->agg->accepted;
    ctx->agg->accepted = l;
}

static strata_status_t eng_send_slots(strata_ctx_t *ctx, eng_wlink_t *l);
static void eng_wlink_free(eng_wlink_t *l);

/* A connection that is no worker of the job (it authenticated, but said
 * no fitting JOIN) is closed and forgotten: the job goes on, and its
 * memory goes with it (every connection's used to stay until the end). */
static void eng_agg_forget(strata_ctx_t *ctx, eng_wlink_t *l, const char *why)
{
    if (why)
        util_warn("closed %s: %s; the job goes on", eng_peer_name(&l->peer),
                  why);
    for (int w = 0; w < ctx->nworkers; w++)
        if (ctx->agg->early[w] == l) /* a new process, gone before REJOIN */
            ctx->agg->early[w] = NULL;
    eng_wlink_t **pp = &ctx->agg->accepted;
    while (*pp != l)
        pp = &(*pp)->next;
    *pp = l->next;
    eng_peer_close(&l->peer);
    eng_wlink_free(l);
}

static void eng_on_join(strata_ctx_t *ctx, eng_wlink_t *l, eng_rbuf_t *r)
{
    eng_agg_t *a = ctx->agg;
    uint32_t said = eng_get_u32(r);
    /* any u32 on the wire: checked before it is an int */
    int rank = said < (uint32_t)ctx->size ? (int)said : -1;
    int widx = rank - ctx->naggs;
    char why[128];
    if (l->widx >= 0) { /* a worker of the job misbehaves */
        eng_fail_tell(ctx, STRATA_ERR_PROTO, "%s said JOIN twice",
                      eng_peer_name(&l->peer));
        return;
    }
    /* a dropped worker's new process (its old one may never have joined
     * here: dropped again before its JOIN) */
    if (eng_rbuf_ok(r) && widx >= 0 && widx < ctx->nworkers &&
        eng_agg_rejoin_early(ctx, l, widx))
        return;
    if (!eng_rbuf_ok(r) || widx < 0 || widx >= ctx->nworkers ||
        a->links[widx]) {
        snprintf(why, sizeof(why),
                 "it says it is rank %lld, which is not a worker that has not "
                 "joined yet",
                 eng_rbuf_ok(r) ? (long long)said : -1ll);
        eng_agg_forget(ctx, l, why);
        return;
    }
    eng_agg_join(ctx, l, widx);
}

void eng_agg_join(strata_ctx_t *ctx, eng_wlink_t *l, int widx)
{
    eng_agg_t *a = ctx->agg;
    l->widx = widx;
    l->peer.rank = ctx->naggs + widx;
    a->links[widx] = l;
    if (++a->njoined == ctx->nworkers)
        util_gate_raise(&ctx->joined, 1);
    if (a->layout) {
        strata_status_t st = eng_send_slots(ctx, l);
        if (st != STRATA_OK)
            eng_fail(ctx, st, "cannot describe the slots to %s: %s",
                     eng_peer_name(&l->peer), strata_strerror(st));
    }
}

/* ---- the shard ---- */

strata_status_t eng_apart_init(strata_ctx_t *ctx, eng_apart_t *ap)
{
    eng_agg_t *a = ctx->agg;
    const eng_policy_t *pol = ctx->policy;
    size_t nw = (size_t)ctx->nworkers;
    ap->arrived = util_malloc(sizeof(int64_t) * nw);
    ap->want = util_malloc(sizeof(int64_t) * nw);
    ap->served = util_malloc(sizeof(int64_t) * nw);
    ap->nsparse = util_malloc(sizeof(uint32_t) * 2 * nw);
    ap->seg_at = util_calloc(nw, sizeof(uint32_t));
    ap->done = util_calloc(pol->ngroups, sizeof(*ap->done));
    ap->applied = util_malloc(sizeof(int64_t) * nw);
    ap->retired = util_calloc(nw, sizeof(bool));
    ap->rejoin = util_calloc(nw, sizeof(bool));
    if (!ap->arrived || !ap->want || !ap->served || !ap->nsparse ||
        !ap->seg_at || !ap->done || !ap->applied || !ap->retired || !ap->rejoin)
        return STRATA_ERR_NOMEM;
    for (size_t k = 0; k < 2 * nw; k++)
        ap->nsparse[k] = ENG_SRC_DENSE;
    for (size_t w = 0; w < nw; w++) {
        ap->arrived[w] = -1;
        ap->applied[w] = -1;
        /* Every worker wants the initial model, clock 0; summing
         * aggregators have none, so clock 0 counts as served. */
        ap->served[w] = pol->sum_only ? 0 : -1;
        ap->want[w] = 0;
    }
    ap->initialized = pol->sum_only;
    ap->unserved = pol->sum_only ? 0 : (uint32_t)nw;
    if (a->upd.ops->needs_momentum && a->upd.momentum != 0) {
        ap->momentum = util_calloc(ap->part->count, sizeof(float));
        if (!ap->momentum)
            return STRATA_ERR_NOMEM;
    }
    if (a->upd.ops->needs_momentum && strata_dtype_size(ap->part->dtype) == 2) {
        ap->master = util_calloc(ap->part->count, sizeof(float));
        if (!ap->master)
            return STRATA_ERR_NOMEM;
    }
    eng_tracker_params_t tp = {.workers = pol->nworkers,
                               .groups = pol->ngroups,
                               .intra_staleness = pol->intra_staleness,
                               .inter_staleness = pol->inter_staleness,
                               .group_of = pol->group_of};
    return eng_tracker_create(&tp, &ap->tracker);
}

/* Check every partition's dtype against the update rule, and map the
 * model's pieces to the shard's. */
static strata_status_t eng_shard_plan(strata_ctx_t *ctx)
{
    eng_agg_t *a = ctx->agg;
    const eng_layout_t *lay = a->layout;
    a->nparts = lay->held_nparts[a->shard];
    /* A shard that may be taken over here (agg_takeover.c) finds room. */
    bool may_take = eng_config_int(ctx->cfg, ENG_CFG_PROTECT_EVERY) &&
                    !ctx->policy->sum_only;
    a->parts_cap = a->nparts;
    for (uint32_t s = 0; may_take && s < lay->nshards; s++)
        if (a->nparts + lay->shard_nparts[s] > a->parts_cap)
            a->parts_cap = a->nparts + lay->shard_nparts[s];
    a->parts = util_calloc(a->parts_cap ? a->parts_cap : 1, sizeof(*a->parts));
    a->piece_local = util_malloc(sizeof(int32_t) * lay->npieces);
    if (!a->parts || !a->piece_local)
        return STRATA_ERR_NOMEM;
    for (uint32_t k = 0; k < lay->npieces; k++)
        a->piece_local[k] = -1;
    size_t largest = 0;
    for (uint32_t i = 0; i < a->nparts; i++) {
        eng_apart_t *ap = &a->parts[i];
        ap->index = lay->held_parts[a->shard][i];
        ap->part = &lay->parts[ap->index];
        const eng_piece_t *pc0 = &lay->pieces[ap->part->first_piece];
        strata_status_t st = a->upd.ops->check(&a->upd, ap->part->dtype,
                                               lay->tensors[pc0->tensor].name);
        if (st != STRATA_OK)
            return st;
        for (uint32_t k = 0; k < ap->part->npieces; k++)
            a->piece_local[ap->part->first_piece + k] = (int32_t)a->npieces++;
    }
    /* Room to reduce any partition this aggregator may hold: its own, or
     * any once a shard may be taken over. */
    for (uint32_t i = 0; i < lay->nparts; i++) {
        const eng_partition_t *p = &lay->parts[i];
        size_t need = p->bytes;
        if (strata_dtype_size(p->dtype) == 2) /* summed in fp32 */
            need = p->count * sizeof(float);
        if (may_take || p->holder == a->shard)
            largest = need > largest ? need : largest;
    }
    a->upd.scratch = util_aligned_alloc(64, largest ? largest : 64);
    return a->upd.scratch ? STRATA_OK : STRATA_ERR_NOMEM;
}

/* STRATA_REDUCE_THREADS, or (0) this process's share of the cores among
 * the aggregators on this host: under BSP they reduce at the same time,
 * while the workers wait. */
static unsigned eng_pool_threads(const strata_ctx_t *ctx)
{
    if (eng_config_int(ctx->cfg, ENG_CFG_REDUCE_THREADS) > 0)
        return 0; /* the pool reads the setting itself */
    unsigned local = 0;
    for (int a = 0; a < ctx->naggs; a++)
        local += strcmp(ctx->roster->aggs[a].host_id, ctx->host_id) == 0;
    unsigned cores = agg_reduce_threads();
    unsigned share = local > 1 ? cores / local : cores;
    return share ? share : 1;
}

/* Which shards this aggregator holds: its own, or (STRATA_SHARDS) every
 * one its index is the remainder of. */
static void eng_shard_say(strata_ctx_t *ctx, uint64_t bytes)
{
    eng_agg_t *a = ctx->agg;
    const char *upd = a->upd.ops->name;
    if (ctx->roster->spare[a->shard]) {
        util_info("aggregator %u is a spare: it holds no shard until it "
                  "takes over that of an aggregator lost (update %s)",
                  a->shard, upd);
        return;
    }
    if (ctx->nshards == (uint32_t)ctx->naggs) {
        util_info("shard %u: %u partitions, %llu bytes, update %s", a->shard,
                  a->nparts, (unsigned long long)bytes, upd);
        return;
    }
    char list[256];
    size_t n = 0;
    for (uint32_t s = a->shard; s < ctx->nshards && n + 16 < sizeof(list);
         s += (uint32_t)ctx->naggs)
        n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%u", n ? ", " : "",
                              s);
    util_info("aggregator %u holds shards %s of %u: %u partitions, %llu "
              "bytes, update %s",
              a->shard, list, ctx->nshards, a->nparts,
              (unsigned long long)bytes, upd);
}

static strata_status_t eng_shard_setup(strata_ctx_t *ctx)
{
    eng_agg_t *a = ctx->agg;
    /* the layout takes the descriptions received */
    strata_status_t st = eng_layout_adopt(a->lrx.tensors, a->lrx.ntensors,
                                          a->lrx.partition_bytes, ctx->nshards,
                                          eng_spare_shards(ctx), &a->layout);
    a->lrx.tensors = NULL;
    atomic_store(&ctx->partition_bytes, a->lrx.partition_bytes);
    if (st == STRATA_OK)
        st = eng_layout_hold(a->layout, (uint32_t)ctx->naggs);
    if (st == STRATA_OK)
        st = eng_shard_plan(ctx);
    if (st != STRATA_OK)
        return st;
    a->one_holder = a->layout->holders_used == 1;
    uint64_t bytes = a->layout->held_bytes[a->shard];
    a->out = util_aligned_alloc(4096, bytes ? bytes : 64);
    if (!a->out)
        return STRATA_ERR_NOMEM;
    memset(a->out, 0, bytes);
    for (int p = 0; p < ENG_NPROV; p++)
        if (ctx->data_tp[p]) {
            st = tp_mr_reg(ctx->data_tp[p], a->out, bytes ? bytes : 64,
                           TP_ACCESS_LOCAL, &a->out_mr[p]);
            if (st != STRATA_OK)
                return st;
        }
    st = strata_reduce_pool_create(eng_pool_threads(ctx), &a->upd.pool);
    for (uint32_t i = 0; st == STRATA_OK && i < a->nparts; i++)
        st = eng_apart_init(ctx, &a->parts[i]);
    if (st == STRATA_OK)
        st = eng_agg_ckpt_setup(ctx);
    if (st == STRATA_OK)
        st = eng_agg_protect_setup(ctx);
    if (st == STRATA_OK)
        st = eng_agg_stage_setup(ctx);
    /* No ep: the worker's connection dropped before the layout came, and
     * the job's failure naming it is on the way (eng_agg_lost); exporting
     * to the closed link would fail in its place. */
    for (int w = 0; st == STRATA_OK && w < ctx->nworkers; w++)
        if (a->links[w] && a->links[w]->peer.ep)
            st = eng_send_slots(ctx, a->links[w]);
    if (st != STRATA_OK)
        return st;
    atomic_store_explicit(&a->nparts_shown, a->nparts, memory_order_release);
    eng_shard_say(ctx, bytes);
    return STRATA_OK;
}

static strata_status_t eng_send_slots(strata_ctx_t *ctx, eng_wlink_t *l)
{
    eng_agg_t *a = ctx->agg;
    uint64_t bytes = 2 * a->layout->held_bytes[a->shard];
    strata_status_t st = util_ring_init(&l->q, sizeof(eng_send_item_t),
                                        eng_wlink_qroom(a->nparts));
    l->dst = util_calloc(a->npieces ? a->npieces : 1, sizeof(*l->dst));
    l->in_place = util_calloc(a->nparts ? a->nparts : 1, sizeof(*l->in_place));
    l->held = util_calloc(a->nparts ? a->nparts : 1, sizeof(*l->held));
    if (st != STRATA_OK || !l->dst || !l->in_place || !l->held)
        return STRATA_ERR_NOMEM;
    tp_rdesc_t d;
    st = tp_mem_alloc(l->peer.tp, bytes ? bytes : 64, TP_ACCESS_REMOTE_WRITE,
                      &l->slots, &l->slots_mr);
    if (st == STRATA_OK)
        st = tp_mr_export(l->slots_mr, l->peer.ep, &d);
    if (st != STRATA_OK)
        return st;
    unsigned char buf[64];
    eng_wbuf_t m;
    eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_SLOTS);
    eng_put_u64(&m, d.addr);
    eng_put_u64(&m, d.len);
    eng_put_u64(&m, d.key);
    l->slots_sent = true;
    return eng_send(&l->peer, &m, NULL);
}

static void eng_agg_on_coord_recv(strata_ctx_t *ctx, unsigned type,
                                  eng_rbuf_t *r)
{
    eng_agg_t *a = ctx->agg;
    strata_status_t st = STRATA_ERR_PROTO;
    if (type == ENG_MSG_LAYOUT || type == ENG_MSG_TENSORS)
        st = eng_layout_rx_msg(&a->lrx, type, r, "the coordinator");
    else if (type == ENG_MSG_LAYOUT_OK && a->lrx.complete && !a->layout)
        st = eng_shard_setup(ctx);
    else if ((type == ENG_MSG_DROP_ASK || type == ENG_MSG_DROP) && a->layout)
        st = eng_agg_drop_msg(ctx, type, r);
    else if ((type == ENG_MSG_PIECE || type == ENG_MSG_PROTECT ||
              type == ENG_MSG_REBUILD || type == ENG_MSG_FRAG) &&
             a->layout)
        st = eng_agg_protect_msg(ctx, type, r);
    else if ((type == ENG_MSG_REJOIN_ASK || type == ENG_MSG_REJOIN) &&
             a->layout)
        st = eng_agg_rejoin_msg(ctx, type, r);
    else if (type == ENG_MSG_TAKEOVER && a->layout)
        st = eng_agg_takeover_msg(ctx, r);
    else if (eng_agg_policy(ctx)->on_coord_msg)
        st = eng_agg_policy(ctx)->on_coord_msg(ctx, type, r);
    if (st != STRATA_OK)
        eng_fail(ctx, st, "cannot take message %s from the coordinator: %s",
                 eng_msg_name(type), strata_strerror(st));
}

/* ---- serving the model ---- */

/* A model write's completion context: the worker, the partition, and
 * whether it reads the stage. */
#define ENG_WRITE_STAGED (UINT32_C(1) << 31)

/* The writes a queued item makes: one per piece, or the immediate alone. */
static uint32_t eng_item_writes(const eng_apart_t *ap, const eng_send_item_t *e)
{
    return e->kind == ENG_SEND_COMMIT ? 1 : ap->part->npieces;
}

static void eng_wlink_post(strata_ctx_t *ctx, eng_wlink_t *l)
{
    eng_agg_t *a = ctx->agg;
    const eng_layout_t *lay = a->layout;
    if (!l->peer.ep) /* gone: see eng_serve_one */
        return;
    int prov = eng_prov_index(tp_name(l->peer.tp));
    const eng_send_item_t *e;
    while ((e = util_ring_peek(&l->q))) {
        eng_apart_t *ap = &a->parts[e->part];
        const eng_partition_t *part = ap->part;
        bool staged = e->kind == ENG_SEND_STAGED;
        uint32_t n = eng_item_writes(ap, e);
        while (l->qpiece < n) {
            uint32_t k = part->first_piece + l->qpiece;
            const eng_piece_t *pc = &lay->pieces[k];
            const eng_dst_t *d = &l->dst[a->piece_local[k]];
            bool last = l->qpiece + 1 == n;
            size_t len = e->kind == ENG_SEND_COMMIT ? 0 : pc->len;
            tp_mr_t *src = e->from_stage ? a->stage_mr[prov]
                           : part->region
                               ? a->regions[part->region - 1].out_mr[prov]
                               : a->out_mr[prov];
            strata_status_t st = tp_write(
                l->peer.ep, src, part->held_off + pc->part_off, &d->d, d->off,
                len, eng_imm(ENG_IMM_MODEL, e->clock, ap->index),
                last && !staged ? TP_WRITE_IMM : 0,
                (void *)((uintptr_t)(l->widx + 1) << 32 | e->part |
                         (staged ? ENG_WRITE_STAGED : 0)));
            /* ERR_PEER: the connection broke; its DISCONNECTED event
             * follows and names the worker. */
            if (st == STRATA_ERR_AGAIN || st == STRATA_ERR_PEER)
                return;
            if (st != STRATA_OK) {
                eng_fail(ctx, st, "writing the model to %s failed: %s",
                         eng_peer_name(&l->peer), strata_strerror(st));
                return;
            }
            atomic_fetch_add_explicit(&ctx->cnt.bytes_pulled, len,
                                      memory_order_relaxed);
            l->qpiece++;
        }
        l->qpiece = 0;
        util_ring_pop(&l->q);
        if (!staged)
            atomic_fetch_add_explicit(&ctx->cnt.pulls, 1, memory_order_relaxed);
    }
}

void eng_wlink_queue(strata_ctx_t *ctx, eng_wlink_t *l, uint32_t i,
                     eng_send_kind_t kind, int64_t clock)
{
    eng_apart_t *ap = &ctx->agg->parts[i];
    /* a staged model is in the stage, the others in the model's buffer */
    eng_send_item_t e = {.part = i,
                         .kind = kind,
                         .from_stage = (kind == ENG_SEND_STAGED) != ap->flip,
                         .clock = clock};
    eng_send_item_t *slot = eng_wqueue_push(ctx, &l->q, &l->peer);
    if (!slot)
        return;
    *slot = e;
    if (kind == ENG_SEND_STAGED)
        ap->sinflight += eng_item_writes(ap, &e);
    else
        ap->inflight += eng_item_writes(ap, &e);
    eng_wlink_post(ctx, l);
}

/* Worker w may get the partition for its newest wanted clock, or else for
 * the one after what it last got. */
static void eng_serve_one(strata_ctx_t *ctx, eng_apart_t *ap, uint32_t i, int w)
{
    eng_agg_t *a = ctx->agg;
    eng_wlink_t *l = a->links[w];
    /* No ep: the worker's connection dropped and the job's failure naming
     * it is on the way; a model write to it would fail in its place. */
    if (!ap->initialized || !l || !l->peer.ep || !l->params_ready || l->left ||
        a->dropped[w] || ap->want[w] <= ap->served[w] ||
        ap->part->region > l->ready) /* a shard taken over: no PARAMS yet */
        return;
    int64_t c = ap->want[w];
    if (!eng_may_serve(ctx, ap, (uint32_t)w, c)) {
        c = ap->served[w] + 1;
        if (c == ap->want[w] || !eng_may_serve(ctx, ap, (uint32_t)w, c))
            return;
    }
    if (ap->served[w] < 0)
        ap->unserved--;
    ap->served[w] = c;
    uint64_t version = eng_tracker_version(ap->tracker);
    eng_tracker_note_pull(ap->tracker, (uint32_t)w, version);
    eng_tracker_note_group_pull(
        ap->tracker, eng_tracker_group_of(ap->tracker, (uint32_t)w), version);
    /* A model staged (agg_stage.c) is out already: its immediate says it. */
    bool staged = ap->staged && ap->staged[w] == c;
    if (ap->staged)
        ap->staged[w] = -1;
    eng_wlink_queue(ctx, l, i, staged ? ENG_SEND_COMMIT : ENG_SEND_MODEL, c);
}

void eng_serve(strata_ctx_t *ctx, uint32_t i)
{
    eng_apart_t *ap = &ctx->agg->parts[i];
    for (int w = 0; w < ctx->nworkers; w++)
        eng_serve_one(ctx, ap, i, w);
}

void *eng_slot(const eng_agg_t *a, const eng_wlink_t *l, const eng_apart_t *ap,
               int64_t clock)
{
    uint32_t r = ap->part->region;
    if (r) /* a shard taken over: its region's slots */
        return (char *)l->rslots[r - 1] + eng_layout_slot_off(ap->part, clock);
    return (char *)l->slots +
           (uint64_t)(clock & 1) * a->layout->held_bytes[a->shard] +
           ap->part->held_off;
}

static void eng_wlink_close(strata_ctx_t *ctx, eng_wlink_t *l)
{
    eng_wlink_unmap(ctx, l);
    eng_peer_close(&l->peer);
}

static void eng_agg_on_write_done(strata_ctx_t *ctx, eng_peer_t *peer,
                                  void *op_ctx, strata_status_t status)
{
    (void)peer;
    eng_agg_t *a = ctx->agg;
    int w = (int)((uintptr_t)op_ctx >> 32) - 1;
    uint32_t i = (uint32_t)(uintptr_t)op_ctx;
    /* A failed write means the connection broke: its DISCONNECTED event
     * follows and says whether that is a failure (the worker may just have
     * finalized before this completion was reaped). */
    if (status != STRATA_OK)
        util_debug("a model write to worker %d completed with %s", w,
                   strata_strerror(status));
    if (i & ENG_WRITE_STAGED) {
        i &= ~ENG_WRITE_STAGED;
        if (--a->parts[i].sinflight == 0) /* the stage is free again */
            eng_try_reduce(ctx, i);
    } else if (--a->parts[i].inflight == 0)
        eng_try_reduce(ctx, i);
}

/* ---- arrivals ---- */

/* The first worker's parameters, the initial model: copied as they are
 * into the out buffer, unless a checkpoint gave the model. */
static void eng_on_init(strata_ctx_t *ctx, eng_wlink_t *l, uint32_t i)
{
    eng_agg_t *a = ctx->agg;
    eng_apart_t *ap = &a->parts[i];
    void *out = eng_agg_model(a, ap);
    if (!a->restored)
        memcpy(out, eng_slot(a, l, ap, 0), ap->part->bytes);
    if (ap->master) /* exact: every 16-bit value is an fp32 one; a restored
                       model's master restarts from the model */
        strata_axpy(ap->part->dtype, ap->master, out, ap->part->count, 1.0f);
    ap->initialized = true;
    a->ninit++;
    eng_serve(ctx, i);
}

/* A push landed: dense (GRAD) in the partition's layout, or sparse (SPARSE,
 * of the dtypes GDTopK covers) as len / 8 entries. */
static void eng_on_grad(strata_ctx_t *ctx, eng_wlink_t *l, uint32_t i,
                        uint32_t imm, uint32_t len)
{
    eng_apart_t *ap = &ctx->agg->parts[i];
    int64_t c = ap->arrived[l->widx] + 1;
    bool sparse = eng_imm_kind(imm) == ENG_IMM_SPARSE;
    ap->arrived_ns = util_now_ns();
    if (!eng_imm_clock_is(imm, c) || !ap->initialized) {
        eng_fail_tell(ctx, STRATA_ERR_PROTO,
                      "gradients for partition %u from %s carry clock bits %u, "
                      "expected clock %lld%s",
                      ap->index, eng_peer_name(&l->peer),
                      (imm >> 22) & ENG_IMM_CLOCK_MASK, (long long)c,
                      ap->initialized ? "" : " after the initial model");
        return;
    }
    if (sparse && (!eng_gdtopk_dtype(ap->part->dtype) || len % 8 != 0 ||
                   len >= ap->part->bytes || len == 0)) {
        eng_fail_tell(
            ctx, STRATA_ERR_PROTO,
            "a sparse push of %u bytes for %s partition %u (%llu bytes) "
            "from %s",
            len, strata_dtype_name(ap->part->dtype), ap->index,
            (unsigned long long)ap->part->bytes, eng_peer_name(&l->peer));
        return;
    }
    if (l->in_place[i] && (sparse || len != 0)) {
        eng_fail_tell(ctx, STRATA_ERR_PROTO,
                      "%s wrote %u bytes of partition %u, which it said is "
                      "read in place",
                      eng_peer_name(&l->peer), len, ap->index);
        return;
    }
    if (l->in_place[i])
        eng_agg_held(ctx, l, i, c);
    ap->arrived[l->widx] = c;
    ap->nsparse[2 * l->widx + (c & 1)] = sparse ? len / 8 : ENG_SRC_DENSE;
    atomic_fetch_add_explicit(&ctx->cnt.pushes, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&ctx->cnt.bytes_pushed,
                              sparse ? len : ap->part->bytes,
                              memory_order_relaxed);
    if (ap->want[l->widx] < c + 1)
        ap->want[l->widx] = c + 1; /* pushing c asks for c + 1 */
    if (!eng_agg_landed(ctx, (uint32_t)l->widx, c))
        eng_try_reduce(ctx, i);
}

/* A run of dense pushes under one immediate (ENG_IMM_GRADS): each lands
 * as if its own immediate had come, in order. */
static void eng_on_grad_run(strata_ctx_t *ctx, eng_wlink_t *l, uint32_t imm)
{
    uint32_t first = eng_imm_run_first(imm), n = eng_imm_run_count(imm);
    for (uint32_t i = first; i < first + n && !eng_fatal(ctx); i++)
        eng_on_grad(ctx, l, i, imm, (uint32_t)ctx->agg->parts[i].part->bytes);
}

static void eng_agg_on_imm(strata_ctx_t *ctx, eng_peer_t *peer, uint32_t imm,
                           uint32_t len)
{
    eng_agg_t *a = ctx->agg;
    eng_wlink_t *l = peer->owner;
    uint32_t i = eng_imm_part(imm);
    unsigned kind = eng_imm_kind(imm);
    bool ok = l->widx >= 0 && a->layout && i < a->nparts;
    if (kind == ENG_IMM_GRADS)
        ok = l->widx >= 0 && a->layout && eng_imm_run_count(imm) <= a->nparts &&
             eng_imm_run_first(imm) <= a->nparts - eng_imm_run_count(imm);
    if (ok && (kind == ENG_IMM_GRAD || kind == ENG_IMM_SPARSE ||
               kind == ENG_IMM_GRADS))
        atomic_fetch_add_explicit(&ctx->cnt.push_imms, 1, memory_order_relaxed);
    if (ok && (kind == ENG_IMM_GRAD || kind == ENG_IMM_SPARSE))
        eng_on_grad(ctx, l, i, imm, len);
    else if (ok && kind == ENG_IMM_GRADS)
        eng_on_grad_run(ctx, l, imm);
    else if (ok && kind == ENG_IMM_INIT && l->widx == 0 &&
             !a->parts[i].initialized)
        eng_on_init(ctx, l, i);
    else {
        eng_fail_tell(ctx, STRATA_ERR_PROTO,
                      "unexpected write (immediate 0x%08x, %u bytes) from %s",
                      imm, len, eng_peer_name(peer));
    }
}

/* ---- messages from workers ---- */

static bool eng_on_params(strata_ctx_t *ctx, eng_wlink_t *l, eng_rbuf_t *r)
{
    eng_agg_t *a = ctx->agg;
    while (!r->bad && r->pos < r->len) {
        uint32_t k = eng_get_u32(r);
        eng_dst_t d = {.d = {.addr = eng_get_u64(r),
                             .len = eng_get_u64(r),
                             .key = eng_get_u64(r)},
                       .off = eng_get_u64(r)};
        if (r->bad || k >= a->layout->npieces || a->piece_local[k] < 0)
            return false;
        l->dst[a->piece_local[k]] = d;
        l->ndst++;
    }
    return eng_rbuf_ok(r);
}

/* GRADS: the partitions whose gradients the worker has read in place, and
 * where (a region it exported to this connection). */
static bool eng_on_grads(strata_ctx_t *ctx, eng_wlink_t *l, eng_rbuf_t *r)
{
    eng_agg_t *a = ctx->agg;
    while (!r->bad && r->pos < r->len) {
        uint32_t i = eng_get_u32(r);
        tp_rdesc_t d = {.addr = eng_get_u64(r),
                        .len = eng_get_u64(r),
                        .key = eng_get_u64(r)};
        uint64_t off = eng_get_u64(r);
        if (r->bad || i >= a->nparts || l->in_place[i] ||
            tp_peer_map(l->peer.ep, &d, off, a->parts[i].part->bytes,
                        &l->in_place[i]) != STRATA_OK)
            return false;
    }
    return eng_rbuf_ok(r);
}

/* A worker that left gets no more writes: what was queued for it no longer
 * holds its partitions. */
void eng_wlink_forget(strata_ctx_t *ctx, eng_wlink_t *l)
{
    eng_agg_t *a = ctx->agg;
    /* what was staged to it is not a new process's */
    for (uint32_t i = 0; l->widx >= 0 && i < a->nparts; i++)
        if (a->parts[i].staged)
            a->parts[i].staged[l->widx] = -1;
    const eng_send_item_t *e;
    while ((e = util_ring_peek(&l->q))) {
        eng_apart_t *ap = &a->parts[e->part];
        uint32_t *count =
            e->kind == ENG_SEND_STAGED ? &ap->sinflight : &ap->inflight;
        *count -= eng_item_writes(ap, e) - l->qpiece;
        l->qpiece = 0;
        uint32_t part = e->part;
        util_ring_pop(&l->q);
        if (*count == 0)
            eng_try_reduce(ctx, part);
    }
}

void eng_agg_progress(strata_ctx_t *ctx)
{
    for (uint32_t i = 0; i < ctx->agg->nparts; i++) {
        eng_try_reduce(ctx, i);
        eng_serve(ctx, i);
    }
}

/* The worker is out of the job (it left, or it was dropped): once its
 * pushes before `until` are applied, it no longer holds a group or a
 * minimum back. Once every worker is out, serving ends. */
void eng_agg_worker_out(strata_ctx_t *ctx, int w, int64_t until)
{
    eng_agg_t *a = ctx->agg;
    if (a->dropped[w])
        return;
    a->dropped[w] = true;
    a->until[w] = until;
    for (uint32_t i = 0; i < a->nparts; i++) {
        a->parts[i].unretired++;
        if (a->parts[i].served[w] < 0 && a->parts[i].unserved > 0) {
            a->parts[i].served[w] = 0;
            a->parts[i].unserved--;
        }
    }
    if (++a->ngone == ctx->nworkers)
        util_gate_raise(&ctx->served, 1);
    eng_agg_progress(ctx);
}

static bool eng_on_lr(strata_ctx_t *ctx, eng_wlink_t *l, eng_rbuf_t *r)
{
    int64_t clock = eng_get_i64(r);
    double lr = eng_get_f64(r);
    if (!eng_rbuf_ok(r) || ctx->policy->ops->rounds || ctx->policy->sum_only ||
        clock < 0 || !(lr > 0) || lr > 1e6)
        return false;
    strata_status_t st =
        eng_agg_lr_announce(ctx, clock, lr, eng_peer_name(&l->peer));
    if (st != STRATA_OK)
        eng_fail(ctx, st, "cannot keep the learning rate %s announced",
                 eng_peer_name(&l->peer));
    return true;
}

static void eng_on_leave(strata_ctx_t *ctx, eng_wlink_t *l)
{
    l->left = true;
    l->peer.left = true;
    eng_wlink_forget(ctx, l);
    /* The worker closes once told: a close never overtakes its LEAVE
     * (a transport need not order a disconnect after messages). */
    unsigned char buf[8];
    eng_wbuf_t m;
    eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_LEFT);
    eng_send(&l->peer, &m, NULL);
    /* Its PUSHED came before LEAVE, alike at every aggregator. */
    eng_agg_worker_out(ctx, l->widx, ctx->agg->pushed[l->widx] + 1);
}

static void eng_agg_on_recv(strata_ctx_t *ctx, eng_peer_t *peer, unsigned type,
                            eng_rbuf_t *r)
{
    eng_agg_t *a = ctx->agg;
    eng_wlink_t *l = peer->owner;
    if (type == ENG_MSG_JOIN) {
        eng_on_join(ctx, l, r);
        return;
    }
    if (l->widx < 0) {
        char why[96];
        snprintf(why, sizeof(why), "it sent %s (type %u) before JOIN",
                 eng_msg_name(type), type);
        eng_agg_forget(ctx, l, why);
        return;
    }
    bool ok = l->slots_sent;
    /* PARAMS at the commit, and again for a shard taken over (TAKEN) */
    bool params = !l->params_ready || l->taking;
    if (ok && type == ENG_MSG_PARAMS && params && eng_on_params(ctx, l, r))
        return;
    if (ok && type == ENG_MSG_GRADS && !l->params_ready &&
        eng_on_grads(ctx, l, r))
        return;
    if (ok && type == ENG_MSG_PARAMS_END && eng_rbuf_ok(r) &&
        l->ndst == a->npieces && l->taking) {
        eng_agg_takeover_ready(ctx, l);
        return;
    }
    if (ok && type == ENG_MSG_PARAMS_END && eng_rbuf_ok(r) &&
        l->ndst == a->npieces && !l->params_ready) {
        l->params_ready = true;
        for (uint32_t i = 0; i < a->nparts; i++)
            eng_serve_one(ctx, &a->parts[i], i, l->widx);
        return;
    }
    const eng_agg_policy_t *pol = eng_agg_policy(ctx);
    if (ok && pol->on_worker_msg && pol->on_worker_msg(ctx, l, type, r))
        return;
    if (ok && type == ENG_MSG_LR && eng_on_lr(ctx, l, r))
        return;
    if (ok && type == ENG_MSG_PUSHED && a->layout && !l->left &&
        eng_agg_on_pushed(ctx, l, r))
        return;
    if (ok && type == ENG_MSG_RELEASE && a->layout && !l->left &&
        eng_agg_on_release(ctx, l, r))
        return;
    if (type == ENG_MSG_LEAVE && l->widx >= 0 && eng_rbuf_ok(r) && !l->left) {
        eng_on_leave(ctx, l);
        return;
    }
    eng_fail_tell(ctx, STRATA_ERR_PROTO, "unexpected or malformed %s from %s",
                  eng_msg_name(type), eng_peer_name(peer));
}

static void eng_agg_on_disconnected(strata_ctx_t *ctx, eng_peer_t *peer,
                                    strata_status_t status)
{
    eng_wlink_t *l = peer->owner;
    eng_wlink_close(ctx, l);
    if (l->widx < 0) { /* a stray connection is no failure */
        eng_agg_forget(ctx, l, NULL);
        return;
    }
    if (ctx->agg->dropped[l->widx] && ctx->agg->layout)
        for (uint32_t i = 0; i < ctx->agg->nparts; i++)
            eng_try_reduce(ctx, i); /* names a counted push that never came */
    if (peer->left)
        return;
    const char *why = status == STRATA_OK ? "it closed the connection"
                                          : strata_strerror(status);
    eng_agg_lost(ctx, l, why);
}

/* ---- finalizing ---- */

static void eng_agg_close(strata_ctx_t *ctx)
{
    eng_agg_t *a = ctx->agg;
    for (eng_wlink_t *l = a->accepted; l; l = l->next)
        if (l->peer.ep) {
            l->peer.left = true;
            eng_wlink_close(ctx, l);
        }
    for (int p = 0; p < ENG_NPROV; p++)
        if (ctx->data_listener[p]) {
            tp_listener_close(ctx->data_listener[p]);
            ctx->data_listener[p] = NULL;
        }
}

/* BYE to the coordinator once every worker left; rank 0 then waits for
 * every rank's BYE before closing. */
static void eng_agg_leave(strata_ctx_t *ctx)
{
    eng_agg_t *a = ctx->agg;
    strata_status_t st = eng_fatal(ctx);
    if (st == STRATA_OK && !a->bye_sent) {
        if (a->ngone < ctx->nworkers)
            return;
        st = eng_boot_bye(ctx, &a->sends_pending);
        if (st != STRATA_OK)
            eng_fail(ctx, st, "cannot say goodbye: %s", strata_strerror(st));
        a->bye_sent = true;
        ctx->bye_sent = true;
        return;
    }
    if (st == STRATA_OK &&
        (a->sends_pending > 0 || (ctx->coord && !eng_coord_done(ctx))))
        return;
    eng_agg_close(ctx);
    a->leaving = false;
    eng_req_complete(ctx, a->finish_req, st);
    a->finish_req = NULL;
}

static void eng_agg_cmd(strata_ctx_t *ctx, eng_cmd_t *cmd)
{
    if (cmd->type == ENG_CMD_FINALIZE) {
        ctx->agg->finish_req = cmd->req;
        ctx->agg->leaving = true;
        return;
    }
    util_error("this operation is for workers; rank %d is an aggregator",
               ctx->rank);
    eng_req_complete(ctx, cmd->req, STRATA_ERR_STATE);
}

static void eng_agg_flush(strata_ctx_t *ctx)
{
    eng_agg_t *a = ctx->agg;
    for (int w = 0; a->layout && w < ctx->nworkers; w++)
        if (a->links[w] && util_ring_len(&a->links[w]->q) > 0)
            eng_wlink_post(ctx, a->links[w]);
    eng_agg_protect_flush(ctx);
    if (a->leaving)
        eng_agg_leave(ctx);
}

/* ---- metrics ---- */

/* Group g's clock on the shard: the least over its partitions. */
static int64_t eng_agg_group_clock(strata_ctx_t *ctx, uint32_t g)
{
    eng_agg_t *a = ctx->agg;
    uint32_t n = atomic_load_explicit(&a->nparts_shown, memory_order_acquire);
    if (n == 0)
        return 0;
    int64_t c = INT64_MAX;
    for (uint32_t i = 0; i < n; i++)
        c = eng_min64(c, atomic_load_explicit(&a->parts[i].done[g],
                                              memory_order_relaxed));
    return c;
}

static void eng_agg_staleness(strata_ctx_t *ctx, uint64_t *hist,
                              size_t nbuckets)
{
    eng_agg_t *a = ctx->agg;
    memset(hist, 0, nbuckets * sizeof(*hist));
    uint32_t n = atomic_load_explicit(&a->nparts_shown, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++) {
        eng_tracker_stats_t s;
        eng_tracker_stats(a->parts[i].tracker, &s);
        for (size_t b = 0; b < ENG_TRACKER_HIST_BUCKETS; b++)
            hist[b < nbuckets ? b : nbuckets - 1] += s.hist[b];
    }
}

/* ---- teardown ---- */

static void eng_wlink_free(eng_wlink_t *l)
{
    if (l->slots_mr)
        tp_mr_dereg(l->slots_mr);
    for (uint32_t r = 0; r < l->nrslots; r++)
        if (l->rslots_mr[r])
            tp_mr_dereg(l->rslots_mr[r]);
    util_free(l->rslots);
    util_free(l->rslots_mr);
    util_ring_fini(&l->q);
    util_free(l->dst);
    util_free(l->in_place);
    util_free(l->held);
    util_free(l);
}

void eng_agg_free(strata_ctx_t *ctx)
{
    eng_agg_t *a = ctx->agg;
    if (!a)
        return;
    eng_agg_close(ctx);
    eng_agg_ckpt_free(a);
    eng_agg_protect_free(a);
    eng_agg_stage_free(a);
    eng_agg_takeover_free(a);
    while (a->accepted) {
        eng_wlink_t *l = a->accepted;
        a->accepted = l->next;
        eng_wlink_free(l);
    }
    for (uint32_t i = 0; a->parts && i < a->nparts; i++) {
        eng_apart_t *ap = &a->parts[i];
        eng_tracker_destroy(ap->tracker);
        util_free(ap->arrived);
        util_free(ap->want);
        util_free(ap->served);
        util_free(ap->nsparse);
        util_free(ap->seg_at);
        util_free(ap->applied);
        util_free(ap->retired);
        util_free(ap->rejoin);
        util_free((void *)ap->done);
        util_free(ap->momentum);
        util_free(ap->master);
    }
    for (int p = 0; p < ENG_NPROV; p++)
        if (a->out_mr[p])
            tp_mr_dereg(a->out_mr[p]);
    if (a->upd.pool)
        strata_reduce_pool_destroy(a->upd.pool);
    eng_members_destroy(a->members);
    util_free(a->upd.scratch);
    eng_agg_lr_free(a);
    util_free(a->out);
    util_free(a->parts);
    util_free(a->piece_local);
    util_free(a->links);
    util_free(a->dropped);
    util_free(a->srcs);
    util_free(a->src_w);
    util_free(a->src_wc);
    util_free(a->pushed);
    util_free(a->until);
    util_free(a->shrink_at);
    util_free(a->grow_at);
    util_free(a->gap_lo);
    util_free(a->gap_hi);
    util_free(a->prev);
    util_free(a->early);
    util_free(a->dense);
    eng_layout_rx_free(&a->lrx);
    eng_layout_free(a->layout);
    util_free(a);
    ctx->agg = NULL;
}
