/*
 * The worker's side of the data path, on the progress thread: connecting to
 * the aggregators, posting pushes, model arrivals, messages, commands and
 * finalizing. engine/worker.h describes the design.
 */
#include "engine/worker.h"

#include <stdio.h>
#include <string.h>

#include "engine/imm.h"
#include "engine/protect.h"
#include "util/alloc.h"
#include "util/log.h"

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
static void eng_worker_pending(strata_ctx_t *ctx, char *buf, size_t len);
static void eng_worker_on_coord_recv(strata_ctx_t *ctx, unsigned type,
                                     eng_rbuf_t *r);
static void eng_worker_on_consumed(strata_ctx_t *ctx, eng_link_t *l,
                                   eng_rbuf_t *r);

static const eng_role_ops_t eng_worker_role = {
    .name = "worker",
    .cmd = eng_worker_cmd,
    .flush = eng_worker_flush,
    .fail = eng_worker_fail,
    .on_welcome = eng_worker_on_welcome,
    .pending = eng_worker_pending,
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
    eng_steptime_init(&w->steptime);
    util_keymap_init(&w->names);
    w->announced = -1;
    w->release_clock = -1;
    ctx->worker = w;
    ctx->role_ops = &eng_worker_role;
    return STRATA_OK;
}

int eng_worker_link_prov(const strata_ctx_t *ctx, int a)
{
    return ctx->worker->links[a].prov;
}

/* ---- connecting ---- */

/* Connect the link to aggregator a over the named provider. */
static strata_status_t eng_link_connect(strata_ctx_t *ctx, int a,
                                        const char *name)
{
    eng_worker_t *w = ctx->worker;
    const eng_agg_info_t *info = &ctx->roster->aggs[a];
    eng_link_t *l = &w->links[a];
    l->prov = eng_prov_index(name);
    l->agg = (uint32_t)a;
    l->peer = (eng_peer_t){
        .ops = &eng_link_ops, .q = &ctx->msgs, .rank = a, .owner = l};
    if (l->prov < 0 || !info->addr[l->prov][0]) {
        eng_fail_soon(ctx, STRATA_ERR_UNSUPPORTED,
                      "aggregator rank %d (%s) does not listen on the %s "
                      "transport this worker chose for it (does "
                      "STRATA_TRANSPORT differ between ranks?)",
                      a, info->host_id, name);
        return STRATA_ERR_UNSUPPORTED;
    }
    strata_status_t st = eng_data_tp(ctx, l->prov, &l->peer.tp);
    if (st == STRATA_OK)
        st = tp_connect(l->peer.tp, info->addr[l->prov], &l->peer, &l->peer.ep);
    if (st != STRATA_OK)
        return st;
    for (int p = 0; p < ENG_NPROV; p++) /* the providers the links use */
        w->uses[p] = false;
    for (int b = 0; b < ctx->naggs; b++)
        if (w->links[b].peer.ops)
            w->uses[w->links[b].prov] = true;
    util_debug("connecting to aggregator %d at %s over %s", a,
               info->addr[l->prov], name);
    return STRATA_OK;
}

static strata_status_t eng_worker_connect(strata_ctx_t *ctx)
{
    for (int a = 0; a < ctx->naggs; a++) {
        bool local = strcmp(ctx->roster->aggs[a].host_id, ctx->host_id) == 0;
        strata_status_t st =
            eng_link_connect(ctx, a, tp_select(&ctx->tp_params, local));
        if (st != STRATA_OK)
            return st;
    }
    return STRATA_OK;
}

/* An shm connection to an aggregator that looked local failed (the same
 * host id, yet another network namespace, where abstract sockets differ):
 * with STRATA_TRANSPORT=auto, tcp instead. */
static bool eng_link_fall_back(strata_ctx_t *ctx, eng_peer_t *peer)
{
    eng_link_t *l = peer->owner;
    int a = peer->rank;
    if (l->prov != ENG_PROV_SHM || ctx->tp_params.transport ||
        !ctx->roster->aggs[a].addr[ENG_PROV_TCP][0])
        return false;
    util_info("aggregator rank %d: shm at %s failed (%s): it runs in another "
              "network namespace of this host; connecting over tcp",
              a, tp_ep_peer(peer->ep), tp_ep_error(peer->ep));
    eng_peer_close(peer);
    return eng_link_connect(ctx, a, "tcp") == STRATA_OK;
}

