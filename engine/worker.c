/*
 * The worker's side of the data path, on the progress thread.
 *
 * Commit: the worker lays its tensors out, registers their buffers with every
 * transport it uses and sends the layout to the coordinator. Once accepted,
 * each aggregator describes the worker's receive slots (SLOTS); the worker
 * answers with where each piece of the aggregator's partitions lands in its
 * parameter buffers (PARAMS), and the first worker uploads its parameters as
 * the initial model (INIT writes). The commit completes when the initial
 * model has landed.
 *
 * Push: a partition leaves once every tensor in it has been pushed in the
 * current clock: one write per piece, straight from the gradient buffer into
 * the slot of the clock's parity, the last carrying the immediate. A push for
 * clock c is taken only once the model for c - 1 has landed, which proves
 * the aggregators consumed clock c - 2 and freed that parity's slot.
 *
 * Pull: the aggregators write the model into the parameter buffers (or, where
 * a transport cannot reach the user's memory, into a staging buffer copied on
 * arrival). The pull gate holds the least clock every partition has reached.
 */
#include "engine/engine.h"

#include <stdio.h>
#include <string.h>

#include "engine/imm.h"
#include "engine/layout_wire.h"
#include "engine/topk_push.h"
#include "util/alloc.h"
#include "util/log.h"

_Static_assert(sizeof(uintptr_t) >= 8, "op contexts pack 64-bit values");

/* What a write carries: gradient pieces, the initial model, or a GDTopK
 * push (one write of a partition from the send buffer). */
enum { ENG_OP_GRAD = 1, ENG_OP_INIT = 2, ENG_OP_TOPK = 3 };

/* A tensor's registrations with one transport. */
typedef struct eng_treg {
    tp_mr_t *grad;      /* source of gradient writes */
    tp_mr_t *param;     /* target of model writes; NULL: staged */
    uint64_t param_off; /* of the tensor within param */
    tp_mr_t *src;       /* source of the initial model */
    uint64_t src_off;
    bool param_owned, src_owned;
} eng_treg_t;

typedef struct eng_wtensor {
    eng_tensor_desc_t desc;
    void *param, *grad;
    int64_t pushed_at;   /* last clock it was pushed in, -1 */
    int16_t push_req[2]; /* request of each clock parity (pool index) */
    eng_treg_t reg[ENG_NPROV];
} eng_wtensor_t;

/* What a link still has to post, oldest first. */
typedef struct eng_post {
    uint32_t part;
    uint8_t kind;
    int64_t clock;
    eng_topk_write_t topk; /* ENG_OP_TOPK */
} eng_post_t;

typedef struct eng_link {
    eng_peer_t peer;
    int prov;
    uint32_t shard;
    tp_rdesc_t slots;
    bool have_slots;
    bool acked; /* finalizing: its LEFT (or its disconnect) was counted */
    tp_rdesc_t *tdesc; /* [ntensors]: param regions exported to the peer */
    void *stage;       /* staging for model writes, if a tensor needs it */
    tp_mr_t *stage_mr;
    tp_rdesc_t stage_desc;
    eng_post_t *q;
    uint32_t qcap, qhead, qlen, qpiece; /* qpiece: next piece of the head */
} eng_link_t;

typedef struct eng_block {
    struct eng_block *next;
    void *addr;
    size_t len;
    int owner; /* provider whose tp_mem_alloc made it; -1: util_malloc */
    tp_mr_t *mr[ENG_NPROV];
} eng_block_t;

struct eng_worker {
    eng_wtensor_t *tensors;
    uint32_t ntensors, tcap;
    eng_layout_t *layout;
    eng_link_t *links;
    int nconnected, nslots;
    bool uses[ENG_NPROV];
    eng_block_t *blocks;

    int64_t clock;     /* pushes completed */
    uint32_t npushed;  /* tensors pushed in the current clock */
    uint32_t *pending; /* [nparts]: pieces not pushed yet this clock */
    int64_t *pulled;   /* [nparts]: clock of the model last landed */
    int64_t pull_min;
    uint32_t at_min; /* partitions whose pulled == pull_min */
    util_gate_t pull_gate;

    strata_request_t *commit_req, *finish_req;
    bool layout_ok;
    strata_request_t *parked[ENG_CMDQ_CAP]; /* pushes waiting for a pull */
    uint32_t nparked;
    uint32_t sends_pending;
    uint32_t acks_pending; /* LEFT answers awaited */
    bool leaving, left;
    eng_topk_push_t *topk; /* GDTopK (STRATA_GDTOPK=1) */
    void **grads;          /* [ntensors]: gradient buffers, for topk */
    bool frozen;           /* gssp regrouping: no push of freeze_at or later */
    int64_t freeze_at;     /* ... until GO */
};

static void eng_worker_on_connected(strata_ctx_t *ctx, eng_peer_t *peer,
                                    strata_status_t status);
static void eng_worker_on_recv(strata_ctx_t *ctx, eng_peer_t *peer,
                               unsigned type, eng_rbuf_t *r);
static void eng_worker_on_imm(strata_ctx_t *ctx, eng_peer_t *peer, uint32_t imm,
                              uint32_t len);
static void eng_worker_on_write_done(strata_ctx_t *ctx, eng_peer_t *peer,
                                     void *op_ctx, strata_status_t status);
static void eng_worker_on_disconnected(strata_ctx_t *ctx, eng_peer_t *peer,
                                       strata_status_t status);

static void eng_worker_cmd(strata_ctx_t *ctx, eng_cmd_t *cmd);
static void eng_worker_flush(strata_ctx_t *ctx);
static void eng_worker_fail(strata_ctx_t *ctx, strata_status_t status,
                            const char *msg);
