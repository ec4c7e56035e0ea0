/*
 * The worker's commit: its tensors laid out and registered with every
 * transport it uses, the layout to the coordinator; per aggregator, its
 * slots (SLOTS) answered with where its partitions land here (PARAMS), and
 * the first worker's parameters written as the initial model.
 */
#include <string.h>

#include "engine/layout_wire.h"
#include "engine/worker.h"
#include "util/alloc.h"
#include "util/log.h"

static void eng_take_slots(strata_ctx_t *ctx, eng_link_t *l);

/* The first worker writes the initial model, unless aggregators only sum
 * or it rejoined a running job (the model is the aggregators'). */
static bool eng_worker_gives_model(const strata_ctx_t *ctx)
{
    return ctx->worker_index == 0 && !ctx->policy->sum_only &&
           ctx->start_clock == 0;
}

static strata_status_t eng_treg_one(strata_ctx_t *ctx, eng_wtensor_t *t,
                                    int prov, uint64_t bytes, bool need_src)
{
    eng_worker_t *w = ctx->worker;
    tp_ctx_t *tp = ctx->data_tp[prov];
    eng_treg_t *r = &t->reg[prov];
    strata_status_t st =
        tp_mr_reg(tp, t->grad, bytes, TP_ACCESS_LOCAL, &r->grad);
    if (st != STRATA_OK)
        return st;
    eng_block_t *b = eng_block_find(w, t->param, bytes);
    if (b) {
        r->param = r->src = b->mr[prov];
        r->param_off = r->src_off =
            (uint64_t)((char *)t->param - (char *)b->addr);
    } else if (tp_caps(tp) & TP_CAP_REMOTE_ANY_MEMORY) {
        st = tp_mr_reg(tp, t->param, bytes, TP_ACCESS_REMOTE_WRITE, &r->param);
        r->src = r->param;
        r->param_owned = st == STRATA_OK;
    } else if (need_src) {
        st = tp_mr_reg(tp, t->param, bytes, TP_ACCESS_LOCAL, &r->src);
        r->src_owned = st == STRATA_OK;
    }
    return st;
}

/* Register every tensor with every transport in use. */
static strata_status_t eng_register_all(strata_ctx_t *ctx, bool need_src)
{
    eng_worker_t *w = ctx->worker;
    for (uint32_t i = 0; i < w->ntensors; i++)
        for (int p = 0; p < ENG_NPROV; p++) {
            if (!w->uses[p])
                continue;
            strata_status_t st = eng_treg_one(
                ctx, &w->tensors[i], p, w->layout->tensor_bytes[i], need_src);
            if (st != STRATA_OK) {
                util_error("cannot register tensor '%s' with the %s "
                           "transport: %s",
                           w->tensors[i].desc.name, eng_prov_names[p],
                           strata_strerror(st));
                return st;
            }
        }
    return STRATA_OK;
}

/* Per-link state: post queue, exported regions, staging if needed. */
static strata_status_t eng_link_setup(strata_ctx_t *ctx, eng_link_t *l)
{
    eng_worker_t *w = ctx->worker;
    const eng_layout_t *lay = w->layout;
    strata_status_t st = util_ring_init(
        &l->q, sizeof(eng_post_t), eng_link_qroom(lay->held_nparts[l->agg]));
    l->tdesc = util_calloc(w->ntensors, sizeof(*l->tdesc));
    if (st != STRATA_OK || !l->tdesc)
        return STRATA_ERR_NOMEM;
    /* No ep: the aggregator's connection dropped, and the job's failure
     * naming it is on the way; exporting to it would fail in its place. */
    if (!l->peer.ep)
        return STRATA_OK;
    bool staged = false;
    for (uint32_t i = 0; i < w->ntensors; i++) {
        tp_mr_t *mr = w->tensors[i].reg[l->prov].param;
        if (!mr) {
            staged = true;
            continue;
        }
        st = tp_mr_export(mr, l->peer.ep, &l->tdesc[i]);
        if (st != STRATA_OK)
            return st;
    }
    if (!staged || lay->held_bytes[l->agg] == 0)
        return STRATA_OK;
    return eng_stage_alloc(l, lay->held_bytes[l->agg], &l->stage, &l->stage_mr,
                           &l->stage_desc);
}

strata_status_t eng_stage_alloc(eng_link_t *l, uint64_t bytes, void **stage_out,
                                tp_mr_t **mr_out, tp_rdesc_t *desc_out)
{
    strata_status_t st = tp_mem_alloc(l->peer.tp, bytes, TP_ACCESS_REMOTE_WRITE,
                                      stage_out, mr_out);
    return st == STRATA_OK ? tp_mr_export(*mr_out, l->peer.ep, desc_out) : st;
}