/* Which aggregators this worker could not reach by the join deadline. */
static void eng_worker_pending(strata_ctx_t *ctx, char *buf, size_t len)
{
    eng_worker_t *w = ctx->worker;
    size_t n = (size_t)snprintf(buf, len, "no connection to");
    int shown = 0;
    for (int a = 0; a < ctx->naggs && n < len; a++) {
        eng_peer_t *p = &w->links[a].peer;
        if (p->up || !p->ep)
            continue;
        n += (size_t)snprintf(
            buf + n, len - n, "%s aggregator rank %d at %s %s",
            shown++ ? "," : "", a, tp_name(p->tp), tp_ep_peer(p->ep));
    }
    if (!shown)
        snprintf(buf, len, "the data connections are not all up");
    else if (n < len)
        snprintf(buf + n, len - n,
                 " (not reachable from here: is the address on the network "
                 "this host shares with it? STRATA_IFNAME chooses it)");
}

/* The roster arrived: connect to every aggregator. */
static void eng_worker_on_welcome(strata_ctx_t *ctx)
{
    strata_status_t st = eng_worker_connect(ctx);
    if (st != STRATA_OK) /* kept if it said more */
        eng_fail_soon(ctx, st, "cannot connect to the aggregators: %s",
                      strata_strerror(st));
}

static void eng_worker_on_connected(strata_ctx_t *ctx, eng_peer_t *peer,
                                    strata_status_t status)
{
    eng_worker_t *w = ctx->worker;
    if (status != STRATA_OK && eng_link_fall_back(ctx, peer))
        return;
    if (status != STRATA_OK) {
        const char *why = tp_ep_error(peer->ep);
        eng_fail_soon(ctx, status, "cannot connect to %s over %s: %s",
                      eng_peer_name(peer), tp_name(peer->tp),
                      why[0] ? why : strata_strerror(status));
        return;
    }
    unsigned char buf[32];
    eng_wbuf_t m;
    eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_JOIN);
    eng_put_u32(&m, (uint32_t)ctx->rank);
    status = eng_send(peer, &m, NULL);
    if (status != STRATA_OK) {
        eng_fail_soon(ctx, status, "cannot greet %s: %s", eng_peer_name(peer),
                      strata_strerror(status));
        return;
    }
    peer->up = true;
    if (++w->nconnected == ctx->naggs)
        util_gate_raise(&ctx->joined, 1);
}

/* ---- posting writes ---- */

void eng_link_enqueue(strata_ctx_t *ctx, eng_link_t *l, const eng_post_t *e)
{
    eng_post_t *slot = eng_wqueue_push(ctx, &l->q, &l->peer);
    if (slot)
        *slot = *e;
}

/* A GDTopK push: one write, sparse or dense, from the send buffer. */
static strata_status_t eng_post_topk(strata_ctx_t *ctx, eng_link_t *l,
                                     const eng_post_t *e)
{
    const eng_layout_t *lay = ctx->worker->layout;
    const eng_partition_t *part = &lay->parts[e->part];
    uint64_t dst_off = eng_layout_slot_off(part, e->clock);
    uint32_t imm = eng_imm(e->topk.sparse ? ENG_IMM_SPARSE : ENG_IMM_GRAD,
                           e->clock, part->held_index);
    strata_status_t st = tp_write(
        l->peer.ep, eng_topk_push_mr(ctx->worker->topk, l->prov), e->topk.off,
        eng_link_slots(l, part), dst_off, e->topk.len, imm, TP_WRITE_IMM,
        (void *)(uintptr_t)(ENG_OP_TOPK | (e->clock & 1 ? ENG_OP_ODD : 0)));
    if (st == STRATA_OK)
        atomic_fetch_add_explicit(&ctx->cnt.bytes_pushed, e->topk.len,
                                  memory_order_relaxed);
    return st;
}

/* Whether the aggregator reads the queued push in place. */
static bool eng_post_in_place(const strata_ctx_t *ctx, const eng_link_t *l,
                              const eng_post_t *e)
{
    return e->kind == ENG_OP_GRAD && l->in_place &&
           l->in_place[ctx->worker->layout->parts[e->part].held_index];
}

/* A push read in place: a zero-length write, its immediate all it says.
 * The gradients stay the application's to not touch until CONSUMED. */