static void eng_worker_on_welcome(strata_ctx_t *ctx);
static void eng_worker_on_coord_recv(strata_ctx_t *ctx, unsigned type,
                                     eng_rbuf_t *r);

static const eng_role_ops_t eng_worker_role = {
    .name = "worker",
    .cmd = eng_worker_cmd,
    .flush = eng_worker_flush,
    .fail = eng_worker_fail,
    .on_welcome = eng_worker_on_welcome,
    .on_coord_msg = eng_worker_on_coord_recv,
};

/* The worker's connection to an aggregator. */
static const eng_peer_ops_t eng_link_ops = {
    .what = "aggregator",
    .on_connected = eng_worker_on_connected,
    .on_message = eng_worker_on_recv,
    .on_imm = eng_worker_on_imm,
    .on_write_done = eng_worker_on_write_done,
    .on_disconnected = eng_worker_on_disconnected,
};

/* ---- registration and requests (application thread) ---- */

strata_status_t eng_worker_create(strata_ctx_t *ctx)
{
    eng_worker_t *w = util_calloc(1, sizeof(*w));
    if (w)
        w->links = util_calloc((size_t)ctx->naggs, sizeof(*w->links));
    if (!w || !w->links) {
        util_error("out of memory for the worker");
        util_free(w);
        return STRATA_ERR_NOMEM;
    }
    util_gate_init(&w->pull_gate, -1);
    w->pull_min = -1;
    ctx->worker = w;
    ctx->role_ops = &eng_worker_role;
    return STRATA_OK;
}

util_gate_t *eng_worker_pull_gate(strata_ctx_t *ctx)
{
    return &ctx->worker->pull_gate;
}

strata_status_t eng_worker_register(strata_ctx_t *ctx,
                                    const eng_tensor_desc_t *desc, void *param,
                                    void *grad, int *id_out)
{
    eng_worker_t *w = ctx->worker;
    if (eng_tensor_desc_check(desc) != STRATA_OK)
        return STRATA_ERR_INVALID;
    for (uint32_t i = 0; i < w->ntensors; i++)
        if (strcmp(w->tensors[i].desc.name, desc->name) == 0) {
            util_error("tensor '%s' is registered twice", desc->name);
            return STRATA_ERR_INVALID;
        }
    if (w->ntensors == w->tcap) {
        uint32_t cap = w->tcap ? 2 * w->tcap : 16;
        eng_wtensor_t *t = util_realloc(w->tensors, sizeof(*t) * cap);
        if (!t) {
            util_error("out of memory registering tensor '%s'", desc->name);
            return STRATA_ERR_NOMEM;
        }
        w->tensors = t;
        w->tcap = cap;
    }
    w->tensors[w->ntensors] = (eng_wtensor_t){
        .desc = *desc, .param = param, .grad = grad, .pushed_at = -1};
    if (id_out)
        *id_out = (int)w->ntensors;
    w->ntensors++;
    return STRATA_OK;
}

int eng_worker_link_prov(const strata_ctx_t *ctx, int a)
{
    return ctx->worker->links[a].prov;
}

uint32_t eng_worker_ntensors(const strata_ctx_t *ctx)
{
    return ctx->worker->ntensors;
}

const eng_tensor_desc_t *eng_worker_tensor(const strata_ctx_t *ctx, uint32_t i,
                                           void **param, void **grad)
{
    const eng_wtensor_t *t = &ctx->worker->tensors[i];
    *param = t->param;
    *grad = t->grad;
    return &t->desc;
}

/* ---- connecting ---- */

static strata_status_t eng_worker_connect(strata_ctx_t *ctx)
{
    eng_worker_t *w = ctx->worker;
    for (int a = 0; a < ctx->naggs; a++) {
        const eng_agg_info_t *info = &ctx->roster->aggs[a];
        eng_link_t *l = &w->links[a];
        bool local = strcmp(info->host_id, ctx->host_id) == 0;
        const char *name = tp_select(ctx->cfg, local);
        l->prov = eng_prov_index(name);
        l->shard = (uint32_t)a;
        l->peer = (eng_peer_t){
            .ops = &eng_link_ops, .q = &ctx->msgs, .rank = a, .owner = l};
        if (l->prov < 0 || !info->addr[l->prov][0]) {
            util_error("aggregator rank %d (%s) does not listen on the %s "
                       "transport this worker chose for it",
                       a, info->host_id, name);
            return STRATA_ERR_UNSUPPORTED;
        }
        strata_status_t st = eng_data_tp(ctx, l->prov, &l->peer.tp);
        if (st == STRATA_OK)
            st = tp_connect(l->peer.tp, info->addr[l->prov], &l->peer,
                            &l->peer.ep);
        if (st != STRATA_OK)
            return st;
        w->uses[l->prov] = true;
        util_debug("connecting to aggregator %d at %s over %s", a,
                   info->addr[l->prov], name);
    }
    return STRATA_OK;
}

/* The roster arrived: connect to every aggregator. */
static void eng_worker_on_welcome(strata_ctx_t *ctx)
{
    strata_status_t st = eng_worker_connect(ctx);
    if (st != STRATA_OK)
        eng_fail(ctx, st, "cannot connect to the aggregators: %s",
                 strata_strerror(st));
}

static void eng_worker_on_connected(strata_ctx_t *ctx, eng_peer_t *peer,
                                    strata_status_t status)
{
    eng_worker_t *w = ctx->worker;
    if (status != STRATA_OK) {
        const char *why = tp_ep_error(peer->ep);
        eng_fail(ctx, status, "cannot connect to %s at %s %s: %s",
                 eng_peer_name(peer), tp_name(peer->tp), tp_ep_peer(peer->ep),
                 why[0] ? why : strata_strerror(status));
        return;
    }
    unsigned char buf[32];
    eng_wbuf_t m;
    eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_JOIN);
    eng_put_u32(&m, (uint32_t)ctx->rank);
    status = eng_send(peer, &m, NULL);
    if (status != STRATA_OK) {
        eng_fail(ctx, status, "cannot greet %s: %s", eng_peer_name(peer),
                 strata_strerror(status));
        return;
    }
    peer->up = true;
    if (++w->nconnected == ctx->naggs)
        util_gate_raise(&ctx->joined, 1);
}