static strata_status_t eng_worker_topk_setup(strata_ctx_t *ctx)
{
    eng_worker_t *w = ctx->worker;
    w->grads = util_calloc(w->ntensors, sizeof(void *));
    if (!w->grads)
        return STRATA_ERR_NOMEM;
    for (uint32_t i = 0; i < w->ntensors; i++)
        w->grads[i] = w->tensors[i].grad;
    return eng_topk_push_create(ctx, w->layout, w->uses, &w->topk);
}

strata_status_t eng_commit_start(strata_ctx_t *ctx)
{
    eng_worker_t *w = ctx->worker;
    if (w->ntensors == 0) {
        util_error("strata_commit: no tensor was registered");
        return STRATA_ERR_STATE;
    }
    eng_tensor_desc_t *descs = util_malloc(sizeof(*descs) * w->ntensors);
    if (!descs)
        return STRATA_ERR_NOMEM;
    for (uint32_t i = 0; i < w->ntensors; i++)
        descs[i] = w->tensors[i].desc;
    uint64_t pbytes =
        (uint64_t)eng_config_int(ctx->cfg, ENG_CFG_PARTITION_BYTES);
    if (pbytes == 0) /* auto: every worker was told the same spans_hosts */
        pbytes = eng_layout_auto_partition(
            descs, w->ntensors, ctx->nshards - (uint32_t)ctx->roster->nspares,
            ctx->spans_hosts);
    atomic_store(&ctx->partition_bytes, pbytes);
    strata_status_t st =
        eng_layout_adopt(descs, w->ntensors, pbytes, ctx->nshards,
                         eng_spare_shards(ctx), &w->layout);
    if (st == STRATA_OK)
        st = eng_layout_hold(w->layout, (uint32_t)ctx->naggs);
    if (st != STRATA_OK)
        return st;
    const eng_layout_t *lay = w->layout;
    /* Decided once: a takeover may leave one aggregator holding it all. */
    w->announces = lay->holders_used > 1;
    w->pending = util_malloc(sizeof(uint32_t) * lay->nparts);
    w->pulled = util_malloc(sizeof(int64_t) * lay->nparts);
    if (!w->pending || !w->pulled)
        return STRATA_ERR_NOMEM;
    /* Summing aggregators have no model for clock 0: it counts as pulled.
     * A worker that rejoined starts at its first clock. */
    int64_t first_pull = ctx->start_clock - (ctx->policy->sum_only ? 0 : 1);
    w->clock = ctx->start_clock;
    w->announced = ctx->start_clock - 1;
    for (uint32_t p = 0; p < lay->nparts; p++) {
        w->pending[p] = lay->parts[p].npieces;
        w->pulled[p] = first_pull;
    }
    w->pull_min = first_pull;
    util_gate_raise(&w->pull_gate, first_pull);
    w->at_min = lay->nparts;
    bool first = eng_worker_gives_model(ctx);
    st = eng_register_all(ctx, first);
    for (int a = 0; st == STRATA_OK && a < ctx->naggs; a++)
        st = eng_link_setup(ctx, &w->links[a]);
    if (st == STRATA_OK && ctx->policy->gdtopk)
        st = eng_worker_topk_setup(ctx);
    if (st == STRATA_OK)
        st = eng_layout_send(&ctx->coord_peer, lay->tensors, lay->ntensors,
                             pbytes);
    for (int a = 0; st == STRATA_OK && a < ctx->naggs; a++)
        if (w->links[a].slots_early)
            eng_take_slots(ctx, &w->links[a]);
    return st;
}

/* Committed once the layout is accepted, every aggregator has described
 * its slots and (unless aggregators only sum) the initial model landed. */
void eng_commit_check(strata_ctx_t *ctx)
{
    eng_worker_t *w = ctx->worker;
    if (!w->commit_req || !w->layout_ok || w->nslots < ctx->naggs)
        return;
    if (!ctx->policy->sum_only &&
        util_gate_load(&w->pull_gate) < ctx->start_clock)
        return;
    util_gate_raise(&ctx->committed, 1);
    eng_req_complete(ctx, w->commit_req, STRATA_OK);
    w->commit_req = NULL;
}

/* Whether the aggregator of link l can read partition p's gradients in
 * place: they lie contiguous in one strata_alloc block the link's
 * transport exported (*b_out, at *off_out), apart from every parameter
 * buffer of theirs (the model lands there), and no GDTopK send buffer
 * stands in for them. */
