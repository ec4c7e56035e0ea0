/* The tcp provider: context, regions, the progress loop and its ops table. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "transport/tcp/tcp.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

#define TP_TCP_RECV_FIFO (256 * 1024) /* received messages until reported */
#define TP_TCP_EPOLL_BATCH 64

/* ---- context ---- */

static bool tp_tcp_available(void)
{
    return true;
}

static void tp_tcp_free(tp_tcp_ctx_t *ctx)
{
    if (ctx->epfd >= 0)
        close(ctx->epfd);
    if (ctx->tfd >= 0)
        close(ctx->tfd);
    tp_evq_fini(&ctx->evq);
    OPENSSL_cleanse(&ctx->secret, sizeof(ctx->secret));
    util_free(ctx);
}

static strata_status_t tp_tcp_open(const tp_params_t *params,
                                   tp_ctx_t **ctx_out)
{
    tp_tcp_ctx_t *ctx = util_calloc(1, sizeof(*ctx));
    if (!ctx)
        return STRATA_ERR_NOMEM;
    ctx->epfd = ctx->tfd = -1;
    ctx->base.ops = &tp_tcp_ops;
    ctx->base.caps = TP_CAP_REMOTE_ANY_MEMORY;
    ctx->base.timeout_ms = params->timeout_ms;
    ctx->crc = params->tcp_crc;
    snprintf(ctx->ifname, sizeof(ctx->ifname), "%s",
             params->ifname ? params->ifname : "");
    snprintf(ctx->route_to, sizeof(ctx->route_to), "%s",
             params->route_to ? params->route_to : "");
    ctx->next_key = 1;
    ctx->timer_kind = TP_TCP_K_TIMER;
    util_list_t *lists[] = {&ctx->mrs,       &ctx->listeners,  &ctx->eps,
                            &ctx->graveyard, &ctx->handshakes, &ctx->tx_ready,
                            &ctx->rx_ready};
    for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++)
        util_list_init(lists[i]);
    strata_status_t st = tp_auth_secret_load(params, &ctx->secret);
    if (st != STRATA_OK) {
        tp_tcp_free(ctx);
        return st;
    }
    if (tp_evq_init(&ctx->evq, TP_TCP_ARRIVALS, TP_TCP_RECV_FIFO) !=
        STRATA_OK) {
        tp_tcp_free(ctx);
        return STRATA_ERR_NOMEM;
    }
    ctx->epfd = epoll_create1(EPOLL_CLOEXEC);
    ctx->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &ctx->timer_kind};
    if (ctx->epfd < 0 || ctx->tfd < 0 ||
        epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, ctx->tfd, &ev) != 0) {
        int err = errno;
        util_error("tcp: cannot create the epoll set or timer: %s",
                   strerror(err));
        tp_tcp_free(ctx);
        return util_errno_status(err, STRATA_ERR_IO);
    }
    *ctx_out = &ctx->base;
    return STRATA_OK;
}

static void tp_tcp_mr_free(tp_tcp_mr_t *mr)
{
    util_list_del(&mr->link);
    if (mr->owned)
        util_free(mr->base.addr);
    util_free(mr);
}

static void tp_tcp_close(tp_ctx_t *base)
{
    tp_tcp_ctx_t *ctx = tp_tcp_ctx(base);
    util_list_t *pos, *tmp;
    while (!util_list_empty(&ctx->listeners))
        tp_tcp_listener_close(
            &util_container_of(ctx->listeners.next, tp_tcp_listener_t, link)
                 ->base);
    /* As tp_ep_close() each (peers learn it was on purpose), then free
     * what waited for its events to be reported. */
    util_list_for_each_safe(pos, tmp, &ctx->eps)
        tp_tcp_ep_close(&util_container_of(pos, tp_tcp_ep_t, link)->base);
    util_list_for_each_safe(pos, tmp, &ctx->graveyard)
        tp_tcp_ep_free(util_container_of(pos, tp_tcp_ep_t, link));
    util_list_for_each_safe(pos, tmp, &ctx->mrs)
        tp_tcp_mr_free(util_container_of(pos, tp_tcp_mr_t, link));
    tp_tcp_free(ctx);
}

