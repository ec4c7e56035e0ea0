/*
 * The data path of an endpoint: operations queued in its ring and posted as
 * work requests when the queue pairs have room, receives re-posted from its
 * buffers, and credits returned to the peer. No allocation, lock or system
 * call here (rxe's doorbell aside: software RoCE enters the kernel to post).
 *
 * Two cursors walk the ring in order. The data cursor posts plain writes,
 * striped over the queue pairs when large. The arrival cursor posts what the
 * peer sees (sends, writes with immediate, the trailer of a striped write) on
 * QP 0, each only once every write before it was posted and every stripe
 * before it on the other QPs completed, and only with a credit.
 */
#include "transport/verbs/verbs.h"

#include <arpa/inet.h>
#include <endian.h>
#include <string.h>

#include "util/log.h"

static bool tp_verbs_sq_room(const tp_verbs_qp_t *qp, uint32_t reserve)
{
    return qp->sq_head - qp->sq_tail < qp->sq_depth - reserve;
}

static bool tp_verbs_postable(const tp_verbs_ep_t *ep)
{
    return ep->state == TP_VERBS_EP_HANDSHAKE ||
           ep->state == TP_VERBS_EP_CONNECTED ||
           (ep->state == TP_VERBS_EP_CLOSED && ep->bye_pending);
}

static strata_status_t tp_verbs_post(tp_verbs_qp_t *qp, struct ibv_send_wr *wr,
                                     tp_verbs_op_t *op, uint32_t bind_id)
{
    tp_verbs_swr_t *s = &qp->swr[qp->sq_head & (qp->sq_depth - 1)];
    s->qp = qp;
    s->op = op;
    s->bind_id = bind_id;
    /* Unsignalled requests free their slots only when a later one
     * completes: signal at least twice per queue length. */
    if (qp->unsignaled + 1 >= qp->sq_depth / 2)
        wr->send_flags |= IBV_SEND_SIGNALED;
    wr->wr_id = (uintptr_t)s;
    wr->next = NULL;
    struct ibv_send_wr *bad;
    int err = ibv_post_send(qp->qp, wr, &bad);
    if (err) {
        util_error("verbs: ibv_post_send on QP %u to %s failed: %s",
                   qp->qp->qp_num, qp->ep->base.peer, strerror(err));
        tp_verbs_ep_fail(qp->ep, STRATA_ERR_IO);
        return STRATA_ERR_IO;
    }
    qp->sq_head++;
    if (wr->send_flags & IBV_SEND_SIGNALED)
        qp->unsignaled = 0;
    else
        qp->unsignaled++;
    if (op)
        op->wrs_out++;
    return STRATA_OK;
}

/* ---- queueing operations ---- */

/* The next free operation of the ring, cleared; NULL when it is full. */
static tp_verbs_op_t *tp_verbs_op_take(tp_verbs_ep_t *ep)
{
    if (ep->head - ep->tail == ep->nops)
        return NULL;
    tp_verbs_op_t *op = tp_verbs_op_at(ep, ep->head);
    memset(op, 0, offsetof(tp_verbs_op_t, small));
    op->seq = ep->head;
    op->stage = -1;
    return op;
}

static strata_status_t tp_verbs_op_new(tp_verbs_ep_t *ep, const char *what,
                                       tp_verbs_op_t **op_out)
{
    if (ep->state != TP_VERBS_EP_CONNECTED) {
        util_error("verbs: %s to %s: the endpoint is %s", what, ep->base.peer,
                   ep->state < TP_VERBS_EP_CONNECTED ? "not connected yet"
                                                     : "disconnected");
        return STRATA_ERR_STATE;
    }
    *op_out = tp_verbs_op_take(ep);
    return *op_out ? STRATA_OK : STRATA_ERR_AGAIN;
}

static void tp_verbs_op_queue(tp_verbs_ep_t *ep, tp_verbs_op_t *op)
{
    op->data_done = !op->data;
    op->arrival_done = !op->arrival;
    ep->head++;
    tp_verbs_pump(ep);
}