static strata_status_t eng_post_notice(strata_ctx_t *ctx, eng_link_t *l,
                                       const eng_post_t *e)
{
    const eng_layout_t *lay = ctx->worker->layout;
    const eng_partition_t *part = &lay->parts[e->part];
    const eng_piece_t *pc = &lay->pieces[part->first_piece];
    uint64_t dst_off = eng_layout_slot_off(part, e->clock);
    strata_status_t st = tp_write(
        l->peer.ep, ctx->worker->tensors[pc->tensor].reg[l->prov].grad, 0,
        eng_link_slots(l, part), dst_off, 0,
        eng_imm(ENG_IMM_GRAD, e->clock, part->held_index), TP_WRITE_IMM,
        (void *)(uintptr_t)(ENG_OP_TOPK | (e->clock & 1 ? ENG_OP_ODD : 0)));
    if (st == STRATA_OK) {
        atomic_fetch_add_explicit(&ctx->cnt.in_place_pushes, 1,
                                  memory_order_relaxed);
        atomic_fetch_add_explicit(&ctx->cnt.in_place_bytes, part->bytes,
                                  memory_order_relaxed);
    }
    return st;
}

/* Pushes of partitions below the size the engine cuts a model into at
 * least (ENG_PARTITION_AUTO_MIN: below it a message's fixed cost outweighs
 * what splitting overlaps) that follow each other in a link's queue (one
 * clock, consecutive held indices, copied) go as one run: their writes,
 * then one immediate for all (each write and immediate a message, a
 * completion and maybe a wake-up on the aggregator). Partitions of the
 * engine's own size keep their immediates: across hosts the aggregator
 * reduces and serves each while the next ones arrive. */

static bool eng_fusable(const strata_ctx_t *ctx, const eng_link_t *l,
                        const eng_post_t *e)
{
    const eng_partition_t *part = &ctx->worker->layout->parts[e->part];
    return e->kind == ENG_OP_GRAD && !eng_post_in_place(ctx, l, e) &&
           part->bytes < ENG_PARTITION_AUTO_MIN &&
           eng_link_slots(l, part)->len != 0;
}

/* The head of the queue starts a run (fuse_*) when the entries after it
 * can go with it. */
static void eng_fuse_start(const strata_ctx_t *ctx, eng_link_t *l)
{
    const eng_layout_t *lay = ctx->worker->layout;
    const eng_post_t *h = util_ring_peek(&l->q);
    const eng_partition_t *hp = &lay->parts[h->part];
    l->fuse_n = 0;
    if (!eng_fusable(ctx, l, h) || hp->held_index >= ENG_IMM_RUN_FIRSTS)
        return;
    uint32_t n = 1;
    while (n < util_ring_len(&l->q) && n < ENG_IMM_RUN_MAX) {
        const eng_post_t *e = util_ring_at(&l->q, n);
        const eng_partition_t *p = &lay->parts[e->part];
        if (!eng_fusable(ctx, l, e) || e->clock != h->clock ||
            p->held_index != hp->held_index + n ||
            eng_link_slots(l, p) != eng_link_slots(l, hp))
            break;
        n++;
    }
    if (n > 1) {
        l->fuse_first = hp->held_index;
        l->fuse_n = n;
        l->fuse_at = 0;
    }
}

/* The immediate a push's last write carries, and whether it has one. */
static bool eng_push_imm(const eng_link_t *l, const eng_post_t *e,
                         const eng_partition_t *part, uint32_t *imm_out)
{
    if (!l->fuse_n) {
        *imm_out = eng_imm(e->kind == ENG_OP_GRAD ? ENG_IMM_GRAD : ENG_IMM_INIT,
                           e->clock, part->held_index);
        return true;
    }
    *imm_out =
        eng_imm(ENG_IMM_GRADS, e->clock, eng_imm_run(l->fuse_first, l->fuse_n));
    return l->fuse_at + 1 == l->fuse_n;
}

static strata_status_t eng_post_piece(strata_ctx_t *ctx, eng_link_t *l,
                                      const eng_post_t *e, uint32_t k)
{
    if (e->kind == ENG_OP_TOPK)
        return eng_post_topk(ctx, l, e);
    if (eng_post_in_place(ctx, l, e))
        return eng_post_notice(ctx, l, e);
    eng_worker_t *w = ctx->worker;
    const eng_layout_t *lay = w->layout;
    const eng_partition_t *part = &lay->parts[e->part];
    const eng_piece_t *pc = &lay->pieces[part->first_piece + k];
    eng_wtensor_t *t = &w->tensors[pc->tensor];
    const eng_treg_t *r = &t->reg[l->prov];
    uint32_t imm;
    bool last = eng_push_imm(l, e, part, &imm) && k + 1 == part->npieces;
    uint64_t dst_off = eng_layout_slot_off(part, e->clock) + pc->part_off;
    tp_mr_t *src = e->kind == ENG_OP_GRAD ? r->grad : r->src;
    uint64_t src_off = e->kind == ENG_OP_GRAD ? 0 : r->src_off;
    uintptr_t op = e->kind;
    if (e->kind == ENG_OP_GRAD)
        op |= (uintptr_t)t->push_req[e->clock & 1] |
              (e->clock & 1 ? ENG_OP_ODD : 0);
    strata_status_t st = tp_write(l->peer.ep, src, src_off + pc->tensor_off,
                                  eng_link_slots(l, part), dst_off, pc->len,
                                  imm, last ? TP_WRITE_IMM : 0, (void *)op);
    if (st == STRATA_OK && e->kind == ENG_OP_GRAD)
        atomic_fetch_add_explicit(&ctx->cnt.bytes_pushed, pc->len,
                                  memory_order_relaxed);
    return st;
}