/* ---- memory ---- */

static tp_tcp_mr_t *tp_tcp_mr_new(tp_tcp_ctx_t *ctx, void *addr, size_t len,
                                  unsigned access)
{
    tp_tcp_mr_t *mr = util_calloc(1, sizeof(*mr));
    if (!mr)
        return NULL;
    mr->base = (tp_mr_t){&ctx->base, addr, len, access};
    mr->key = ctx->next_key++;
    util_list_add_tail(&ctx->mrs, &mr->link);
    return mr;
}

static strata_status_t tp_tcp_mr_reg(tp_ctx_t *ctx, void *addr, size_t len,
                                     unsigned access, tp_mr_t **mr_out)
{
    tp_tcp_mr_t *mr = tp_tcp_mr_new(tp_tcp_ctx(ctx), addr, len, access);
    if (!mr)
        return STRATA_ERR_NOMEM;
    *mr_out = &mr->base;
    return STRATA_OK;
}

static strata_status_t tp_tcp_mem_alloc(tp_ctx_t *ctx, size_t len,
                                        unsigned access, void **addr_out,
                                        tp_mr_t **mr_out)
{
    void *addr = util_aligned_alloc(4096, (len + 4095) & ~(size_t)4095);
    tp_tcp_mr_t *mr =
        addr ? tp_tcp_mr_new(tp_tcp_ctx(ctx), addr, len, access) : NULL;
    if (!mr) {
        util_error("tcp: cannot allocate a region of %zu bytes", len);
        util_free(addr);
        return STRATA_ERR_NOMEM;
    }
    mr->owned = true;
    *addr_out = addr;
    *mr_out = &mr->base;
    return STRATA_OK;
}

/* Revokes the region from every peer. A write still landing in it would
 * land in freed memory, so that connection fails first. */
static void tp_tcp_mr_dereg(tp_mr_t *base)
{
    tp_tcp_mr_t *mr = util_container_of(base, tp_tcp_mr_t, base);
    tp_tcp_ctx_t *ctx = tp_tcp_ctx(base->ctx);
    util_list_t *pos, *tmp;
    util_list_for_each_safe(pos, tmp, &ctx->eps)
    {
        tp_tcp_ep_t *ep = util_container_of(pos, tp_tcp_ep_t, link);
        util_keymap_del(&ep->grants, mr->key);
        if (ep->rx.in_payload && ep->rx.hdr.key == mr->key)
            tp_tcp_ep_fail(ep, STRATA_ERR_STATE,
                           "region %#llx deregistered while the peer's write "
                           "into it was arriving",
                           (unsigned long long)mr->key);
    }
    tp_tcp_mr_free(mr);
}

static strata_status_t tp_tcp_mr_export(tp_mr_t *base, tp_ep_t *ep_base,
                                        tp_rdesc_t *desc_out)
{
    tp_tcp_mr_t *mr = util_container_of(base, tp_tcp_mr_t, base);
    tp_tcp_ep_t *ep = tp_tcp_ep(ep_base);
    if (util_keymap_put(&ep->grants, mr->key, mr) != STRATA_OK) {
        util_error("tcp: out of memory exporting a region to %s",
                   ep_base->peer);
        return STRATA_ERR_NOMEM;
    }
    *desc_out = (tp_rdesc_t){.addr = 0, .len = base->len, .key = mr->key};
    return STRATA_OK;
}

/* ---- progress ---- */

static void tp_tcp_ep_ready(tp_tcp_ep_t *ep, uint32_t events)
{
    if (ep->state == TP_TCP_DOWN)
        return;
    if (ep->state == TP_TCP_CONNECTING) {
        if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
            tp_tcp_connected(ep);
        return;
    }
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
        ep->rx.ready = true;
        util_list_ensure(&ep->ctx->rx_ready, &ep->rx_link);
    }
    if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) {
        ep->tx_blocked = false;
        if (ep->sq_send != ep->sq_head)
            util_list_ensure(&ep->ctx->tx_ready, &ep->tx_link);
    }
}