strata_status_t tp_verbs_write(tp_ep_t *base, tp_mr_t *mr, size_t off,
                               const tp_rdesc_t *dst, uint64_t dst_off,
                               size_t len, uint32_t imm, unsigned flags,
                               void *op_ctx)
{
    tp_verbs_ep_t *ep = tp_verbs_ep(base);
    tp_verbs_op_t *op;
    strata_status_t st = tp_verbs_op_new(ep, "tp_write", &op);
    if (st != STRATA_OK)
        return st;
    op->kind = TP_VERBS_OP_WRITE;
    op->len = (uint32_t)len;
    op->imm = imm;
    op->op_ctx = op_ctx;
    op->laddr = (uint64_t)(uintptr_t)mr->addr + off;
    op->lkey = ((tp_verbs_mr_t *)mr)->reg->lkey;
    op->raddr = dst->addr + dst_off;
    op->rkey = (uint32_t)dst->key;
    /* Striping needs the target's keys on QPs 1..: an MR key (export id 0)
     * serves them all, windows each have their own (EXPORT message). */
    op->export_id = (uint32_t)(dst->key >> 32);
    if (ep->nqps > 1 && len >= TP_VERBS_STRIPE_MIN &&
        (!op->export_id || tp_verbs_peer_export_find(ep, op->export_id))) {
        uint32_t per = (uint32_t)((len + ep->nqps - 1) / ep->nqps);
        op->stripe = (per + TP_VERBS_STRIPE_ALIGN - 1) &
                     ~(uint32_t)(TP_VERBS_STRIPE_ALIGN - 1);
    }
    bool one_wr = !op->stripe && len <= ep->ctx->max_msg;
    op->arrival = flags & TP_WRITE_IMM;
    op->data = !(op->arrival && one_wr); /* else one WRITE_WITH_IMM */
    tp_verbs_op_queue(ep, op);
    return STRATA_OK;
}

/* Payload of a send or message: in the operation, or in a staging slot. */
static strata_status_t tp_verbs_op_payload(tp_verbs_ep_t *ep, tp_verbs_op_t *op,
                                           const void *buf, size_t len)
{
    uint8_t *dst = op->small;
    if (len > sizeof(op->small)) {
        if (!ep->stage_free)
            return STRATA_ERR_AGAIN;
        op->stage = (int8_t)__builtin_ctz(ep->stage_free);
        ep->stage_free &= ~(1u << op->stage);
        dst = ep->stage + (size_t)op->stage * TP_VERBS_SLOT;
    }
    if (len)
        memcpy(dst, buf, len);
    op->laddr = (uint64_t)(uintptr_t)dst;
    op->lkey = ep->block_reg->lkey;
    op->len = (uint32_t)len;
    op->arrival = true;
    return STRATA_OK;
}

strata_status_t tp_verbs_send(tp_ep_t *base, const void *buf, size_t len,
                              void *op_ctx)
{
    tp_verbs_ep_t *ep = tp_verbs_ep(base);
    tp_verbs_op_t *op;
    strata_status_t st = tp_verbs_op_new(ep, "tp_send", &op);
    if (st != STRATA_OK)
        return st;
    op->kind = TP_VERBS_OP_SEND;
    op->op_ctx = op_ctx;
    st = tp_verbs_op_payload(ep, op, buf, len);
    if (st != STRATA_OK)
        return st;
    tp_verbs_op_queue(ep, op);
    return STRATA_OK;
}

strata_status_t tp_verbs_msg(tp_verbs_ep_t *ep, uint32_t type, const void *buf,
                             size_t len)
{
    if (!tp_verbs_postable(ep))
        return STRATA_ERR_STATE;
    tp_verbs_op_t *op = tp_verbs_op_take(ep);
    if (!op)
        return STRATA_ERR_AGAIN;
    op->kind = TP_VERBS_OP_MSG;
    op->imm = type;
    strata_status_t st = tp_verbs_op_payload(ep, op, buf, len);
    if (st != STRATA_OK)
        return st;
    tp_verbs_op_queue(ep, op);
    return STRATA_OK;
}