/* ---- memory ---- */

static eng_block_t *eng_block_find(eng_worker_t *w, const void *p, size_t len)
{
    for (eng_block_t *b = w->blocks; b; b = b->next)
        if ((const char *)p >= (char *)b->addr &&
            (const char *)p + len <= (char *)b->addr + b->len)
            return b;
    return NULL;
}

static void eng_block_free(eng_block_t *b)
{
    for (int i = 0; i < ENG_NPROV; i++)
        if (b->mr[i] && i != b->owner)
            tp_mr_dereg(b->mr[i]);
    if (b->owner >= 0)
        tp_mr_dereg(b->mr[b->owner]); /* frees the memory too */
    else
        util_free(b->addr);
    util_free(b);
}

/* Memory every transport in use can write into: from the transport that
 * needs its own allocations (shm), registered with the others. */
static strata_status_t eng_block_alloc(strata_ctx_t *ctx, size_t len,
                                       void **ptr_out)
{
    eng_worker_t *w = ctx->worker;
    eng_block_t *b = util_calloc(1, sizeof(*b));
    if (!b)
        return STRATA_ERR_NOMEM;
    b->len = len ? len : 1;
    b->owner = -1;
    for (int i = 0; i < ENG_NPROV; i++)
        if (w->uses[i] &&
            !(tp_caps(ctx->data_tp[i]) & TP_CAP_REMOTE_ANY_MEMORY))
            b->owner = i;
    strata_status_t st = STRATA_OK;
    if (b->owner >= 0)
        st = tp_mem_alloc(ctx->data_tp[b->owner], b->len,
                          TP_ACCESS_REMOTE_WRITE, &b->addr, &b->mr[b->owner]);
    else if (!(b->addr = util_aligned_alloc(4096, b->len)))
        st = STRATA_ERR_NOMEM;
    for (int i = 0; st == STRATA_OK && i < ENG_NPROV; i++)
        if (w->uses[i] && i != b->owner)
            st = tp_mr_reg(ctx->data_tp[i], b->addr, b->len,
                           TP_ACCESS_REMOTE_WRITE, &b->mr[i]);
    if (st != STRATA_OK) {
        util_error("strata_alloc of %zu bytes failed: %s", len,
                   strata_strerror(st));
        if (b->addr || b->mr[0] || b->mr[1] || b->mr[2])
            eng_block_free(b);
        else
            util_free(b);
        return st;
    }
    b->next = w->blocks;
    w->blocks = b;
    *ptr_out = b->addr;
    return STRATA_OK;
}

static strata_status_t eng_block_release(eng_worker_t *w, void *ptr)
{
    for (eng_block_t **pp = &w->blocks; *pp; pp = &(*pp)->next)
        if ((*pp)->addr == ptr) {
            eng_block_t *b = *pp;
            *pp = b->next;
            eng_block_free(b);
            return STRATA_OK;
        }
    util_error("strata_free: %p was not returned by strata_alloc", ptr);
    return STRATA_ERR_INVALID;
}

/* ---- commit ---- */

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
    l->qcap = 3 * lay->shard_nparts[l->shard] + 1;
    l->q = util_calloc(l->qcap, sizeof(*l->q));
    l->tdesc = util_calloc(w->ntensors, sizeof(*l->tdesc));
    if (!l->q || !l->tdesc)
        return STRATA_ERR_NOMEM;
    bool staged = false;
    for (uint32_t i = 0; i < w->ntensors; i++) {
        tp_mr_t *mr = w->tensors[i].reg[l->prov].param;
        if (!mr) {
            staged = true;
            continue;
        }
        strata_status_t st = tp_mr_export(mr, l->peer.ep, &l->tdesc[i]);
        if (st != STRATA_OK)
            return st;
    }
    if (!staged || lay->shard_bytes[l->shard] == 0)
        return STRATA_OK;
    strata_status_t st =
        tp_mem_alloc(l->peer.tp, lay->shard_bytes[l->shard],
                     TP_ACCESS_REMOTE_WRITE, &l->stage, &l->stage_mr);
    return st == STRATA_OK
               ? tp_mr_export(l->stage_mr, l->peer.ep, &l->stage_desc)
               : st;
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

static strata_status_t eng_commit_start(strata_ctx_t *ctx)
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
    strata_status_t st = eng_layout_build(descs, w->ntensors, pbytes,
                                          (uint32_t)ctx->naggs, &w->layout);
    util_free(descs);
    if (st != STRATA_OK)
        return st;
    const eng_layout_t *lay = w->layout;
    w->pending = util_malloc(sizeof(uint32_t) * lay->nparts);
    w->pulled = util_malloc(sizeof(int64_t) * lay->nparts);
    if (!w->pending || !w->pulled)
        return STRATA_ERR_NOMEM;
    /* Summing aggregators have no model for clock 0: it counts as pulled. */
    int64_t first_pull = ctx->policy->sum_only ? 0 : -1;
    for (uint32_t p = 0; p < lay->nparts; p++) {
        w->pending[p] = lay->parts[p].npieces;
        w->pulled[p] = first_pull;
    }
    w->pull_min = first_pull;
    util_gate_raise(&w->pull_gate, first_pull);
    w->at_min = lay->nparts;
    bool first = ctx->worker_index == 0 && !ctx->policy->sum_only;
    st = eng_register_all(ctx, first);
    for (int a = 0; st == STRATA_OK && a < ctx->naggs; a++)
        st = eng_link_setup(ctx, &w->links[a]);
    if (st == STRATA_OK && ctx->policy->gdtopk)
        st = eng_worker_topk_setup(ctx);
    if (st != STRATA_OK)
        return st;
    return eng_layout_send(&ctx->coord_peer, lay->tensors, lay->ntensors,
                           pbytes);
}

