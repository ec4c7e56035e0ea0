/*
 * Progress: completions turned into events, error completions decoded, and
 * the queue of events not yet reported.
 */
#include "transport/verbs/verbs.h"

#include <arpa/inet.h>
#include <endian.h>
#include <string.h>

#include "util/log.h"

#define TP_VERBS_CQ_BATCH 32
#define TP_VERBS_TICK_NS 10000000u /* deadlines and keepalives: every 10 ms */

/* ---- the event queue ---- */

/* Free-running head and tail over a power-of-two ring. */
static bool tp_verbs_evq_grow(tp_verbs_ctx_t *c)
{
    uint32_t cap = c->evq_cap ? 2 * c->evq_cap : 256;
    tp_event_t *q = util_malloc(cap * sizeof(*q));
    if (!q)
        return false;
    uint32_t n = 0;
    for (uint32_t i = c->evq_head; i != c->evq_tail; i++)
        q[n++] = c->evq[i & (c->evq_cap - 1)];
    util_free(c->evq);
    c->evq = q;
    c->evq_cap = cap;
    c->evq_head = 0;
    c->evq_tail = n;
    return true;
}

void tp_verbs_event(tp_verbs_ctx_t *c, const tp_event_t *ev)
{
    if (c->evq_tail - c->evq_head == c->evq_cap && !tp_verbs_evq_grow(c)) {
        util_error("verbs: out of memory queueing an event; it is lost");
        return;
    }
    c->evq[c->evq_tail++ & (c->evq_cap - 1)] = *ev;
    if (ev->ep)
        tp_verbs_ep(ev->ep)->evq_refs++;
}

/* ---- decoding errors ---- */

strata_status_t tp_verbs_wc_status(enum ibv_wc_status status)
{
    switch (status) {
    case IBV_WC_SUCCESS:
        return STRATA_OK;
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
        return STRATA_ERR_PEER;
    case IBV_WC_REM_ACCESS_ERR:
        return STRATA_ERR_RANGE;
    case IBV_WC_REM_INV_REQ_ERR:
        return STRATA_ERR_PROTO;
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_LEN_ERR:
        return STRATA_ERR_INVALID;
    case IBV_WC_WR_FLUSH_ERR:
        return STRATA_ERR_CANCELED;
    default:
        return STRATA_ERR_IO;
    }
}

const char *tp_verbs_wc_hint(enum ibv_wc_status status)
{
    switch (status) {
    case IBV_WC_RETRY_EXC_ERR:
        return "no acknowledgement within the timeout and retries: the peer "
               "is dead or unreachable";
    case IBV_WC_RNR_RETRY_EXC_ERR:
        return "the peer posted no receive in time";
    case IBV_WC_REM_ACCESS_ERR:
        return "the peer refused the access: its key or range does not "
               "allow remote writes there";
    case IBV_WC_REM_INV_REQ_ERR:
        return "the peer found the request invalid";
    case IBV_WC_REM_OP_ERR:
        return "the peer could not complete the operation";
    case IBV_WC_LOC_PROT_ERR:
        return "the local buffer is not (or no longer) registered";
    case IBV_WC_LOC_LEN_ERR:
        return "a message longer than the receive buffer";
    case IBV_WC_WR_FLUSH_ERR:
        return "flushed: the queue pair failed before";
    default:
        return "device error";
    }
}

static void tp_verbs_wc_error(tp_verbs_qp_t *qp, const struct ibv_wc *wc,
                              const char *what)
{
    tp_verbs_ep_t *ep = qp->ep;
    if (ep->state >= TP_VERBS_EP_FAILED) {
        /* The flush of an earlier failure; or the cause of a disconnection
         * whose rdma_cm event overtook it: a peer that refused an access
         * fails and disconnects, and its DREQ may be seen before its NAK. */
        if (wc->status == IBV_WC_WR_FLUSH_ERR || ep->error != STRATA_ERR_PEER ||
            ep->disconnected_sent)
            return;
        ep->error = tp_verbs_wc_status(wc->status);
    }
    util_error("verbs: %s with %s failed on QP %u (%u of %u): %s: %s (vendor "
               "error %#x)",
               what, ep->base.peer, qp->qp->qp_num, qp->index, ep->nqps,
               ibv_wc_status_str(wc->status), tp_verbs_wc_hint(wc->status),
               wc->vendor_err);
    tp_verbs_ep_fail(ep, tp_verbs_wc_status(wc->status));
}

/* ---- completions ---- */