/* ---- posting ---- */

/* Posts the plain-write requests of op; false when a queue pair is full. */
static bool tp_verbs_post_data(tp_verbs_ep_t *ep, tp_verbs_op_t *op)
{
    uint32_t inline_max = ep->ctx->p.inline_max;
    do {
        unsigned q = op->stripe ? op->posted / op->stripe : 0;
        uint32_t end = op->len;
        if (op->stripe && (uint64_t)(q + 1) * op->stripe < op->len)
            end = (q + 1) * op->stripe;
        uint32_t n = end - op->posted;
        if (n > ep->ctx->max_msg)
            n = ep->ctx->max_msg;
        tp_verbs_qp_t *qp = &ep->qps[q];
        if (!tp_verbs_sq_room(qp, TP_VERBS_SQ_RESERVE))
            return false;
        uint32_t rkey = op->rkey;
        if (q && op->export_id) { /* gone since tp_write: it fails there */
            const uint32_t *keys = tp_verbs_peer_export_find(ep, op->export_id);
            rkey = keys ? keys[q] : op->rkey;
        }
        struct ibv_sge sge = {op->laddr + op->posted, n, op->lkey};
        struct ibv_send_wr wr = {
            .sg_list = &sge,
            .num_sge = n ? 1 : 0,
            .opcode = IBV_WR_RDMA_WRITE,
            .send_flags = (op->posted + n == end ? IBV_SEND_SIGNALED : 0) |
                          (n && n <= inline_max ? IBV_SEND_INLINE : 0),
            .wr.rdma = {op->raddr + op->posted, rkey},
        };
        if (tp_verbs_post(qp, &wr, op, 0) != STRATA_OK)
            return false;
        op->posted += n;
    } while (op->posted < op->len);
    return true;
}

/* Every write before op was posted, and the stripes on the other queue
 * pairs (op's own included) completed. */
static bool tp_verbs_fence_clear(const tp_verbs_ep_t *ep,
                                 const tp_verbs_op_t *op)
{
    if ((int32_t)(ep->data_cur - op->seq) < 0 ||
        (ep->data_cur == op->seq && !op->data_done))
        return false;
    for (unsigned q = 1; q < ep->nqps; q++) {
        const tp_verbs_qp_t *qp = &ep->qps[q];
        const tp_verbs_op_t *first = NULL;
        for (uint32_t i = qp->sq_tail; i != qp->sq_head && !first; i++)
            first = qp->swr[i & (qp->sq_depth - 1)].op; /* skip binds */
        if (first && (int32_t)(first->seq - op->seq) <= 0)
            return false;
    }
    return true;
}

static bool tp_verbs_post_arrival(tp_verbs_ep_t *ep, tp_verbs_op_t *op)
{
    tp_verbs_qp_t *qp = &ep->qps[0];
    if (!tp_verbs_fence_clear(ep, op) ||
        (int32_t)(*ep->inbox - ep->credits_used) <= 0 ||
        !tp_verbs_sq_room(qp, TP_VERBS_SQ_RESERVE))
        return false;
    struct ibv_sge sge = {op->laddr, op->len, op->lkey};
    struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = op->len ? 1 : 0};
    if (op->kind == TP_VERBS_OP_WRITE && !op->data) {
        wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.imm_data = htonl(op->imm);
        wr.wr.rdma.remote_addr = op->raddr;
        wr.wr.rdma.rkey = op->rkey;
    } else if (op->kind == TP_VERBS_OP_WRITE) {
        /* The trailer of a write made of several requests: {imm, len}. */
        uint32_t trailer[2] = {htole32(op->imm), htole32(op->len)};
        memcpy(op->small, trailer, sizeof(trailer));
        sge = (struct ibv_sge){(uintptr_t)op->small, sizeof(trailer),
                               ep->block_reg->lkey};
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND_WITH_IMM;
        wr.imm_data = htonl(TP_VERBS_MSG_WIMM);
    } else if (op->kind == TP_VERBS_OP_MSG) {
        wr.opcode = IBV_WR_SEND_WITH_IMM;
        wr.imm_data = htonl(op->imm);
    } else {
        wr.opcode = IBV_WR_SEND;
    }
    wr.send_flags = IBV_SEND_SIGNALED;
    if (sge.length && sge.length <= ep->ctx->p.inline_max)
        wr.send_flags |= IBV_SEND_INLINE;
    if (tp_verbs_post(qp, &wr, op, 0) != STRATA_OK)
        return false;
    ep->credits_used++;
    return true;
}