/* Post what the link's queue holds until the transport's queue is full. */
void eng_link_post(strata_ctx_t *ctx, eng_link_t *l)
{
    const eng_layout_t *lay = ctx->worker->layout;
    /* No ep: the aggregator's connection broke, and its disconnect is
     * failing the job; a write would fail in its place. */
    if (!l->peer.ep)
        return;
    /* Control messages go first: no write overtakes a ROUND or LR still
     * waiting in the backlog, so aggregators see them before the clock's
     * gradients. */
    const eng_post_t *e;
    while (l->have_slots && !ctx->msgs.head && (e = util_ring_peek(&l->q))) {
        /* A taken shard's partitions wait for the taker's TAKEN. */
        if (eng_link_slots(l, &lay->parts[e->part])->len == 0)
            return;
        if (l->qpiece == 0 && !l->fuse_n)
            eng_fuse_start(ctx, l);
        uint32_t npieces =
            e->kind == ENG_OP_TOPK || eng_post_in_place(ctx, l, e)
                ? 1
                : lay->parts[e->part].npieces;
        while (l->qpiece < npieces) {
            strata_status_t st = eng_post_piece(ctx, l, e, l->qpiece);
            /* ERR_PEER where the worker outlives a lost aggregator: the
             * link broke, and its DISCONNECTED event follows. */
            if (st == STRATA_ERR_AGAIN ||
                (st == STRATA_ERR_PEER && eng_worker_outlives(ctx)))
                return;
            if (st != STRATA_OK) {
                eng_fail(ctx, st, "writing to %s failed: %s",
                         eng_peer_name(&l->peer), strata_strerror(st));
                return;
            }
            l->qpiece++;
        }
        l->qpiece = 0;
        util_ring_pop(&l->q);
        if (l->fuse_n && ++l->fuse_at == l->fuse_n)
            l->fuse_n = 0;
    }
}

/* ---- messages ---- */

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
        eng_worker_on_slots(ctx, peer->owner, r);
        return;
    }
    if (type == ENG_MSG_CONSUMED && ctx->worker->layout) {
        eng_worker_on_consumed(ctx, peer->owner, r);
        return;
    }
    if (type == ENG_MSG_LEFT && ctx->worker->leaving && eng_rbuf_ok(r)) {
        eng_worker_acked(ctx, peer->owner);
        return;
    }
    if (type == ENG_MSG_TAKEN && ctx->worker->layout) {
        eng_worker_on_taken(ctx, peer->owner, r);
        return;
    }
    eng_fail_tell(ctx, STRATA_ERR_PROTO, "unexpected message %s from %s",
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
    if (type == ENG_MSG_TAKEOVER && w->layout) {
        eng_worker_on_takeover(ctx, r);
        return;
    }
    const eng_worker_policy_t *pol = eng_worker_policy(ctx);
    if (pol->on_coord_msg && pol->on_coord_msg(ctx, type, r))
        return;
    eng_fail(ctx, STRATA_ERR_PROTO,
             "unexpected message %s from the coordinator", eng_msg_name(type));
}

strata_status_t eng_worker_send_aggs(strata_ctx_t *ctx, const eng_wbuf_t *m)
{
    strata_status_t st = STRATA_OK;
    for (int a = 0; st == STRATA_OK && a < ctx->naggs; a++)
        if (!ctx->worker->links[a].lost) /* its shard is taken over */
            st = eng_send(&ctx->worker->links[a].peer, m, NULL);
    return st;
}

/* ---- pushing ---- */

static eng_link_t *eng_link_of(eng_worker_t *w, uint32_t part)
{
    return &w->links[w->layout->parts[part].holder];
}

