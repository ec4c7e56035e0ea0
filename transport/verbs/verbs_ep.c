/*
 * Life of an endpoint: creation (queue pairs, buffers, inbox), connection,
 * failure (everything pending completes with an error, then one
 * DISCONNECTED), close (pending posts are canceled at once; the queue pairs
 * drain before their memory is freed), and the periodic checks: handshake
 * deadlines and keepalives.
 */
#include "transport/verbs/verbs.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "util/log.h"

static uint32_t tp_verbs_pow2(uint32_t v)
{
    uint32_t p = 1;
    while (p < v)
        p <<= 1;
    return p;
}

/* ---- creation ---- */

static strata_status_t tp_verbs_qp_create(tp_verbs_ep_t *ep, tp_verbs_qp_t *qp,
                                          tp_verbs_cq_t *cq, unsigned index)
{
    tp_verbs_ctx_t *c = ep->ctx;
    qp->ep = ep;
    qp->cq = cq;
    qp->index = index;
    qp->sq_depth = tp_verbs_pow2(c->p.tx_depth + TP_VERBS_SQ_RESERVE);
    qp->swr = util_calloc(qp->sq_depth, sizeof(*qp->swr));
    if (!qp->swr) {
        util_error("verbs: out of memory for a send queue");
        return STRATA_ERR_NOMEM;
    }
    if (getrandom(&qp->psn, sizeof(qp->psn), 0) != sizeof(qp->psn))
        qp->psn = (uint32_t)(uintptr_t)qp;
    qp->psn &= 0xffffff;
    for (;;) {
        struct ibv_qp_init_attr a = {
            .qp_context = qp,
            .send_cq = cq->cq,
            .recv_cq = cq->cq,
            .cap = {.max_send_wr = qp->sq_depth,
                    .max_recv_wr = index ? 1 : ep->rx_depth,
                    .max_send_sge = 1,
                    .max_recv_sge = 1,
                    .max_inline_data = c->p.inline_max},
            .qp_type = IBV_QPT_RC,
        };
        qp->qp = ibv_create_qp(c->pd, &a);
        if (qp->qp)
            return STRATA_OK;
        if (!c->p.inline_max)
            break;
        util_info("verbs: %s refuses %u bytes of inline data per request "
                  "(%s); sending without inline data",
                  c->dev_name, c->p.inline_max, strerror(errno));
        c->p.inline_max = 0;
    }
    util_error("verbs: ibv_create_qp on %s failed: %s", c->dev_name,
               strerror(errno));
    return STRATA_ERR_NO_DEVICE;
}

/* The block of registered memory: receive buffers, staged sends, the
 * operation ring (whose small payloads are posted from it), the source word
 * of credit writes and the inbox line the peer writes credits into. */
static strata_status_t tp_verbs_ep_memory(tp_verbs_ep_t *ep)
{
    tp_verbs_ctx_t *c = ep->ctx;
    size_t rbytes = (size_t)ep->rx_depth * TP_VERBS_SLOT;
    size_t sbytes = (size_t)TP_VERBS_STAGE_SLOTS * TP_VERBS_SLOT;
    size_t obytes =
        ((size_t)ep->nops * sizeof(tp_verbs_op_t) + TP_VERBS_INBOX_LINE - 1) &
        ~(size_t)(TP_VERBS_INBOX_LINE - 1);
    strata_status_t st = tp_verbs_block_alloc(
        c, rbytes + sbytes + obytes + 2 * TP_VERBS_INBOX_LINE,
        (void **)&ep->block, &ep->block_reg);
    if (st != STRATA_OK)
        return st;
    ep->rmem = ep->block;
    ep->stage = ep->rmem + rbytes;
    ep->ops = (tp_verbs_op_t *)(ep->stage + sbytes);
    ep->credit_src = (uint32_t *)(ep->stage + sbytes + obytes);
    ep->inbox = (volatile uint32_t *)(ep->stage + sbytes + obytes +
                                      TP_VERBS_INBOX_LINE);
    *ep->inbox = 0;
    ep->stage_free = (1u << TP_VERBS_STAGE_SLOTS) - 1;
    ep->rbufs = util_calloc(ep->rx_depth, sizeof(*ep->rbufs));
    ep->rfree = util_calloc(ep->rx_depth, sizeof(*ep->rfree));
    if (!ep->rbufs || !ep->rfree) {
        util_error("verbs: out of memory for receive buffers");
        return STRATA_ERR_NOMEM;
    }
    for (uint32_t i = 0; i < ep->rx_depth; i++) {
        ep->rbufs[i] = (tp_verbs_rbuf_t){ep, i};
        ep->rfree[i] = (uint16_t)(ep->rx_depth - 1 - i);
    }
    ep->nrfree = ep->rx_depth;
    ep->rq_posted = ep->rq_reported = 0;
    return STRATA_OK;
}