/* Committed once the layout is accepted, every aggregator has described
 * its slots and (unless aggregators only sum) the initial model landed. */
static void eng_commit_check(strata_ctx_t *ctx)
{
    eng_worker_t *w = ctx->worker;
    if (!w->commit_req || !w->layout_ok || w->nslots < ctx->naggs)
        return;
    if (!ctx->policy->sum_only && util_gate_load(&w->pull_gate) < 0)
        return;
    util_gate_raise(&ctx->committed, 1);
    eng_req_complete(ctx, w->commit_req, STRATA_OK);
    w->commit_req = NULL;
}

/* Where each piece of the aggregator's partitions lands here. */
static strata_status_t eng_send_params(strata_ctx_t *ctx, eng_link_t *l)
{
    const eng_layout_t *lay = ctx->worker->layout;
    const eng_wtensor_t *ts = ctx->worker->tensors;
    unsigned char buf[TP_MSG_MAX];
    eng_wbuf_t m;
    eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_PARAMS);
    strata_status_t st = STRATA_OK;
    for (uint32_t i = 0; st == STRATA_OK && i < lay->shard_nparts[l->shard];
         i++) {
        const eng_partition_t *part =
            &lay->parts[lay->shard_parts[l->shard][i]];
        for (uint32_t k = 0; st == STRATA_OK && k < part->npieces; k++) {
            uint32_t pc = part->first_piece + k;
            const eng_piece_t *piece = &lay->pieces[pc];
            const eng_treg_t *r = &ts[piece->tensor].reg[l->prov];
            const tp_rdesc_t *d =
                r->param ? &l->tdesc[piece->tensor] : &l->stage_desc;
            uint64_t off = r->param ? r->param_off + piece->tensor_off
                                    : part->shard_off + piece->part_off;
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
    eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_PARAMS_END);
    return st == STRATA_OK ? eng_send(&l->peer, &m, NULL) : st;
}

/* ---- posting writes ---- */

static void eng_link_enqueue(eng_link_t *l, uint32_t part, uint8_t kind,
                             int64_t clock)
{
    /* Cannot overflow: a partition is queued at most once per clock, for
     * two clocks at a time, plus once for the initial model. */
    l->q[(l->qhead + l->qlen++) % l->qcap] =
        (eng_post_t){.part = part, .kind = kind, .clock = clock};
}

/* A GDTopK push: one write, sparse or dense, from the send buffer. */
static strata_status_t eng_post_topk(strata_ctx_t *ctx, eng_link_t *l,
                                     const eng_post_t *e)
{
    const eng_layout_t *lay = ctx->worker->layout;
    const eng_partition_t *part = &lay->parts[e->part];
    uint64_t dst_off =
        (uint64_t)(e->clock & 1) * lay->shard_bytes[l->shard] + part->shard_off;
    uint32_t imm = eng_imm(e->topk.sparse ? ENG_IMM_SPARSE : ENG_IMM_GRAD,
                           e->clock, part->shard_index);
    strata_status_t st =
        tp_write(l->peer.ep, eng_topk_push_mr(ctx->worker->topk, l->prov),
                 e->topk.off, &l->slots, dst_off, e->topk.len, imm,
                 TP_WRITE_IMM, (void *)(uintptr_t)ENG_OP_TOPK);
    if (st == STRATA_OK)
        atomic_fetch_add_explicit(&ctx->cnt.bytes_pushed, e->topk.len,
                                  memory_order_relaxed);
    return st;
}

static strata_status_t eng_post_piece(strata_ctx_t *ctx, eng_link_t *l,
                                      const eng_post_t *e, uint32_t k)
{
    if (e->kind == ENG_OP_TOPK)
        return eng_post_topk(ctx, l, e);
    eng_worker_t *w = ctx->worker;
    const eng_layout_t *lay = w->layout;
    const eng_partition_t *part = &lay->parts[e->part];
    const eng_piece_t *pc = &lay->pieces[part->first_piece + k];
    eng_wtensor_t *t = &w->tensors[pc->tensor];
    const eng_treg_t *r = &t->reg[l->prov];
    bool last = k + 1 == part->npieces;
    uint64_t dst_off = (uint64_t)(e->clock & 1) * lay->shard_bytes[l->shard] +
                       part->shard_off + pc->part_off;
    tp_mr_t *src = e->kind == ENG_OP_GRAD ? r->grad : r->src;
    uint64_t src_off = e->kind == ENG_OP_GRAD ? 0 : r->src_off;
    uintptr_t op = e->kind;
    if (e->kind == ENG_OP_GRAD)
        op |= (uintptr_t)t->push_req[e->clock & 1] << 8;
    uint32_t imm = eng_imm(e->kind == ENG_OP_GRAD ? ENG_IMM_GRAD : ENG_IMM_INIT,
                           e->clock, part->shard_index);
    strata_status_t st =
        tp_write(l->peer.ep, src, src_off + pc->tensor_off, &l->slots, dst_off,
                 pc->len, imm, last ? TP_WRITE_IMM : 0, (void *)op);
    if (st == STRATA_OK && e->kind == ENG_OP_GRAD)
        atomic_fetch_add_explicit(&ctx->cnt.bytes_pushed, pc->len,
                                  memory_order_relaxed);
    return st;
}