void eng_piece_done(strata_ctx_t *ctx, strata_request_t *req,
                    strata_status_t status)
{
    if (status != STRATA_OK && req->status == STRATA_OK)
        req->status = status;
    if (req->outstanding > 0 && --req->outstanding == 0) {
        req->pushing = false;
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
    eng_link_enqueue(ctx, l, &e);
    w->unlanded[c & 1]++;
    for (uint32_t k = 0; k < part->npieces; k++) {
        const eng_piece_t *pc = &w->layout->pieces[part->first_piece + k];
        eng_wtensor_t *t = &w->tensors[pc->tensor];
        eng_piece_done(ctx, t->push_req[c & 1], STRATA_OK);
    }
}

/* Partition p's push of clock c, read in place and not consumed yet: its
 * aggregator copies it and says CONSUMED (before or after the notice: it
 * waits for whichever comes last). */
static void eng_zc_release(strata_ctx_t *ctx, uint32_t p, int64_t c)
{
    eng_worker_t *w = ctx->worker;
    eng_link_t *l = eng_link_of(w, p);
    uint32_t si = w->layout->parts[p].held_index;
    if (!l->in_place || !l->in_place[si] || l->zc_queued[si] != c ||
        l->zc_consumed[si] >= c)
        return;
    eng_send_part_clock(&l->peer, ENG_MSG_RELEASE, si, c);
}

/* Partition p of clock c is complete, but its aggregator was lost, or
 * it moved and c is before the resume clock: nothing is written, its
 * pieces are done. */
static void eng_push_drop(strata_ctx_t *ctx, uint32_t p, int64_t c)
{
    eng_worker_t *w = ctx->worker;
    const eng_partition_t *part = &w->layout->parts[p];
    for (uint32_t k = 0; k < part->npieces; k++) {
        const eng_piece_t *pc = &w->layout->pieces[part->first_piece + k];
        eng_piece_done(ctx, w->tensors[pc->tensor].push_req[c & 1], STRATA_OK);
    }
}

/* Partition p of clock c is complete: queued for its aggregator, as its
 * pieces' writes or, read in place, one notice. */
static void eng_push_part(strata_ctx_t *ctx, uint32_t p, int64_t c)
{
    eng_worker_t *w = ctx->worker;
    eng_link_t *l = eng_link_of(w, p);
    uint32_t si = w->layout->parts[p].held_index;
    eng_link_enqueue(ctx, l,
                     &(eng_post_t){.part = p, .kind = ENG_OP_GRAD, .clock = c});
    if (l->in_place && l->in_place[si]) {
        l->zc_queued[si] = c;
        w->in_place_out[c & 1]++;
        w->unlanded[c & 1]++;
        if (w->release_clock == c)
            eng_zc_release(ctx, p, c);
    } else
        w->unlanded[c & 1] += w->layout->parts[p].npieces;
}

/* ENG_CMD_RELEASE: the application waits on a push of clock c before that
 * clock is whole. The aggregators would read its partitions in place only
 * once the clock is (PUSHED): they copy them now instead, and those queued
 * later in clock c as they come (eng_push_part). */
static void eng_worker_release(strata_ctx_t *ctx, int64_t c)
{
    eng_worker_t *w = ctx->worker;
    w->release_clock = c;
    for (uint32_t p = 0; p < w->layout->nparts; p++)
        eng_zc_release(ctx, p, c);
}

void eng_zc_consume(strata_ctx_t *ctx, eng_link_t *l, uint32_t si, int64_t c)
{
    eng_worker_t *w = ctx->worker;
    const eng_layout_t *lay = w->layout;
    l->zc_consumed[si] = c;
    const eng_partition_t *part = &lay->parts[lay->held_parts[l->agg][si]];
    for (uint32_t k = 0; k < part->npieces; k++) {
        const eng_piece_t *pc = &lay->pieces[part->first_piece + k];
        eng_piece_done(ctx, w->tensors[pc->tensor].push_req[c & 1], STRATA_OK);
    }
    if (--w->in_place_out[c & 1] == 0)
        eng_worker_unpark(ctx);
}

/* CONSUMED: an aggregator reduced (or copied) a push it read in place, and
 * no model write said so. */
static void eng_worker_on_consumed(strata_ctx_t *ctx, eng_link_t *l,
                                   eng_rbuf_t *r)
{
    const eng_layout_t *lay = ctx->worker->layout;
    uint32_t si = eng_get_u32(r);
    int64_t c = eng_get_i64(r);
    if (!eng_rbuf_ok(r) || !l->in_place || si >= lay->held_nparts[l->agg] ||
        !l->in_place[si] || c != l->zc_consumed[si] + 1 ||
        c > l->zc_queued[si]) {
        eng_fail_tell(ctx, STRATA_ERR_PROTO,
                      "malformed or unexpected CONSUMED (partition %u, clock "
                      "%lld) from %s",
                      si, (long long)c, eng_peer_name(&l->peer));
        return;
    }
    eng_zc_consume(ctx, l, si, c);
}

/* A push of the current clock: checked first, then each tensor's pieces
 * counted off their partitions; a partition whose pieces are all pushed is
 * queued for its aggregator. */
static strata_status_t eng_push(strata_ctx_t *ctx, strata_request_t *req)
{
    uint64_t t0 = util_now_ns();
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
        w->tensors[t].push_req[c & 1] = req;
        req->outstanding += lay->tensor_npieces[t];
    }
    req->pushing = req->outstanding > 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t t = req->ntensors ? req->tensors[i] : i;
        uint32_t k0 = lay->tensor_first_piece[t];
        for (uint32_t k = k0; k < k0 + lay->tensor_npieces[t]; k++) {
            uint32_t p = lay->pieces[k].part;
            if (--w->pending[p] > 0)
                continue;
            if (eng_push_dropped(w, p, c))
                eng_push_drop(ctx, p, c);
            else if (w->topk && eng_topk_push_covers(w->topk, p))
                eng_push_topk(ctx, p, c);
            else
                eng_push_part(ctx, p, c);
        }
    }
    w->npushed += n;
    bool whole = w->npushed == w->ntensors;
    if (whole) {
        if (eng_worker_policy(ctx)->pushed)
            eng_worker_policy(ctx)->pushed(ctx, c, req->pushed_ns);
        w->clock++;
        w->npushed = 0;
        for (uint32_t p = 0; p < lay->nparts; p++)
            w->pending[p] = lay->parts[p].npieces;
        eng_worker_announce(ctx);
    }
    for (int a = 0; a < ctx->naggs; a++)
        eng_link_post(ctx, &w->links[a]);
    uint64_t t1 = util_now_ns();
    if (whole)
        w->posted_ns[c & 1] = t1;
    atomic_fetch_add_explicit(&ctx->cnt.push_handoff_ns, t0 - req->pushed_ns,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&ctx->cnt.push_post_ns, t1 - t0,
                              memory_order_relaxed);
    return STRATA_OK;
}