strata_status_t tp_verbs_ep_create(tp_verbs_ctx_t *c, struct rdma_cm_id *id,
                                   bool client, unsigned nqps,
                                   tp_verbs_ep_t **ep_out)
{
    tp_verbs_ep_t *ep = util_calloc(1, sizeof(*ep));
    if (!ep) {
        util_error("verbs: out of memory for an endpoint");
        return STRATA_ERR_NOMEM;
    }
    ep->base.ctx = &c->base;
    ep->cmref = (tp_verbs_cmref_t){false, ep};
    ep->ctx = c;
    ep->id = id;
    ep->client = client;
    ep->nqps = nqps;
    ep->rx_depth = c->p.rx_depth;
    ep->nops = tp_verbs_pow2(c->p.tx_depth);
    ep->deadline_ns =
        tp_verbs_now_ns() + (uint64_t)c->base.timeout_ms * 1000000u;
    if (id)
        id->context = &ep->cmref;
    ep->next = c->eps;
    if (c->eps)
        c->eps->prev = ep;
    c->eps = ep;

    strata_status_t st = tp_verbs_ep_memory(ep);
    if (st != STRATA_OK)
        goto destroy;
    ep->qps = util_calloc(nqps, sizeof(*ep->qps));
    if (!ep->qps) {
        st = STRATA_ERR_NOMEM;
        util_error("verbs: out of memory for queue pairs");
        goto destroy;
    }
    uint32_t sq = tp_verbs_pow2(c->p.tx_depth + TP_VERBS_SQ_RESERVE);
    tp_verbs_cq_t *cq;
    st = tp_verbs_cq_reserve(c, (int)(nqps * (sq + 1) + ep->rx_depth), &cq);
    if (st != STRATA_OK)
        goto destroy;
    ep->cq_entries = nqps * (sq + 1) + ep->rx_depth;
    ep->qps[0].cq = cq; /* kept for the release even if creation fails */
    for (unsigned i = 0; i < nqps; i++) {
        st = tp_verbs_qp_create(ep, &ep->qps[i], cq, i);
        if (st != STRATA_OK)
            goto destroy;
    }
    *ep_out = ep;
    return STRATA_OK;

destroy:
    ep->id = NULL; /* the caller owns it on failure */
    tp_verbs_ep_destroy(ep);
    return st;
}

void tp_verbs_ep_destroy(tp_verbs_ep_t *ep)
{
    tp_verbs_ctx_t *c = ep->ctx;
    tp_verbs_exports_drop(ep); /* windows go before their queue pairs */
    for (unsigned i = 0; ep->qps && i < ep->nqps; i++) {
        if (ep->qps[i].qp && ibv_destroy_qp(ep->qps[i].qp))
            util_warn("verbs: ibv_destroy_qp (peer %s) failed: %s",
                      ep->base.peer, strerror(errno));
        util_free(ep->qps[i].swr);
    }
    if (ep->qps && ep->qps[0].cq)
        ep->qps[0].cq->used -= (int)ep->cq_entries;
    if (ep->id)
        rdma_destroy_id(ep->id);
    if (ep->block)
        tp_verbs_block_free(c, ep->block, ep->block_reg);
    util_free(ep->qps);
    util_free(ep->rbufs);
    util_free(ep->rfree);
    if (ep->prev)
        ep->prev->next = ep->next;
    else if (c->eps == ep)
        c->eps = ep->next;
    if (ep->next)
        ep->next->prev = ep->prev;
    for (tp_verbs_ep_t **p = &c->todo; *p; p = &(*p)->todo_next)
        if (*p == ep) {
            *p = ep->todo_next;
            break;
        }
    util_free(ep);
}

/* ---- state changes ---- */

void tp_verbs_todo(tp_verbs_ep_t *ep)
{
    if (ep->in_todo)
        return;
    ep->in_todo = true;
    ep->todo_next = ep->ctx->todo;
    ep->ctx->todo = ep;
}