/* Post what the link's queue holds until the transport's queue is full. */
static void eng_link_post(strata_ctx_t *ctx, eng_link_t *l)
{
    const eng_layout_t *lay = ctx->worker->layout;
    while (l->qlen > 0 && l->have_slots) {
        const eng_post_t *e = &l->q[l->qhead];
        uint32_t npieces =
            e->kind == ENG_OP_TOPK ? 1 : lay->parts[e->part].npieces;
        while (l->qpiece < npieces) {
            strata_status_t st = eng_post_piece(ctx, l, e, l->qpiece);
            if (st == STRATA_ERR_AGAIN)
                return;
            if (st != STRATA_OK) {
                eng_fail(ctx, st, "writing to %s failed: %s",
                         eng_peer_name(&l->peer), strata_strerror(st));
                return;
            }
            l->qpiece++;
        }
        l->qpiece = 0;
        l->qhead = (l->qhead + 1) % l->qcap;
        l->qlen--;
    }
}

/* ---- messages ---- */

static void eng_on_slots(strata_ctx_t *ctx, eng_link_t *l, eng_rbuf_t *r)
{
    eng_worker_t *w = ctx->worker;
    tp_rdesc_t d = {
        .addr = eng_get_u64(r), .len = eng_get_u64(r), .key = eng_get_u64(r)};
    const char *who = eng_peer_name(&l->peer);
    if (!eng_rbuf_ok(r) || !w->layout || l->have_slots ||
        d.len < 2 * w->layout->shard_bytes[l->shard]) {
        eng_fail(ctx, STRATA_ERR_PROTO, "malformed or unexpected SLOTS from %s",
                 who);
        return;
    }
    l->slots = d;
    l->have_slots = true;
    w->nslots++;
    strata_status_t st = eng_send_params(ctx, l);
    if (st != STRATA_OK) {
        eng_fail(ctx, st, "cannot describe the parameter buffers to %s: %s",
                 who, strata_strerror(st));
        return;
    }
    if (ctx->worker_index == 0 && !ctx->policy->sum_only)
        for (uint32_t i = 0; i < w->layout->shard_nparts[l->shard]; i++)
            eng_link_enqueue(l, w->layout->shard_parts[l->shard][i],
                             ENG_OP_INIT, 0);
    eng_link_post(ctx, l);
    eng_commit_check(ctx);
}

/* An aggregator answered LEAVE, by LEFT or by closing after it: counted
 * once per link, or a LEFT followed by its close would stand for another
 * aggregator's answer and the worker would close first (over verbs that
 * close can overtake the LEAVE still in that aggregator's queue). */
static void eng_worker_acked(strata_ctx_t *ctx, eng_link_t *l)
{
    if (!l->acked && ctx->worker->acks_pending > 0) {
        l->acked = true;
        ctx->worker->acks_pending--;
    }
}

static void eng_worker_on_recv(strata_ctx_t *ctx, eng_peer_t *peer,
                               unsigned type, eng_rbuf_t *r)
{
    if (type == ENG_MSG_SLOTS) {
        eng_on_slots(ctx, peer->owner, r);
        return;
    }
    if (type == ENG_MSG_LEFT && ctx->worker->leaving && eng_rbuf_ok(r)) {
        eng_worker_acked(ctx, peer->owner);
        return;
    }
    eng_fail(ctx, STRATA_ERR_PROTO, "unexpected message %s from %s",
             eng_msg_name(type), eng_peer_name(peer));
}

static void eng_worker_on_coord_recv(strata_ctx_t *ctx, unsigned type,
                                     eng_rbuf_t *r)
{
    eng_worker_t *w = ctx->worker;
    if (type == ENG_MSG_LAYOUT_OK && eng_rbuf_ok(r) && w->layout &&
        !w->layout_ok) {
        w->layout_ok = true;
        eng_commit_check(ctx);
        return;
    }
    if (type == ENG_MSG_ANSWER && ctx->rounds) {
        eng_rounds_on_answer(ctx, r);
        return;
    }
    if (type == ENG_MSG_FREEZE && ctx->policy->ops->regroups) {
        eng_worker_on_freeze(ctx, r);
        return;
    }
    if (type == ENG_MSG_GO && ctx->policy->ops->regroups) {
        eng_worker_on_go(ctx, r);
        return;
    }
    if (type == ENG_MSG_RANK && ctx->policy->ops->regroups) {
        eng_gssp_on_rank(ctx, r);
        return;
    }
    eng_fail(ctx, STRATA_ERR_PROTO,
             "unexpected message %s from the coordinator", eng_msg_name(type));
}

strata_status_t eng_worker_send_aggs(strata_ctx_t *ctx, const eng_wbuf_t *m)
{
    strata_status_t st = STRATA_OK;
    for (int a = 0; st == STRATA_OK && a < ctx->naggs; a++)
        st = eng_send(&ctx->worker->links[a].peer, m, NULL);
    return st;
}

/* ---- pushing ---- */

static eng_link_t *eng_link_of(eng_worker_t *w, uint32_t part)
{
    return &w->links[w->layout->parts[part].shard];
}

/* A piece of a push request is done with its gradient buffer. */
static void eng_piece_done(strata_ctx_t *ctx, strata_request_t *req,
                           strata_status_t status)
{
    if (status != STRATA_OK && req->status == STRATA_OK)
        req->status = status;
    if (req->outstanding > 0 && --req->outstanding == 0) {
        if (req->status == STRATA_OK)
            atomic_fetch_add_explicit(&ctx->cnt.pushes, 1,
                                      memory_order_relaxed);
        eng_req_complete(ctx, req, req->status);
    }
}