/* Pushes for clock c wait until the model for c - 1 has landed, and (its
 * first) until those of c - 2 read in place were consumed (c's requests
 * take their places), and while a regroup is being agreed from their clock
 * on. */
static bool eng_may_push(const eng_worker_t *w)
{
    return w->pull_min >= w->clock - 1 &&
           (w->npushed > 0 || w->in_place_out[w->clock & 1] == 0) &&
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

void eng_worker_unpark(strata_ctx_t *ctx)
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

/* Every clock whose writes all completed, in order, is announced to every
 * aggregator (PUSHED): an aggregator reduces a worker's push of clock c only
 * once told, so when the worker is lost, the clocks every aggregator may
 * have applied are the clocks every aggregator holds in full (the newest
 * announced anywhere), and none applies a push another never got. */
void eng_worker_announce(strata_ctx_t *ctx)
{
    eng_worker_t *w = ctx->worker;
    /* A push to one aggregator is announced by its last write there
     * (eng_agg_landed). */
    if (!w->announces)
        return;
    while (w->nbroken == 0 && w->announced + 1 < w->clock &&
           w->unlanded[(w->announced + 1) & 1] == 0) {
        unsigned char buf[16];
        eng_wbuf_t m;
        eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_PUSHED);
        eng_put_i64(&m, ++w->announced);
        /* A link that broke fails the job through its disconnect. */
        for (int a = 0; a < ctx->naggs; a++)
            if (w->links[a].peer.ep &&
                eng_send(&w->links[a].peer, &m, NULL) != STRATA_OK)
                util_debug("cannot say PUSHED to %s",
                           eng_peer_name(&w->links[a].peer));
    }
}

static void eng_worker_on_write_done(strata_ctx_t *ctx, eng_peer_t *peer,
                                     void *op_ctx, strata_status_t status)
{
    eng_worker_t *w = ctx->worker;
    eng_link_t *l = peer->owner;
    uintptr_t op = (uintptr_t)op_ctx;
    unsigned kind = op & ENG_OP_MASK;
    /* A failed write means the connection broke; its DISCONNECTED event
     * follows and fails the job, unless the shard may be taken over: then
     * the push is done with its buffer, and the takeover decides. */
    bool broke = status != STRATA_OK;
    if (broke && !l->broken) {
        l->broken = true;
        w->nbroken++;
    }
    if (kind == ENG_OP_GRAD)
        eng_piece_done(ctx, (strata_request_t *)(op & ~(uintptr_t)ENG_OP_BITS),
                       broke && eng_worker_outlives(ctx) ? STRATA_OK : status);
    if (kind == ENG_OP_GRAD || kind == ENG_OP_TOPK) {
        w->unlanded[(op & ENG_OP_ODD) != 0]--;
        eng_worker_announce(ctx);
    }
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
               eng_link_stage(l, part) + part->held_off + pc->part_off,
               pc->len);
        atomic_fetch_add_explicit(&ctx->cnt.staging_copies, 1,
                                  memory_order_relaxed);
        atomic_fetch_add_explicit(&ctx->cnt.staging_bytes, pc->len,
                                  memory_order_relaxed);
    }
}