static bool eng_part_in_place(const eng_worker_t *w, const eng_link_t *l,
                              uint32_t p, eng_block_t **b_out,
                              uint64_t *off_out)
{
    const eng_layout_t *lay = w->layout;
    const eng_partition_t *part = &lay->parts[p];
    if (w->topk && eng_topk_push_covers(w->topk, p))
        return false;
    const char *next = NULL;
    for (uint32_t k = 0; k < part->npieces; k++) {
        const eng_piece_t *pc = &lay->pieces[part->first_piece + k];
        const eng_wtensor_t *t = &w->tensors[pc->tensor];
        const char *at = (const char *)t->grad + pc->tensor_off;
        uint64_t n = lay->tensor_bytes[pc->tensor];
        if (k > 0 && at != next)
            return false;
        if ((const char *)t->grad < (const char *)t->param + n &&
            (const char *)t->param < (const char *)t->grad + n)
            return false;
        next = at + pc->len;
    }
    const char *first =
        (const char *)w->tensors[lay->pieces[part->first_piece].tensor].grad +
        lay->pieces[part->first_piece].tensor_off;
    eng_block_t *b = eng_block_find((eng_worker_t *)w, first, part->bytes);
    if (!b || !b->mr[l->prov])
        return false;
    *b_out = b;
    *off_out = (uint64_t)(first - (const char *)b->addr);
    return true;
}

/* Zero copy: which of the aggregator's partitions it reads in place here
 * (GRADS: the aggregator's index of each, the block it lies in, exported to the
 * aggregator, and where in it). */
static strata_status_t eng_send_grads(strata_ctx_t *ctx, eng_link_t *l)
{
    eng_worker_t *w = ctx->worker;
    const eng_layout_t *lay = w->layout;
    uint32_t n = lay->held_nparts[l->agg];
    if (!eng_config_int(ctx->cfg, ENG_CFG_ZERO_COPY) || n == 0 ||
        !(tp_caps(l->peer.tp) & TP_CAP_PEER_MAP))
        return STRATA_OK;
    l->in_place = util_calloc(n, sizeof(*l->in_place));
    l->zc_queued = util_malloc(n * sizeof(*l->zc_queued));
    l->zc_consumed = util_malloc(n * sizeof(*l->zc_consumed));
    if (!l->in_place || !l->zc_queued || !l->zc_consumed)
        return STRATA_ERR_NOMEM;
    unsigned char buf[TP_MSG_MAX];
    eng_wbuf_t m;
    eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_GRADS);
    strata_status_t st = STRATA_OK;
    for (uint32_t i = 0; st == STRATA_OK && i < n; i++) {
        l->zc_queued[i] = l->zc_consumed[i] = ctx->start_clock - 1;
        eng_block_t *b;
        uint64_t off;
        tp_rdesc_t d;
        if (!eng_part_in_place(w, l, lay->held_parts[l->agg][i], &b, &off))
            continue;
        st = tp_mr_export(b->mr[l->prov], l->peer.ep, &d);
        if (st != STRATA_OK)
            break;
        l->in_place[i] = true;
        b->read_in_place = w->reads_in_place = true;
        if (eng_wbuf_room(&m) < 36) {
            st = eng_send(&l->peer, &m, NULL);
            eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_GRADS);
        }
        eng_put_u32(&m, i);
        eng_put_u64(&m, d.addr);
        eng_put_u64(&m, d.len);
        eng_put_u64(&m, d.key);
        eng_put_u64(&m, off);
    }
    if (st == STRATA_OK && m.len > 2)
        st = eng_send(&l->peer, &m, NULL);
    return st;
}

strata_status_t eng_send_params_from(strata_ctx_t *ctx, eng_link_t *l,
                                     uint32_t from)
{
    const eng_layout_t *lay = ctx->worker->layout;
    const eng_wtensor_t *ts = ctx->worker->tensors;
    unsigned char buf[TP_MSG_MAX];
    eng_wbuf_t m;
    eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_PARAMS);
    strata_status_t st = STRATA_OK;
    for (uint32_t i = from; st == STRATA_OK && i < lay->held_nparts[l->agg];
         i++) {
        if (lay->held_parts[l->agg][i] == ENG_LAYOUT_MOVED)
            continue;
        const eng_partition_t *part = &lay->parts[lay->held_parts[l->agg][i]];
        for (uint32_t k = 0; st == STRATA_OK && k < part->npieces; k++) {
            uint32_t pc = part->first_piece + k;
            const eng_piece_t *piece = &lay->pieces[pc];
            const eng_treg_t *r = &ts[piece->tensor].reg[l->prov];
            const tp_rdesc_t *d = r->param ? &l->tdesc[piece->tensor]
                                           : eng_link_stage_desc(l, part);
            uint64_t off = r->param ? r->param_off + piece->tensor_off
                                    : part->held_off + piece->part_off;
            if (eng_wbuf_room(&m) < 36) {
                st = eng_send(&l->peer, &m, NULL);
                eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_PARAMS);
            }
            eng_put_u32(&m, pc);
            eng_put_u64(&m, d->addr);
            eng_put_u64(&m, d->len);
            eng_put_u64(&m, d->key);
            eng_put_u64(&m, off);
        }
    }
    if (st == STRATA_OK && m.len > 2)
        st = eng_send(&l->peer, &m, NULL);
    return st;
}