/* GDTopK: partition p of clock c is complete; its gradients go into the
 * residual and send buffer at once, so its pieces are done. */
static void eng_push_topk(strata_ctx_t *ctx, uint32_t p, int64_t c)
{
    eng_worker_t *w = ctx->worker;
    const eng_partition_t *part = &w->layout->parts[p];
    eng_post_t e = {.part = p, .kind = ENG_OP_TOPK, .clock = c};
    strata_status_t st =
        eng_topk_push_prepare(w->topk, p, c, w->grads, &e.topk);
    if (st != STRATA_OK) {
        eng_fail(ctx, st, "GDTopK on partition %u failed: %s", p,
                 strata_strerror(st));
        return;
    }
    eng_link_t *l = eng_link_of(w, p);
    l->q[(l->qhead + l->qlen++) % l->qcap] = e;
    for (uint32_t k = 0; k < part->npieces; k++) {
        const eng_piece_t *pc = &w->layout->pieces[part->first_piece + k];
        eng_wtensor_t *t = &w->tensors[pc->tensor];
        eng_piece_done(ctx, &ctx->req_pool[t->push_req[c & 1]], STRATA_OK);
    }
}

/* A push of the current clock: checked first, then each tensor's pieces
 * counted off their partitions; a partition whose pieces are all pushed is
 * queued for its aggregator. */
static strata_status_t eng_push(strata_ctx_t *ctx, strata_request_t *req)
{
    eng_worker_t *w = ctx->worker;
    const eng_layout_t *lay = w->layout;
    uint32_t n = req->ntensors ? req->ntensors : w->ntensors;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t t = req->ntensors ? req->tensors[i] : i;
        if (w->tensors[t].pushed_at == w->clock) {
            util_error("strata_push: tensor '%s' was already pushed in clock "
                       "%lld",
                       w->tensors[t].desc.name, (long long)w->clock);
            return STRATA_ERR_STATE;
        }
    }
    int64_t c = w->clock;
    req->outstanding = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t t = req->ntensors ? req->tensors[i] : i;
        w->tensors[t].pushed_at = c;
        w->tensors[t].push_req[c & 1] = (int16_t)(req - ctx->req_pool);
        req->outstanding += lay->tensor_npieces[t];
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t t = req->ntensors ? req->tensors[i] : i;
        uint32_t k0 = lay->tensor_first_piece[t];
        for (uint32_t k = k0; k < k0 + lay->tensor_npieces[t]; k++) {
            uint32_t p = lay->pieces[k].part;
            if (--w->pending[p] > 0)
                continue;
            if (w->topk && eng_topk_push_covers(w->topk, p))
                eng_push_topk(ctx, p, c);
            else
                eng_link_enqueue(eng_link_of(w, p), p, ENG_OP_GRAD, c);
        }
    }
    w->npushed += n;
    if (w->npushed == w->ntensors) {
        w->clock++;
        w->npushed = 0;
        for (uint32_t p = 0; p < lay->nparts; p++)
            w->pending[p] = lay->parts[p].npieces;
    }
    for (int a = 0; a < ctx->naggs; a++)
        eng_link_post(ctx, &w->links[a]);
    return STRATA_OK;
}

/* Pushes for clock c wait until the model for c - 1 has landed, and while
 * a regroup is being agreed from their clock on. */
static bool eng_may_push(const eng_worker_t *w)
{
    return w->pull_min >= w->clock - 1 &&
           !(w->frozen && w->clock >= w->freeze_at);
}

static void eng_push_or_park(strata_ctx_t *ctx, strata_request_t *req)
{
    eng_worker_t *w = ctx->worker;
    if (w->nparked > 0 || !eng_may_push(w)) {
        w->parked[w->nparked++] = req;
        return;
    }
    strata_status_t st = eng_push(ctx, req);
    if (st != STRATA_OK)
        eng_req_complete(ctx, req, st);
}

static void eng_unpark(strata_ctx_t *ctx)
{
    eng_worker_t *w = ctx->worker;
    uint32_t i = 0;
    for (; i < w->nparked && eng_may_push(w); i++) {
        strata_status_t st = eng_push(ctx, w->parked[i]);
        if (st != STRATA_OK)
            eng_req_complete(ctx, w->parked[i], st);
    }
    memmove(w->parked, w->parked + i, (w->nparked - i) * sizeof(*w->parked));
    w->nparked -= i;
}

static void eng_worker_on_write_done(strata_ctx_t *ctx, eng_peer_t *peer,
                                     void *op_ctx, strata_status_t status)
{
    (void)peer;
    uintptr_t op = (uintptr_t)op_ctx;
    /* A failed write means the connection broke; its DISCONNECTED event
     * follows and fails the job. */
    if ((op & 0xff) == ENG_OP_GRAD)
        eng_piece_done(ctx, &ctx->req_pool[op >> 8], status);
}

void eng_worker_epoch(strata_ctx_t *ctx, uint32_t epoch_ended)
{
    eng_worker_t *w = ctx->worker;
    if (!w->topk)
        return;
    uint64_t bits = atomic_load(&ctx->group_rank_bits);
    double rank;
    memcpy(&rank, &bits, sizeof(rank));
    eng_topk_push_epoch(w->topk, epoch_ended, rank);
}

/* ---- model arrivals ---- */

static void eng_unstage(strata_ctx_t *ctx, eng_link_t *l,
                        const eng_partition_t *part)
{
    eng_worker_t *w = ctx->worker;
    for (uint32_t k = 0; k < part->npieces; k++) {
        const eng_piece_t *pc = &w->layout->pieces[part->first_piece + k];
        eng_wtensor_t *t = &w->tensors[pc->tensor];
        if (t->reg[l->prov].param)
            continue;
        memcpy((char *)t->param + pc->tensor_off,
               (char *)l->stage + part->shard_off + pc->part_off, pc->len);
        atomic_fetch_add_explicit(&ctx->cnt.staging_copies, 1,
                                  memory_order_relaxed);
        atomic_fetch_add_explicit(&ctx->cnt.staging_bytes, pc->len,
                                  memory_order_relaxed);
    }
}