/* Partition p holds the model of `clock` now (the next one, or a taker's
 * first). The least clock every partition reached moves when the last
 * partition at the old least moves on. */
static void eng_pulled(strata_ctx_t *ctx, uint32_t p, int64_t clock)
{
    eng_worker_t *w = ctx->worker;
    int64_t was = w->pulled[p];
    if (clock == was)
        return;
    w->pulled[p] = clock;
    if (was != w->pull_min || --w->at_min > 0)
        return;
    int64_t min = INT64_MAX;
    for (uint32_t i = 0; i < w->layout->nparts; i++)
        min = w->pulled[i] < min ? w->pulled[i] : min;
    w->at_min = 0;
    for (uint32_t i = 0; i < w->layout->nparts; i++)
        w->at_min += w->pulled[i] == min;
    w->pull_min = min;
    eng_metrics_pulled(ctx, min);
    if (eng_worker_policy(ctx)->landed)
        eng_worker_policy(ctx)->landed(ctx, min);
    atomic_fetch_add_explicit(&ctx->cnt.pulls, 1, memory_order_relaxed);
    uint64_t now = util_now_ns();
    if (min >= 1 && w->posted_ns[(min - 1) & 1]) { /* pushing c asked c + 1 */
        atomic_fetch_add_explicit(&ctx->cnt.rounds, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&ctx->cnt.round_trip_ns,
                                  now - w->posted_ns[(min - 1) & 1],
                                  memory_order_relaxed);
    }
    atomic_store_explicit(&ctx->cnt.pull_raised_ns, now, memory_order_release);
    util_gate_raise(&w->pull_gate, min);
    eng_worker_unpark(ctx);
    eng_commit_check(ctx);
}

static void eng_worker_on_imm(strata_ctx_t *ctx, eng_peer_t *peer, uint32_t imm,
                              uint32_t len)
{
    eng_worker_t *w = ctx->worker;
    eng_link_t *l = peer->owner;
    uint32_t p = eng_imm_part(imm);
    if (eng_imm_kind(imm) != ENG_IMM_MODEL || !w->layout ||
        p >= w->layout->nparts || w->layout->parts[p].holder != l->agg ||
        !eng_imm_clock_is(imm, eng_model_next(w, p))) {
        eng_fail_tell(ctx, STRATA_ERR_PROTO,
                      "unexpected write (immediate 0x%08x, %u bytes) from %s",
                      imm, len, eng_peer_name(peer));
        return;
    }
    const eng_partition_t *part = &w->layout->parts[p];
    uint32_t si = part->held_index;
    /* Zero copy: the aggregator serves the model of clock c only once it
     * reduced this worker's push of c - 1 (eng_may_serve), so that push is
     * consumed if no CONSUMED said so already. */
    if (l->in_place && l->in_place[si] &&
        l->zc_consumed[si] == w->pulled[p] - 1 &&
        l->zc_queued[si] >= w->pulled[p])
        eng_zc_consume(ctx, l, si, w->pulled[p]);
    if (eng_link_stage(l, part))
        eng_unstage(ctx, l, part);
    atomic_fetch_add_explicit(&ctx->cnt.bytes_pulled, part->bytes,
                              memory_order_relaxed);
    int64_t c = eng_model_next(w, p);
    if (w->model_from)
        w->model_from[p] = -1;
    eng_pulled(ctx, p, c);
}

static void eng_worker_leave(strata_ctx_t *ctx);

static void eng_worker_flush(strata_ctx_t *ctx)
{
    eng_worker_t *w = ctx->worker;
    for (int a = 0; w->layout && a < ctx->naggs; a++)
        if (util_ring_len(&w->links[a].q) > 0)
            eng_link_post(ctx, &w->links[a]);
    if (w->leaving)
        eng_worker_leave(ctx);
}

/* ---- commands ---- */