static void tp_verbs_send_done(tp_verbs_swr_t *s, const struct ibv_wc *wc)
{
    tp_verbs_qp_t *qp = s->qp;
    tp_verbs_ep_t *ep = qp->ep;
    if (wc->status != IBV_WC_SUCCESS)
        tp_verbs_wc_error(qp, wc,
                          s->op ? "a write or send"
                                : "a credit "
                                  "return");
    /* A signalled request completes the unsignalled ones before it. */
    for (;;) {
        tp_verbs_swr_t *t = &qp->swr[qp->sq_tail & (qp->sq_depth - 1)];
        qp->sq_tail++;
        tp_verbs_op_t *op = t->op;
        if (t->bind_id && wc->status == IBV_WC_SUCCESS)
            tp_verbs_export_bound(ep, t->bind_id);
        if (op) {
            op->wrs_out--;
            if (t == s && wc->status != IBV_WC_SUCCESS &&
                wc->status != IBV_WC_WR_FLUSH_ERR &&
                (op->status == STRATA_OK || op->status == STRATA_ERR_PEER))
                op->status = tp_verbs_wc_status(wc->status); /* its own */
            else if (wc->status != IBV_WC_SUCCESS && op->status == STRATA_OK)
                op->status = ep->error ? ep->error : STRATA_ERR_IO;
            tp_verbs_op_finish(ep, op);
        }
        if (t == s)
            break;
    }
    tp_verbs_todo(ep); /* room in the send queue */
}

static void tp_verbs_arrival(tp_verbs_ep_t *ep, tp_event_type_t type,
                             uint32_t imm, const void *data, uint32_t len)
{
    if (ep->state != TP_VERBS_EP_CONNECTED) {
        if (ep->state < TP_VERBS_EP_FAILED) {
            util_error("verbs: %s sent data before the handshake finished",
                       ep->base.peer);
            tp_verbs_ep_fail(ep, STRATA_ERR_PROTO);
        }
        return;
    }
    tp_event_t ev = {
        .type = type, .ep = &ep->base, .imm = imm, .len = len, .data = data};
    tp_verbs_event(ep->ctx, &ev);
}

static void tp_verbs_recv_msg(tp_verbs_ep_t *ep, uint32_t type,
                              const uint8_t *data, uint32_t len)
{
    if (type == TP_VERBS_MSG_WIMM && len == 8) {
        uint32_t trailer[2];
        memcpy(trailer, data, sizeof(trailer));
        tp_verbs_arrival(ep, TP_EV_WRITE_IMM, le32toh(trailer[0]), NULL,
                         le32toh(trailer[1]));
    } else if (type == TP_VERBS_MSG_EXPORT) {
        tp_verbs_peer_export_add(ep, data, len);
    } else if (type == TP_VERBS_MSG_UNEXPORT) {
        tp_verbs_peer_export_remove(ep, data, len);
    } else if (type == TP_VERBS_MSG_BYE) {
        util_debug("verbs: %s closed the endpoint", ep->base.peer);
        tp_verbs_ep_fail(ep, STRATA_OK);
    } else if (type >= TP_VERBS_MSG_AUTH && type <= TP_VERBS_MSG_READY) {
        tp_verbs_hs_recv(ep, type, data, len);
    } else {
        util_error("verbs: %s sent an unknown message type %u", ep->base.peer,
                   type);
        tp_verbs_ep_fail(ep, STRATA_ERR_PROTO);
    }
}

static void tp_verbs_recv_done(tp_verbs_rbuf_t *rb, const struct ibv_wc *wc)
{
    tp_verbs_ep_t *ep = rb->ep;
    ep->rq_out--;
    if (wc->status != IBV_WC_SUCCESS) {
        tp_verbs_wc_error(&ep->qps[0], wc, "a receive");
        return;
    }
    tp_verbs_todo(ep); /* post the buffer again, return the credit */
    const uint8_t *data = ep->rmem + (size_t)rb->index * TP_VERBS_SLOT;
    bool keep = false; /* a RECV event points into the buffer */
    if (ep->state >= TP_VERBS_EP_FAILED) {
        /* Arrived before the failure was seen: dropped, except that a BYE
         * tells the disconnection rdma_cm reported first was deliberate. */
        if (ep->state == TP_VERBS_EP_FAILED && !ep->disconnected_sent &&
            (wc->wc_flags & IBV_WC_WITH_IMM) && wc->opcode == IBV_WC_RECV &&
            ntohl(wc->imm_data) == TP_VERBS_MSG_BYE)
            ep->error = STRATA_OK;
    } else if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM)
        tp_verbs_arrival(ep, TP_EV_WRITE_IMM, ntohl(wc->imm_data), NULL,
                         wc->byte_len);
    else if (wc->wc_flags & IBV_WC_WITH_IMM)
        tp_verbs_recv_msg(ep, ntohl(wc->imm_data), data, wc->byte_len);
    else {
        keep = ep->state == TP_VERBS_EP_CONNECTED;
        tp_verbs_arrival(ep, TP_EV_RECV, 0, data, wc->byte_len);
    }
    if (!keep)
        ep->rfree[ep->nrfree++] = (uint16_t)rb->index;
}

