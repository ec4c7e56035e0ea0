/* The tcp provider: context, regions, the progress loop and its ops tables. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>

#include "transport/tcp/tcp.h"
#include "util/alloc.h"
#include "util/log.h"

#define TP_TCP_RECV_FIFO (256 * 1024) /* received messages until reported */

_Static_assert(TP_TCP_HDR_LEN <= TP_SOCK_BYE_MAX, "a goodbye is a header");

/* ---- regions ---- */

static tp_tcp_mr_t *tp_tcp_mr(tp_sock_mr_t *mr)
{
    return util_container_of(mr, tp_tcp_mr_t, sock);
}

static strata_status_t tp_tcp_mem_alloc(tp_ctx_t *ctx, size_t len,
                                        unsigned access, void **addr_out,
                                        tp_mr_t **mr_out)
{
    void *addr = util_aligned_alloc(4096, (len + 4095) & ~(size_t)4095);
    tp_sock_mr_t *mr =
        addr ? tp_sock_mr_new(tp_sock_ctx(ctx), addr, len, access) : NULL;
    if (!mr) {
        util_error("tcp: cannot allocate a region of %zu bytes", len);
        util_free(addr);
        return STRATA_ERR_NOMEM;
    }
    tp_tcp_mr(mr)->owned = true;
    *addr_out = addr;
    *mr_out = &mr->base;
    return STRATA_OK;
}

static void tp_tcp_mr_release(tp_sock_mr_t *mr)
{
    if (tp_tcp_mr(mr)->owned)
        util_free(mr->base.addr);
}

/* A write still landing in the region would land in freed memory, so that
 * connection fails first. */
static void tp_tcp_mr_revoke(tp_sock_ep_t *sock, tp_sock_mr_t *mr)
{
    tp_tcp_ep_t *ep = tp_tcp_ep_of(sock);
    if (ep->rx.in_payload && ep->rx.hdr.key == mr->key)
        tp_sock_ep_fail(sock, STRATA_ERR_STATE,
                        "region %#llx deregistered while the peer's write "
                        "into it was arriving",
                        (unsigned long long)mr->key);
}

/* ---- progress ---- */

static void tp_tcp_ep_ready(tp_sock_ep_t *sock, uint32_t events)
{
    tp_tcp_ep_t *ep = tp_tcp_ep_of(sock);
    tp_tcp_ctx_t *ctx = tp_tcp_ep_ctx(ep);
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
        ep->rx.ready = true;
        ep->rx.hup |= (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0;
        util_list_ensure(&ctx->rx_ready, &ep->rx_link);
    }
    if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) {
        ep->tx_blocked = false;
        if (ep->sq_send != ep->sq_head)
            util_list_ensure(&ctx->tx_ready, &ep->tx_link);
    }
}

static strata_status_t tp_tcp_progress(tp_ctx_t *base, tp_event_t *events,
                                       int max, int *n_out)
{
    tp_tcp_ctx_t *ctx = tp_tcp_ctx(base);
    util_list_t *pos, *tmp;
    tp_sock_begin(&ctx->sock);
    strata_status_t st = tp_sock_poll(&ctx->sock);
    if (st != STRATA_OK)
        return st;
    util_list_for_each_safe(pos, tmp, &ctx->rx_ready)
        tp_tcp_rx(util_container_of(pos, tp_tcp_ep_t, rx_link));
    util_list_for_each_safe(pos, tmp, &ctx->tx_ready)
        tp_tcp_flush(util_container_of(pos, tp_tcp_ep_t, tx_link));
    *n_out = tp_sock_report(&ctx->sock, events, max);
    return STRATA_OK;
}

/* Edge-triggered readiness is remembered on the lists, so anything on them
 * (or queued) needs a progress call before sleeping. */
static strata_status_t tp_tcp_wait_arm(tp_ctx_t *base)
{
    tp_tcp_ctx_t *ctx = tp_tcp_ctx(base);
    if (!util_list_empty(&ctx->rx_ready) || !util_list_empty(&ctx->tx_ready))
        return STRATA_ERR_AGAIN;
    return tp_sock_wait_arm(&ctx->sock);
}

/* ---- context ---- */

static const tp_sock_ops_t tp_tcp_sock_ops = {
    .ctx_size = sizeof(tp_tcp_ctx_t),
    .ep_size = sizeof(tp_tcp_ep_t),
    .mr_size = sizeof(tp_tcp_mr_t),
    .ep_depth = TP_TCP_SQ_DEPTH,
    .ep_poll = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
    .arrivals = TP_TCP_ARRIVALS,
    .recv_fifo = TP_TCP_RECV_FIFO,
    .ep_init = tp_tcp_ep_init,
    .ep_fini = tp_tcp_ep_fini,
    .ep_ready = tp_tcp_ep_ready,
    .ep_down = tp_tcp_ep_down,
    .bye = tp_tcp_bye,
    .auth_send = tp_tcp_auth_send,
    .authed = tp_sock_ep_up,
    .op_reported = tp_tcp_op_reported,
    .accepted = tp_tcp_accepted,
    .mr_revoke = tp_tcp_mr_revoke,
    .mr_release = tp_tcp_mr_release,
};

static bool tp_tcp_available(void)
{
    return true;
}

static strata_status_t tp_tcp_open(const tp_params_t *params,
                                   tp_ctx_t **ctx_out)
{
    tp_sock_ctx_t *sock;
    strata_status_t st = tp_sock_open(&tp_tcp_ops, &tp_tcp_sock_ops,
                                      TP_CAP_REMOTE_ANY_MEMORY, params, &sock);
    if (st != STRATA_OK)
        return st;
    tp_tcp_ctx_t *ctx = util_container_of(sock, tp_tcp_ctx_t, sock);
    ctx->crc = params->tcp_crc;
    snprintf(ctx->ifname, sizeof(ctx->ifname), "%s",
             params->ifname ? params->ifname : "");
    snprintf(ctx->route_to, sizeof(ctx->route_to), "%s",
             params->route_to ? params->route_to : "");
    util_list_init(&ctx->tx_ready);
    util_list_init(&ctx->rx_ready);
    *ctx_out = &sock->base;
    return STRATA_OK;
}

const tp_ops_t tp_tcp_ops = {
    .name = "tcp",
    .available = tp_tcp_available,
    .open = tp_tcp_open,
    .close = tp_sock_close,
    .mr_reg = tp_sock_mr_reg,
    .mem_alloc = tp_tcp_mem_alloc,
    .mr_dereg = tp_sock_mr_dereg,
    .mr_export = tp_sock_mr_export,
    .listen = tp_tcp_listen,
    .listener_close = tp_sock_listener_close,
    .connect = tp_tcp_connect,
    .ep_close = tp_sock_ep_close,
    .write = tp_tcp_write,
    .send = tp_tcp_send,
    .progress = tp_tcp_progress,
    .wait_fd = tp_sock_wait_fd,
    .wait_arm = tp_tcp_wait_arm,
};