/* ENG_CMD_LR: every aggregator hears it before any write of its clock
 * (writes wait for the control backlog: eng_link_post). */
static void eng_worker_send_lr(strata_ctx_t *ctx, const eng_cmd_t *cmd)
{
    unsigned char buf[32];
    eng_wbuf_t m;
    eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_LR);
    eng_put_i64(&m, cmd->u.lr.clock);
    eng_put_f64(&m, cmd->u.lr.lr);
    strata_status_t st = eng_worker_send_aggs(ctx, &m);
    if (st != STRATA_OK)
        eng_fail(ctx, st,
                 "cannot send the learning rate to the aggregators: "
                 "%s",
                 strata_strerror(st));
}

static void eng_worker_cmd(strata_ctx_t *ctx, eng_cmd_t *cmd)
{
    eng_worker_t *w = ctx->worker;
    strata_request_t *req = cmd->req;
    strata_status_t st = eng_fatal(ctx);
    if (cmd->type == ENG_CMD_QUERY || cmd->type == ENG_CMD_ROUND ||
        cmd->type == ENG_CMD_EPOCH) { /* the policy's own */
        if (st == STRATA_OK && eng_worker_policy(ctx)->cmd)
            eng_worker_policy(ctx)->cmd(ctx, cmd);
        return;
    }
    if (cmd->type == ENG_CMD_LR) {
        if (st == STRATA_OK)
            eng_worker_send_lr(ctx, cmd);
        return;
    }
    if (cmd->type == ENG_CMD_RELEASE) {
        if (st == STRATA_OK)
            eng_worker_release(ctx, cmd->u.release_clock);
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
        st = eng_block_release(ctx, cmd->u.free_ptr);
        break;
    case ENG_CMD_FINALIZE:
        w->finish_req = req;
        w->leaving = true;
        return;
    case ENG_CMD_QUERY:
    case ENG_CMD_ROUND:
    case ENG_CMD_EPOCH:
    case ENG_CMD_LR:
    case ENG_CMD_RELEASE:
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
        if (util_ring_len(&w->links[a].q) > 0)
            return true;
    return eng_req_push_pending(ctx);
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
            if (w->links[a].lost)
                continue;
            eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_LEAVE);
            w->sends_pending++;
            w->acks_pending++;
            /* From now on the aggregator may close first. */
            w->links[a].peer.left = true;
            st = eng_send(&w->links[a].peer, &m, &w->sends_pending);
        }
        if (st == STRATA_OK && eng_worker_policy(ctx)->leave)
            st = eng_worker_policy(ctx)->leave(ctx);
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
    if (eng_worker_policy(ctx)->fail)
        eng_worker_policy(ctx)->fail(ctx, status);
    for (uint32_t i = 0; i < w->nparked; i++)
        eng_req_complete(ctx, w->parked[i], status);
    w->nparked = 0;
    if (w->commit_req)
        eng_req_complete(ctx, w->commit_req, status);
    w->commit_req = NULL;
    eng_req_fail_pushes(ctx, status);
}

static void eng_worker_on_disconnected(strata_ctx_t *ctx, eng_peer_t *peer,
                                       strata_status_t status)
{
    eng_peer_close(peer);
    if (peer->left) {
        eng_worker_acked(ctx, peer->owner); /* its LEFT will not come */
        return;
    }
    /* Whether a survivor takes its shard over the coordinator knows (a
     * clock of it protected or not): the note of a job that ends names it. */
    bool outlives = ctx->worker->layout && eng_worker_outlives(ctx);
    if (outlives)
        eng_link_lose(ctx, peer->owner);
    eng_fail_soon(ctx, STRATA_ERR_PEER, "lost %s: %s%s", eng_peer_name(peer),
                  status == STRATA_OK ? "it closed the connection"
                                      : strata_strerror(status),
                  outlives
                      ? " (STRATA_PROTECT_EVERY: said LOST, its shard "
                        "may be taken over by a survivor)"
                      : eng_protect_loss_note(ctx->cfg, ctx->policy->sum_only));
}

void eng_worker_free(strata_ctx_t *ctx)
{
    eng_worker_t *w = ctx->worker;
    if (!w)
        return;
    if (eng_worker_policy(ctx)->free)
        eng_worker_policy(ctx)->free(ctx);
    eng_worker_close(ctx);
    eng_takeover_free(ctx);
    eng_commit_free(ctx);
    eng_blocks_free(w);
    util_free(w->links);
    util_free(w->tensors);
    util_keymap_fini(&w->names);
    util_free(w->api.pushed_at);
    util_free(w);
    ctx->worker = NULL;
}