/* The least clock every partition reached moves when the last partition
 * at the old least moves on. */
static void eng_pulled(strata_ctx_t *ctx, uint32_t p)
{
    eng_worker_t *w = ctx->worker;
    if (w->pulled[p]++ != w->pull_min || --w->at_min > 0)
        return;
    int64_t min = INT64_MAX;
    for (uint32_t i = 0; i < w->layout->nparts; i++)
        min = w->pulled[i] < min ? w->pulled[i] : min;
    w->at_min = 0;
    for (uint32_t i = 0; i < w->layout->nparts; i++)
        w->at_min += w->pulled[i] == min;
    w->pull_min = min;
    atomic_fetch_add_explicit(&ctx->cnt.pulls, 1, memory_order_relaxed);
    util_gate_raise(&w->pull_gate, min);
    eng_unpark(ctx);
    eng_commit_check(ctx);
}

static void eng_worker_on_imm(strata_ctx_t *ctx, eng_peer_t *peer, uint32_t imm,
                              uint32_t len)
{
    eng_worker_t *w = ctx->worker;
    eng_link_t *l = peer->owner;
    uint32_t p = eng_imm_part(imm);
    if (eng_imm_kind(imm) != ENG_IMM_MODEL || !w->layout ||
        p >= w->layout->nparts || w->layout->parts[p].shard != l->shard ||
        !eng_imm_clock_is(imm, w->pulled[p] + 1)) {
        eng_fail(ctx, STRATA_ERR_PROTO,
                 "unexpected write (immediate 0x%08x, %u bytes) from %s", imm,
                 len, eng_peer_name(peer));
        return;
    }
    const eng_partition_t *part = &w->layout->parts[p];
    if (l->stage)
        eng_unstage(ctx, l, part);
    atomic_fetch_add_explicit(&ctx->cnt.bytes_pulled, part->bytes,
                              memory_order_relaxed);
    eng_pulled(ctx, p);
}

/* ---- regrouping (gssp) ---- */

/* The first clock none of whose gradients has left is where the worker
 * may change group: a clock half pushed stays in the old one. */
void eng_worker_on_freeze(strata_ctx_t *ctx, eng_rbuf_t *r)
{
    eng_worker_t *w = ctx->worker;
    uint32_t gen = eng_get_u32(r);
    if (!eng_rbuf_ok(r) || !w->layout) {
        eng_fail(ctx, STRATA_ERR_PROTO, "unexpected or malformed FREEZE");
        return;
    }
    w->frozen = true;
    w->freeze_at = w->clock + (w->npushed > 0);
    unsigned char buf[32];
    eng_wbuf_t m;
    eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_FROZEN);
    eng_put_u32(&m, gen);
    eng_put_i64(&m, w->freeze_at);
    strata_status_t st = eng_send(&ctx->coord_peer, &m, NULL);
    if (st != STRATA_OK)
        eng_fail(ctx, st, "cannot answer the coordinator's FREEZE: %s",
                 strata_strerror(st));
}

void eng_worker_on_go(strata_ctx_t *ctx, eng_rbuf_t *r)
{
    eng_worker_t *w = ctx->worker;
    uint32_t group = eng_get_u32(r);
    double rank = eng_get_f64(r);
    if (!eng_rbuf_ok(r) || !w->frozen || group >= ctx->policy->ngroups) {
        eng_fail(ctx, STRATA_ERR_PROTO, "unexpected or malformed GO");
        return;
    }
    w->frozen = false;
    atomic_store(&ctx->group, (int)group);
    uint64_t bits;
    memcpy(&bits, &rank, sizeof(bits));
    atomic_store(&ctx->group_rank_bits, bits);
    eng_unpark(ctx);
}

static void eng_worker_leave(strata_ctx_t *ctx);

static void eng_worker_flush(strata_ctx_t *ctx)
{
    eng_worker_t *w = ctx->worker;
    for (int a = 0; w->layout && a < ctx->naggs; a++)
        if (w->links[a].qlen > 0)
            eng_link_post(ctx, &w->links[a]);
    if (w->leaving)
        eng_worker_leave(ctx);
}

/* ---- commands ---- */

static void eng_worker_cmd(strata_ctx_t *ctx, eng_cmd_t *cmd)
{
    eng_worker_t *w = ctx->worker;
    strata_request_t *req = cmd->req;
    strata_status_t st = eng_fatal(ctx);
    if (cmd->type == ENG_CMD_QUERY || cmd->type == ENG_CMD_ROUND) {
        if (st == STRATA_OK)
            eng_rounds_cmd(ctx, cmd);
        return;
    }
    if (cmd->type == ENG_CMD_EPOCH) {
        if (st == STRATA_OK)
            eng_gssp_cmd(ctx, cmd);
        return;
    }
    if (st != STRATA_OK && cmd->type != ENG_CMD_FINALIZE &&
        cmd->type != ENG_CMD_FREE) {
        eng_req_complete(ctx, req, st);
        return;
    }
    switch (cmd->type) {
    case ENG_CMD_COMMIT:
        st = eng_commit_start(ctx);
        if (st != STRATA_OK) {
            eng_req_complete(ctx, req, st);
            return;
        }
        w->commit_req = req;
        return;
    case ENG_CMD_PUSH:
        eng_push_or_park(ctx, req);
        return;
    case ENG_CMD_ALLOC:
        st = eng_block_alloc(ctx, cmd->u.alloc.bytes, cmd->u.alloc.ptr_out);
        break;
    case ENG_CMD_FREE:
        st = eng_block_release(w, cmd->u.free_ptr);
        break;
    case ENG_CMD_FINALIZE:
        w->finish_req = req;
        w->leaving = true;
        return;
    case ENG_CMD_QUERY:
    case ENG_CMD_ROUND:
    case ENG_CMD_EPOCH:
        return; /* taken above */
    }
    eng_req_complete(ctx, req, st);
}