int tp_verbs_cq_poll(tp_verbs_ctx_t *c)
{
    struct ibv_wc wcs[TP_VERBS_CQ_BATCH];
    int total = 0;
    for (int i = 0; i < c->ncqs; i++) {
        int n = ibv_poll_cq(c->cqs[i]->cq, TP_VERBS_CQ_BATCH, wcs);
        if (n < 0) {
            util_error("verbs: ibv_poll_cq on %s failed", c->dev_name);
            continue;
        }
        for (int k = 0; k < n; k++) {
            uintptr_t id = (uintptr_t)wcs[k].wr_id;
            if (id & TP_VERBS_WR_RECV)
                tp_verbs_recv_done((void *)(id & ~(uintptr_t)1), &wcs[k]);
            else
                tp_verbs_send_done((void *)id, &wcs[k]);
        }
        total += n;
    }
    return total;
}

/* ---- progress ---- */

/* Receive buffers of the RECV events the last call reported. */
static void tp_verbs_held_release(tp_verbs_ctx_t *c)
{
    for (uint32_t i = 0; i < c->nheld; i++) {
        tp_verbs_rbuf_t *rb = c->held[i];
        tp_verbs_ep_t *ep = rb->ep;
        ep->rfree[ep->nrfree++] = (uint16_t)rb->index;
        ep->evq_refs--;
        tp_verbs_todo(ep);
    }
    c->nheld = 0;
}

static bool tp_verbs_hold(tp_verbs_ctx_t *c, const tp_event_t *ev)
{
    if (c->nheld == c->held_cap) {
        uint32_t cap = c->held_cap ? 2 * c->held_cap : 64;
        tp_verbs_rbuf_t **h = util_realloc(c->held, cap * sizeof(*h));
        if (!h)
            return false;
        c->held = h;
        c->held_cap = cap;
    }
    tp_verbs_ep_t *ep = tp_verbs_ep(ev->ep);
    size_t index = ((const uint8_t *)ev->data - ep->rmem) / TP_VERBS_SLOT;
    c->held[c->nheld++] = &ep->rbufs[index];
    return true;
}

static int tp_verbs_report(tp_verbs_ctx_t *c, tp_event_t *events, int max)
{
    int n = 0;
    while (n < max && c->evq_head != c->evq_tail) {
        tp_event_t *ev = &c->evq[c->evq_head & (c->evq_cap - 1)];
        if (ev->type == TP_EV_RECV && !tp_verbs_hold(c, ev)) {
            util_error("verbs: out of memory holding a receive buffer");
            break;
        }
        events[n++] = *ev;
        c->evq_head++;
        if (ev->ep && ev->type != TP_EV_RECV) /* RECV: until released */
            tp_verbs_ep(ev->ep)->evq_refs--;
    }
    return n;
}

strata_status_t tp_verbs_progress(tp_ctx_t *ctx, tp_event_t *events, int max,
                                  int *n_out)
{
    tp_verbs_ctx_t *c = tp_verbs_ctx(ctx);
    tp_verbs_held_release(c);
    if (c->any_armed)
        tp_verbs_cq_events_drain(c);
    /* Completions first: an error completion names the cause of a
     * disconnection better than the rdma_cm event that came with it.
     * They wait in the CQ while many events wait here. */
    if (c->evq_tail - c->evq_head < (uint32_t)max + 4 * TP_VERBS_CQ_BATCH)
        tp_verbs_cq_poll(c);
    if (atomic_load_explicit(&c->pending, memory_order_relaxed)) {
        unsigned p = atomic_exchange(&c->pending, 0);
        if (p & TP_VERBS_PENDING_CM)
            tp_verbs_cm_drain(c);
        if (p & TP_VERBS_PENDING_ASYNC)
            tp_verbs_async_drain(c);
    }
    tp_verbs_todo_run(c);
    /* Deadlines and keepalives are coarse: look at the clock on every 8th
     * call only (and after a wait), since it costs as much as a CQ poll. */
    if ((++c->calls & 7) == 0) {
        uint64_t now = tp_verbs_now_ns();
        if (now >= c->next_tick_ns) {
            c->next_tick_ns = now + TP_VERBS_TICK_NS;
            for (tp_verbs_ep_t *ep = c->eps, *next; ep; ep = next) {
                next = ep->next;
                tp_verbs_ep_tick(ep, now);
            }
            tp_verbs_todo_run(c);
        }
    }
    *n_out = tp_verbs_report(c, events, max);
    return STRATA_OK;
}