static strata_status_t tp_tcp_poll(tp_tcp_ctx_t *ctx)
{
    struct epoll_event evs[TP_TCP_EPOLL_BATCH];
    int n = epoll_wait(ctx->epfd, evs, TP_TCP_EPOLL_BATCH, 0);
    if (n < 0 && errno != EINTR) {
        util_error("tcp: epoll_wait: %s", strerror(errno));
        return STRATA_ERR_IO;
    }
    for (int i = 0; i < n; i++) {
        tp_tcp_kind_t *kind = evs[i].data.ptr;
        if (*kind == TP_TCP_K_LISTENER)
            tp_tcp_accept(util_container_of(kind, tp_tcp_listener_t, kind));
        else if (*kind == TP_TCP_K_TIMER)
            tp_tcp_expire(ctx);
        else
            tp_tcp_ep_ready(util_container_of(kind, tp_tcp_ep_t, kind),
                            evs[i].events);
    }
    return STRATA_OK;
}

/* An event left the queue: free what it held. A closed endpoint is freed
 * by the next progress call, once its last event was read. */
static void tp_tcp_reported(void *arg, tp_evq_item_t *it)
{
    (void)arg;
    tp_tcp_ep_t *ep = tp_tcp_ep(it->ev.ep);
    if (it->ev.type == TP_EV_WRITE_DONE || it->ev.type == TP_EV_SEND_DONE)
        tp_tcp_op_reported(ep, it->slot);
    ep->events--;
}

static strata_status_t tp_tcp_progress(tp_ctx_t *base, tp_event_t *events,
                                       int max, int *n_out)
{
    tp_tcp_ctx_t *ctx = tp_tcp_ctx(base);
    util_list_t *pos, *tmp;
    /* Closed endpoints (or ones that failed their handshake, never the
     * user's) no event names any more: the caller has read the batch that
     * named them last, the one the previous call returned. */
    util_list_for_each_safe(pos, tmp, &ctx->graveyard)
    {
        tp_tcp_ep_t *ep = util_container_of(pos, tp_tcp_ep_t, link);
        if (ep->events == 0)
            tp_tcp_ep_free(ep);
    }
    tp_evq_begin(&ctx->evq);
    strata_status_t st = tp_tcp_poll(ctx);
    if (st != STRATA_OK)
        return st;
    util_list_for_each_safe(pos, tmp, &ctx->rx_ready)
        tp_tcp_rx(util_container_of(pos, tp_tcp_ep_t, rx_link));
    util_list_for_each_safe(pos, tmp, &ctx->tx_ready)
        tp_tcp_flush(util_container_of(pos, tp_tcp_ep_t, tx_link));
    *n_out = tp_evq_report(&ctx->evq, events, max, tp_tcp_reported, ctx);
    return STRATA_OK;
}

static int tp_tcp_wait_fd(const tp_ctx_t *base)
{
    return util_container_of(base, tp_tcp_ctx_t, base)->epfd;
}

/* Edge-triggered readiness is remembered on the lists, so anything on them
 * (or queued) needs a progress call before sleeping. */
static strata_status_t tp_tcp_wait_arm(tp_ctx_t *base)
{
    tp_tcp_ctx_t *ctx = tp_tcp_ctx(base);
    if (!tp_evq_empty(&ctx->evq) || !util_list_empty(&ctx->rx_ready) ||
        !util_list_empty(&ctx->tx_ready) || !util_list_empty(&ctx->graveyard))
        return STRATA_ERR_AGAIN;
    return STRATA_OK;
}

const tp_ops_t tp_tcp_ops = {
    .name = "tcp",
    .available = tp_tcp_available,
    .open = tp_tcp_open,
    .close = tp_tcp_close,
    .mr_reg = tp_tcp_mr_reg,
    .mem_alloc = tp_tcp_mem_alloc,
    .mr_dereg = tp_tcp_mr_dereg,
    .mr_export = tp_tcp_mr_export,
    .listen = tp_tcp_listen,
    .listener_close = tp_tcp_listener_close,
    .connect = tp_tcp_connect,
    .ep_close = tp_tcp_ep_close,
    .write = tp_tcp_write,
    .send = tp_tcp_send,
    .progress = tp_tcp_progress,
    .wait_fd = tp_tcp_wait_fd,
    .wait_arm = tp_tcp_wait_arm,
};
