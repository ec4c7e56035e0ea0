/* The verbs provider's ops table, and opening and closing a context. */
#include "transport/verbs/verbs.h"

#include <string.h>

#include "util/log.h"

/* The local ACK timeout exponent t (4.096 us * 2^t per try) such that every
 * try of a request, retry_cnt + 1 of them, fits in timeout_ms: a dead peer
 * then fails pending work within STRATA_TIMEOUT_MS. */
static uint8_t tp_verbs_qp_timeout(int timeout_ms, unsigned retry_cnt)
{
    uint64_t per_try_ns = (uint64_t)timeout_ms * 1000000u / (retry_cnt + 1);
    uint8_t t = 0;
    while (t < 31 && (4096ull << (t + 1)) <= per_try_ns)
        t++;
    /* Below ~16 ms, retransmissions of a busy software device fire falsely. */
    return t < 12 ? 12 : t;
}

static void tp_verbs_params(tp_verbs_ctx_t *c, const tp_params_t *params)
{
    tp_verbs_params_t *p = &c->p;
    p->nqps = params->ib_qps;
    p->tx_depth = params->ib_tx_depth;
    p->rx_depth = params->ib_rx_depth;
    p->inline_max = params->ib_inline;
    p->retry_cnt = 7;
    /* Credits keep a receive posted for everything the peer sends, so a
     * "receiver not ready" NAK means a broken peer: fail after a few. */
    p->rnr_retry = 6;
    p->min_rnr_timer = 12; /* 0.64 ms */
    p->qp_timeout = tp_verbs_qp_timeout(c->base.timeout_ms, p->retry_cnt);
    p->gid_override = -1;
}

/* Closes the endpoints as tp_ep_close() does, and gives their BYE messages
 * a moment to leave, so that peers see a deliberate close. */
static void tp_verbs_close_eps(tp_verbs_ctx_t *c)
{
    for (tp_verbs_ep_t *ep = c->eps; ep; ep = ep->next)
        if (ep->state != TP_VERBS_EP_CLOSED)
            tp_verbs_ep_close(&ep->base);
    int wait_ms = c->base.timeout_ms < 1000 ? c->base.timeout_ms : 1000;
    uint64_t end = tp_verbs_now_ns() + (uint64_t)wait_ms * 1000000u;
    for (;;) {
        bool pending = false;
        for (tp_verbs_ep_t *ep = c->eps; ep && !pending; ep = ep->next)
            pending = ep->bye_pending;
        if (!pending || tp_verbs_now_ns() > end)
            return;
        tp_verbs_cq_poll(c);
        tp_verbs_todo_run(c);
    }
}

static void tp_verbs_close(tp_ctx_t *ctx)
{
    tp_verbs_ctx_t *c = tp_verbs_ctx(ctx);
    if (c->thread_started)
        tp_verbs_close_eps(c);
    while (c->eps)
        tp_verbs_ep_destroy(c->eps);
    while (c->listeners)
        tp_verbs_listener_close(&c->listeners->base);
    tp_verbs_thread_stop(c);
    tp_verbs_mem_fini(c);
    tp_verbs_dev_close(c);
    util_free(c->evq);
    util_free(c->held);
    util_free(c);
}

static strata_status_t tp_verbs_open(const tp_params_t *params,
                                     tp_ctx_t **ctx_out)
{
    tp_verbs_ctx_t *c = util_calloc(1, sizeof(*c));
    if (!c) {
        util_error("verbs: out of memory for a context");
        return STRATA_ERR_NOMEM;
    }
    c->base.ops = &tp_verbs_ops;
    util_list_init(&c->mrs);
    c->base.caps = TP_CAP_REMOTE_ANY_MEMORY | TP_CAP_ZERO_COPY;
    c->base.timeout_ms = params->timeout_ms;
    c->thread_epfd = c->wait_epfd = c->stop_fd = c->notify_fd = c->timer_fd =
        -1;
    tp_verbs_params(c, params);
    strata_status_t st = tp_auth_secret_load(params, &c->secret);
    if (st == STRATA_OK)
        st = tp_verbs_dev_open(c, params);
    if (st == STRATA_OK)
        st = tp_verbs_mem_init(c);
    if (st == STRATA_OK)
        st = tp_verbs_thread_start(c);
    if (st != STRATA_OK) {
        tp_verbs_close(&c->base);
        return st;
    }
    *ctx_out = &c->base;
    return STRATA_OK;
}

const tp_ops_t tp_verbs_ops = {
    .name = "verbs",
    .available = tp_verbs_available,
    .open = tp_verbs_open,
    .close = tp_verbs_close,
    .mr_reg = tp_verbs_mr_reg,
    .mem_alloc = tp_verbs_mem_alloc,
    .mr_dereg = tp_verbs_mr_dereg,
    .mr_export = tp_verbs_mr_export,
    .listen = tp_verbs_listen,
    .listener_close = tp_verbs_listener_close,
    .connect = tp_verbs_connect,
    .ep_close = tp_verbs_ep_close,
    .write = tp_verbs_write,
    .send = tp_verbs_send,
    .progress = tp_verbs_progress,
    .wait_fd = tp_verbs_wait_fd,
    .wait_arm = tp_verbs_wait_arm,
};