void tp_verbs_ep_connected(tp_verbs_ep_t *ep)
{
    tp_verbs_ctx_t *c = ep->ctx;
    ep->state = TP_VERBS_EP_CONNECTED;
    ep->connected_once = true;
    ep->visible = true;
    ep->deadline_ns = 0;
    ep->last_tx_ns = tp_verbs_now_ns();
    ep->last_tx_head = ep->qps[0].sq_head;
    tp_event_t ev = {.ep = &ep->base, .status = STRATA_OK};
    if (ep->client) {
        ev.type = TP_EV_CONNECTED;
    } else {
        ev.type = TP_EV_ACCEPTED;
        ev.listener = ep->listener ? &ep->listener->base : NULL;
    }
    tp_verbs_event(c, &ev);
    util_debug("verbs: %s %s with %u QP(s)",
               ep->client ? "connected to" : "accepted", ep->base.peer,
               ep->nqps);
    tp_verbs_credit_return(ep, true); /* what the handshake consumed */
    tp_verbs_pump(ep);
}

static void tp_verbs_teardown(tp_verbs_ep_t *ep)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
    for (unsigned i = 0; i < ep->nqps; i++)
        if (ep->qps[i].qp)
            ibv_modify_qp(ep->qps[i].qp, &a, IBV_QP_STATE);
    if (ep->id && ep->connected_once)
        rdma_disconnect(ep->id);
    ep->torn = true;
    ep->deadline_ns =
        tp_verbs_now_ns() + (uint64_t)ep->ctx->base.timeout_ms * 1000000u;
}

void tp_verbs_ep_fail(tp_verbs_ep_t *ep, strata_status_t status)
{
    if (ep->state >= TP_VERBS_EP_FAILED)
        return;
    if (!ep->visible && status == STRATA_ERR_PEER)
        util_warn("verbs: %s went away during the handshake (a wrong job "
                  "secret on its side?)",
                  ep->base.peer);
    ep->state = TP_VERBS_EP_FAILED;
    ep->error = status;
    tp_verbs_teardown(ep);
    tp_verbs_ops_fail(ep, status == STRATA_OK ? STRATA_ERR_PEER : status);
    if (ep->visible && !ep->connected_once) {
        tp_event_t ev = {
            .type = TP_EV_CONNECTED, .ep = &ep->base, .status = status};
        tp_verbs_event(ep->ctx, &ev);
        ep->disconnected_sent = true;
    }
    tp_verbs_todo(ep);
}

void tp_verbs_ep_close(tp_ep_t *base)
{
    tp_verbs_ep_t *ep = tp_verbs_ep(base);
    if (ep->state == TP_VERBS_EP_CLOSED)
        return;
    bool live = ep->state == TP_VERBS_EP_CONNECTED;
    for (uint32_t s = ep->tail; s != ep->head; s++) {
        tp_verbs_op_t *op = tp_verbs_op_at(ep, s);
        op->data_done = op->arrival_done = true;
        if (op->done)
            continue;
        op->status = STRATA_ERR_CANCELED;
        tp_verbs_op_finish(ep, op); /* an event now, or when it flushes */
        if (!op->done && op->kind != TP_VERBS_OP_MSG && ep->visible) {
            tp_event_t ev = {
                .type = op->kind == TP_VERBS_OP_WRITE ? TP_EV_WRITE_DONE
                                                      : TP_EV_SEND_DONE,
                .status = STRATA_ERR_CANCELED,
                .ep = base,
                .op_ctx = op->op_ctx,
            };
            tp_verbs_event(ep->ctx, &ev);
        }
        op->done = true;
    }
    ep->data_cur = ep->arr_cur = ep->head;
    ep->visible = false;
    ep->state = TP_VERBS_EP_CLOSED;
    /* Tell the peer the close is deliberate before the queue pairs go. */
    ep->bye_pending = live;
    if (live && tp_verbs_msg(ep, TP_VERBS_MSG_BYE, NULL, 0) != STRATA_OK)
        ep->bye_pending = false;
    if (!ep->bye_pending)
        tp_verbs_teardown(ep);
    else
        ep->deadline_ns =
            tp_verbs_now_ns() + (uint64_t)ep->ctx->base.timeout_ms * 1000000u;
    tp_verbs_todo(ep);
}

/* ---- the periodic checks ---- */

static bool tp_verbs_ops_all_done(const tp_verbs_ep_t *ep)
{
    for (uint32_t s = ep->tail; s != ep->head; s++)
        if (!ep->ops[s & (ep->nops - 1)].done)
            return false;
    return true;
}

/* Work requests that never flushed: their memory stays until tp_close. */
static void tp_verbs_ep_zombie(tp_verbs_ep_t *ep)
{
    if (ep->zombie)
        return;
    ep->zombie = true;
    util_warn("verbs: the queue pairs to %s did not flush within %d ms; "
              "keeping their memory until the context closes",
              ep->base.peer, ep->ctx->base.timeout_ms);
    for (uint32_t s = ep->tail; s != ep->head; s++) {
        tp_verbs_op_t *op = tp_verbs_op_at(ep, s);
        uint32_t out = op->wrs_out;
        op->wrs_out = 0; /* finish it now, with its error */
        tp_verbs_op_finish(ep, op);
        op->wrs_out = out;
    }
}