void tp_verbs_pump(tp_verbs_ep_t *ep)
{
    if (!tp_verbs_postable(ep))
        return;
    for (; ep->data_cur != ep->head; ep->data_cur++) {
        tp_verbs_op_t *op = tp_verbs_op_at(ep, ep->data_cur);
        if (op->data_done)
            continue;
        if (!tp_verbs_post_data(ep, op))
            break;
        op->data_done = true;
    }
    for (; ep->arr_cur != ep->head; ep->arr_cur++) {
        tp_verbs_op_t *op = tp_verbs_op_at(ep, ep->arr_cur);
        if (op->arrival_done)
            continue;
        if (!tp_verbs_post_arrival(ep, op))
            break;
        op->arrival_done = true;
    }
    if (ep->data_cur != ep->head || ep->arr_cur != ep->head)
        tp_verbs_todo(ep); /* blocked: on room, a fence or credits */
}

/* ---- completions of operations ---- */

void tp_verbs_op_finish(tp_verbs_ep_t *ep, tp_verbs_op_t *op)
{
    if (op->wrs_out || !op->data_done || !op->arrival_done)
        return;
    if (op->stage >= 0) {
        ep->stage_free |= 1u << op->stage;
        op->stage = -1;
    }
    if (!op->done) {
        op->done = true;
        if (op->kind == TP_VERBS_OP_MSG) {
            if (op->status == STRATA_OK)
                tp_verbs_hs_sent(ep, op);
            if (op->imm == TP_VERBS_MSG_BYE) {
                ep->bye_pending = false; /* sent or failed: tear down */
                tp_verbs_todo(ep);
            }
        } else if (ep->visible) {
            tp_event_t ev = {
                .type = op->kind == TP_VERBS_OP_WRITE ? TP_EV_WRITE_DONE
                                                      : TP_EV_SEND_DONE,
                .status = op->status,
                .ep = &ep->base,
                .op_ctx = op->op_ctx,
            };
            tp_verbs_event(ep->ctx, &ev);
        }
    }
    while (ep->tail != ep->head) {
        tp_verbs_op_t *t = tp_verbs_op_at(ep, ep->tail);
        if (!t->done || t->wrs_out)
            break;
        ep->tail++;
    }
}

/* Whatever is not posted yet fails now; what is posted fails as its
 * requests flush. */
void tp_verbs_ops_fail(tp_verbs_ep_t *ep, strata_status_t status)
{
    for (uint32_t s = ep->tail; s != ep->head; s++) {
        tp_verbs_op_t *op = tp_verbs_op_at(ep, s);
        if (op->done)
            continue;
        if (op->status == STRATA_OK)
            op->status = status;
        op->data_done = op->arrival_done = true;
        tp_verbs_op_finish(ep, op);
    }
    ep->data_cur = ep->arr_cur = ep->head;
}

bool tp_verbs_ep_drained(const tp_verbs_ep_t *ep)
{
    for (unsigned i = 0; i < ep->nqps; i++)
        if (ep->qps[i].sq_head != ep->qps[i].sq_tail)
            return false;
    return ep->rq_out == 0;
}

/* ---- receives and credits ---- */

/* Posts the free receive buffers again, in batches of an eighth of the
 * queue (all of them when force), then returns credits if due. */