static bool eng_worker_busy(strata_ctx_t *ctx)
{
    eng_worker_t *w = ctx->worker;
    if (w->nparked > 0 || w->commit_req ||
        (w->layout && w->pull_min < w->clock))
        return true;
    for (int a = 0; a < ctx->naggs; a++)
        if (w->links[a].qlen > 0)
            return true;
    for (int i = 0; i < ENG_REQ_POOL; i++)
        if (ctx->req_pool[i].kind == ENG_REQ_PUSH &&
            ctx->req_pool[i].outstanding > 0 &&
            !atomic_load(&ctx->req_pool[i].done))
            return true;
    return false;
}

static void eng_worker_close(strata_ctx_t *ctx)
{
    eng_worker_t *w = ctx->worker;
    for (int a = 0; a < ctx->naggs; a++)
        if (w->links[a].peer.ep) {
            w->links[a].peer.left = true;
            eng_peer_close(&w->links[a].peer);
        }
    if (ctx->coord_peer.ep && ctx->rank != 0)
        eng_peer_close(&ctx->coord_peer);
}

/* Finalizing: once nothing is in flight, say LEAVE to every aggregator and
 * BYE to the coordinator; once those are sent, close. */
static void eng_worker_leave(strata_ctx_t *ctx)
{
    eng_worker_t *w = ctx->worker;
    strata_status_t st = eng_fatal(ctx);
    if (st == STRATA_OK && !ctx->bye_sent) {
        if (eng_worker_busy(ctx))
            return;
        unsigned char buf[16];
        eng_wbuf_t m;
        for (int a = 0; st == STRATA_OK && a < ctx->naggs; a++) {
            eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_LEAVE);
            w->sends_pending++;
            w->acks_pending++;
            /* From now on the aggregator may close first. */
            w->links[a].peer.left = true;
            st = eng_send(&w->links[a].peer, &m, &w->sends_pending);
        }
        if (st == STRATA_OK && ctx->policy->ops->regroups) {
            /* the clocks its groups reached: never reused by a regroup */
            eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_FINAL);
            eng_put_i64(&m, w->clock);
            st = eng_send(&ctx->coord_peer, &m, NULL);
        }
        if (st == STRATA_OK)
            st = eng_boot_bye(ctx, &w->sends_pending);
        if (st != STRATA_OK)
            eng_fail(ctx, st, "cannot say goodbye: %s", strata_strerror(st));
        ctx->bye_sent = true;
        return;
    }
    if (st == STRATA_OK && (w->sends_pending > 0 || w->acks_pending > 0))
        return;
    eng_worker_close(ctx);
    w->leaving = false;
    w->left = true;
    eng_req_complete(ctx, w->finish_req, st);
    w->finish_req = NULL;
}

/* ---- failure and teardown ---- */

static void eng_worker_fail(strata_ctx_t *ctx, strata_status_t status,
                            const char *msg)
{
    (void)msg;
    eng_worker_t *w = ctx->worker;
    util_gate_fail(&w->pull_gate, status);
    if (ctx->rounds)
        eng_rounds_fail(ctx, status);
    for (uint32_t i = 0; i < w->nparked; i++)
        eng_req_complete(ctx, w->parked[i], status);
    w->nparked = 0;
    if (w->commit_req)
        eng_req_complete(ctx, w->commit_req, status);
    w->commit_req = NULL;
    for (int i = 0; i < ENG_REQ_POOL; i++) {
        strata_request_t *req = &ctx->req_pool[i];
        if (req->kind == ENG_REQ_PUSH && req->outstanding > 0 &&
            !atomic_load(&req->done)) {
            req->outstanding = 0;
            eng_req_complete(ctx, req, status);
        }
    }
}

static void eng_worker_on_disconnected(strata_ctx_t *ctx, eng_peer_t *peer,
                                       strata_status_t status)
{
    eng_peer_close(peer);
    if (peer->left) {
        eng_worker_acked(ctx, peer->owner); /* its LEFT will not come */
        return;
    }
    eng_fail_soon(ctx, STRATA_ERR_PEER, "lost %s: %s", eng_peer_name(peer),
                  status == STRATA_OK ? "it closed the connection"
                                      : strata_strerror(status));
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

void eng_worker_free(strata_ctx_t *ctx)
{
    eng_worker_t *w = ctx->worker;
    if (!w)
        return;
    eng_worker_close(ctx);
    for (uint32_t i = 0; i < w->ntensors; i++)
        for (int p = 0; p < ENG_NPROV; p++)
            eng_treg_release(&w->tensors[i].reg[p]);
    for (int a = 0; a < ctx->naggs; a++) {
        eng_link_t *l = &w->links[a];
        if (l->stage_mr)
            tp_mr_dereg(l->stage_mr);
        util_free(l->q);
        util_free(l->tdesc);
    }
    while (w->blocks) {
        eng_block_t *b = w->blocks;
        w->blocks = b->next;
        eng_block_free(b);
    }
    eng_topk_push_free(w->topk);
    util_free(w->grads);
    eng_layout_free(w->layout);
    util_free(w->pending);
    util_free(w->pulled);
    util_free(w->links);
    util_free(w->tensors);
    util_free(w);
    ctx->worker = NULL;
}