static void tp_verbs_ep_reap(tp_verbs_ep_t *ep, uint64_t now)
{
    if (!ep->torn) { /* closed: the BYE went, failed, or took too long */
        if (ep->bye_pending && now <= ep->deadline_ns)
            return;
        ep->bye_pending = false;
        tp_verbs_teardown(ep);
    }
    bool drained = tp_verbs_ep_drained(ep);
    if (!drained && now > ep->deadline_ns)
        tp_verbs_ep_zombie(ep);
    /* After the flush, so that a BYE received before it is seen. */
    if (ep->state == TP_VERBS_EP_FAILED && ep->visible &&
        !ep->disconnected_sent && (drained || ep->zombie) &&
        tp_verbs_ops_all_done(ep)) {
        tp_event_t ev = {
            .type = TP_EV_DISCONNECTED, .ep = &ep->base, .status = ep->error};
        tp_verbs_event(ep->ctx, &ev);
        ep->disconnected_sent = true;
    }
    if (drained && !ep->visible && ep->evq_refs == 0)
        tp_verbs_ep_destroy(ep);
}

void tp_verbs_ep_tick(tp_verbs_ep_t *ep, uint64_t now)
{
    tp_verbs_ctx_t *c = ep->ctx;
    uint64_t third = (uint64_t)c->base.timeout_ms * 1000000u / 3;
    switch (ep->state) {
    case TP_VERBS_EP_CONNECTED: {
        /* Keepalive: an idle endpoint writes its credit count again, so
         * that a silently dead peer fails it within STRATA_TIMEOUT_MS. */
        tp_verbs_qp_t *qp = &ep->qps[0];
        if (qp->sq_head != ep->last_tx_head) {
            ep->last_tx_head = qp->sq_head;
            ep->last_tx_ns = now;
        } else if (now - ep->last_tx_ns > third) {
            tp_verbs_credit_return(ep, true);
            ep->last_tx_head = qp->sq_head;
            ep->last_tx_ns = now;
        }
        break;
    }
    case TP_VERBS_EP_FAILED:
    case TP_VERBS_EP_CLOSED:
        tp_verbs_ep_reap(ep, now);
        break;
    default:
        if (now > ep->deadline_ns) {
            util_error("verbs: %s %s: no answer within %d ms",
                       ep->client ? "connecting to" : "accepting",
                       ep->base.peer, c->base.timeout_ms);
            tp_verbs_ep_fail(ep, STRATA_ERR_TIMEOUT);
        }
        break;
    }
}

/* Endpoints with work to retry: receives to post, credits to return,
 * operations waiting for room, a fence or credits, teardown. */
void tp_verbs_todo_run(tp_verbs_ctx_t *c)
{
    tp_verbs_ep_t *ep = c->todo;
    c->todo = NULL;
    uint64_t now = 0;
    while (ep) {
        tp_verbs_ep_t *next = ep->todo_next;
        ep->in_todo = false;
        if (ep->state < TP_VERBS_EP_FAILED) {
            tp_verbs_rq_refill(ep, false);
            tp_verbs_pump(ep);
        } else {
            if (!now)
                now = tp_verbs_now_ns();
            tp_verbs_ep_reap(ep, now);
        }
        ep = next;
    }
}

/* ---- async events, seen by the progress thread ---- */

void tp_verbs_async_drain(tp_verbs_ctx_t *c)
{
    uint64_t n;
    if (read(c->notify_fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
        util_debug("verbs: notify read: %s", strerror(errno));
    int fatal = atomic_exchange(&c->fatal_event, 0);
    if (fatal)
        util_error("verbs: %s on %s: every endpoint fails",
                   ibv_event_type_str((enum ibv_event_type)(fatal - 1)),
                   c->dev_name);
    for (tp_verbs_ep_t *ep = c->eps, *next; ep; ep = next) {
        next = ep->next;
        int ev = atomic_exchange(&ep->async_event, 0);
        if (atomic_exchange(&ep->comm_est, false) && ep->id)
            rdma_notify(ep->id, IBV_EVENT_COMM_EST);
        if (ep->state >= TP_VERBS_EP_FAILED || (!ev && !fatal))
            continue;
        if (ev)
            util_error("verbs: queue pair to %s failed: %s", ep->base.peer,
                       ibv_event_type_str((enum ibv_event_type)(ev - 1)));
        tp_verbs_ep_fail(ep, STRATA_ERR_IO);
    }
}