void tp_verbs_rq_refill(tp_verbs_ep_t *ep, bool force)
{
    if (ep->state >= TP_VERBS_EP_FAILED ||
        ep->nrfree < (force ? 1 : (ep->rx_depth + 7) / 8))
        return;
    struct ibv_recv_wr wrs[64], *bad;
    struct ibv_sge sges[64];
    while (ep->nrfree) {
        uint32_t n = ep->nrfree < 64 ? ep->nrfree : 64;
        for (uint32_t i = 0; i < n; i++) {
            uint16_t b = ep->rfree[ep->nrfree - 1 - i];
            sges[i] = (struct ibv_sge){
                (uintptr_t)(ep->rmem + (size_t)b * TP_VERBS_SLOT),
                TP_VERBS_SLOT, ep->block_reg->lkey};
            wrs[i] = (struct ibv_recv_wr){
                .wr_id = (uintptr_t)&ep->rbufs[b] | TP_VERBS_WR_RECV,
                .next = i + 1 < n ? &wrs[i + 1] : NULL,
                .sg_list = &sges[i],
                .num_sge = 1,
            };
        }
        int err = ibv_post_recv(ep->qps[0].qp, wrs, &bad);
        uint32_t posted = err ? (uint32_t)(bad - wrs) : n;
        ep->nrfree -= posted;
        ep->rq_out += posted;
        ep->rq_posted += posted;
        if (err) {
            util_error("verbs: ibv_post_recv on the QP to %s failed: %s",
                       ep->base.peer, strerror(err));
            tp_verbs_ep_fail(ep, STRATA_ERR_IO);
            return;
        }
    }
    tp_verbs_credit_return(ep, false);
}

/* Tell the peer how many receives we posted in total, by writing the count
 * into its inbox; force: even if few changed (first time, keepalive). */
void tp_verbs_credit_return(tp_verbs_ep_t *ep, bool force)
{
    uint32_t fresh = ep->rq_posted - ep->rq_reported;
    if (ep->state != TP_VERBS_EP_CONNECTED ||
        (!force && fresh < (ep->rx_depth + 1) / 2))
        return;
    tp_verbs_qp_t *qp = &ep->qps[0];
    if (!tp_verbs_sq_room(qp, 0))
        return; /* the next completion makes room, and we come back */
    *ep->credit_src = ep->rq_posted;
    struct ibv_sge sge = {(uintptr_t)ep->credit_src, sizeof(uint32_t),
                          ep->block_reg->lkey};
    bool signal = force;
    struct ibv_send_wr wr = {
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_RDMA_WRITE,
        .send_flags =
            (signal ? IBV_SEND_SIGNALED : 0) |
            (ep->ctx->p.inline_max >= sizeof(uint32_t) ? IBV_SEND_INLINE : 0),
        .wr.rdma = {ep->peer_inbox_addr, ep->peer_inbox_rkey},
    };
    if (tp_verbs_post(qp, &wr, NULL, 0) == STRATA_OK)
        ep->rq_reported = ep->rq_posted;
}

/* Binds a type-2 window over all of mr, on qp (and so for its peer only). */
strata_status_t tp_verbs_post_bind(tp_verbs_qp_t *qp, struct ibv_mw *mw,
                                   struct ibv_mr *mr, uint32_t bind_id,
                                   uint32_t *rkey_out)
{
    if (!tp_verbs_sq_room(qp, 0))
        return STRATA_ERR_AGAIN;
    uint32_t rkey = ibv_inc_rkey(mw->rkey);
    struct ibv_send_wr wr = {
        .opcode = IBV_WR_BIND_MW,
        .send_flags = bind_id ? IBV_SEND_SIGNALED : 0,
        .bind_mw = {.mw = mw,
                    .rkey = rkey,
                    .bind_info = {.mr = mr,
                                  .addr = (uintptr_t)mr->addr,
                                  .length = mr->length,
                                  .mw_access_flags = IBV_ACCESS_REMOTE_WRITE}},
    };
    strata_status_t st = tp_verbs_post(qp, &wr, NULL, bind_id);
    if (st == STRATA_OK)
        *rkey_out = rkey;
    return st;
}