/* Where each piece of the aggregator's partitions lands here, and which it
 * reads in place. */
static strata_status_t eng_send_params(strata_ctx_t *ctx, eng_link_t *l)
{
    strata_status_t st = eng_send_params_from(ctx, l, 0);
    if (st == STRATA_OK)
        st = eng_send_grads(ctx, l);
    unsigned char buf[8];
    eng_wbuf_t m;
    eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_PARAMS_END);
    return st == STRATA_OK ? eng_send(&l->peer, &m, NULL) : st;
}

/* The aggregator's slots, once the layout is known. */
static void eng_take_slots(strata_ctx_t *ctx, eng_link_t *l)
{
    eng_worker_t *w = ctx->worker;
    const char *who = eng_peer_name(&l->peer);
    if (l->slots.len < 2 * w->layout->held_bytes[l->agg]) {
        eng_fail_tell(
            ctx, STRATA_ERR_PROTO,
            "SLOTS of %llu bytes from %s, for partitions of %llu bytes",
            (unsigned long long)l->slots.len, who,
            (unsigned long long)w->layout->held_bytes[l->agg]);
        return;
    }
    l->slots_early = false;
    l->have_slots = true;
    w->nslots++;
    strata_status_t st = eng_send_params(ctx, l);
    if (st != STRATA_OK) {
        eng_fail(ctx, st, "cannot describe the parameter buffers to %s: %s",
                 who, strata_strerror(st));
        return;
    }
    if (eng_worker_gives_model(ctx))
        for (uint32_t i = 0; i < w->layout->held_nparts[l->agg]; i++)
            eng_link_enqueue(
                ctx, l,
                &(eng_post_t){.part = w->layout->held_parts[l->agg][i],
                              .kind = ENG_OP_INIT});
    eng_link_post(ctx, l);
    eng_commit_check(ctx);
}

void eng_worker_on_slots(strata_ctx_t *ctx, eng_link_t *l, eng_rbuf_t *r)
{
    eng_worker_t *w = ctx->worker;
    tp_rdesc_t d = {
        .addr = eng_get_u64(r), .len = eng_get_u64(r), .key = eng_get_u64(r)};
    /* A rejoiner joins aggregators that know the layout: their SLOTS may
     * come before its commit. */
    bool early = !w->layout && ctx->start_clock > 0;
    if (!eng_rbuf_ok(r) || (!w->layout && !early) || l->have_slots ||
        l->slots_early) {
        eng_fail_tell(ctx, STRATA_ERR_PROTO,
                      "malformed or unexpected SLOTS from %s",
                      eng_peer_name(&l->peer));
        return;
    }
    l->slots = d;
    l->slots_early = early;
    if (!early)
        eng_take_slots(ctx, l);
}

static void eng_treg_release(eng_treg_t *r)
{
    if (r->grad)
        tp_mr_dereg(r->grad);
    if (r->param_owned)
        tp_mr_dereg(r->param);
    if (r->src_owned)
        tp_mr_dereg(r->src);
    *r = (eng_treg_t){0};
}

void eng_commit_free(strata_ctx_t *ctx)
{
    eng_worker_t *w = ctx->worker;
    for (uint32_t i = 0; i < w->ntensors; i++)
        for (int p = 0; p < ENG_NPROV; p++)
            eng_treg_release(&w->tensors[i].reg[p]);
    for (int a = 0; a < ctx->naggs; a++) {
        eng_link_t *l = &w->links[a];
        if (l->stage_mr)
            tp_mr_dereg(l->stage_mr);
        util_ring_fini(&l->q);
        util_free(l->tdesc);
        util_free(l->in_place);
        util_free(l->zc_queued);
        util_free(l->zc_consumed);
    }
    eng_topk_push_free(w->topk);
    util_free(w->grads);
    eng_layout_free(w->layout);
    util_free(w->pending);
    util_free(w->pulled);
}
