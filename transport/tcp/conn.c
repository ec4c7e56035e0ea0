/*
 * tcp connections: listen and connect on "host:port", and an endpoint's own
 * part of the lifecycle sock.h drives (its queues, its goodbye, its auth.h
 * frames).
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "transport/tcp/tcp.h"
#include "util/alloc.h"
#include "util/log.h"
#include "util/status.h"

/* ---- endpoints ---- */

strata_status_t tp_tcp_ep_init(tp_sock_ep_t *sock)
{
    tp_tcp_ep_t *ep = tp_tcp_ep_of(sock);
    ep->sq = util_calloc(TP_TCP_SQ_DEPTH, sizeof(*ep->sq));
    ep->msgs.buf = util_malloc(TP_TCP_MSG_FIFO);
    ep->msgs.cap = TP_TCP_MSG_FIFO;
    ep->rx.stage = util_malloc(TP_TCP_RX_STAGE);
    util_list_init(&ep->tx_link);
    util_list_init(&ep->rx_link);
    return ep->sq && ep->msgs.buf && ep->rx.stage ? STRATA_OK
                                                  : STRATA_ERR_NOMEM;
}

void tp_tcp_ep_fini(tp_sock_ep_t *sock)
{
    tp_tcp_ep_t *ep = tp_tcp_ep_of(sock);
    util_free(ep->sq);
    util_free(ep->msgs.buf);
    util_free(ep->rx.stage);
}

void tp_tcp_ep_down(tp_sock_ep_t *sock, strata_status_t op_status)
{
    tp_tcp_ep_t *ep = tp_tcp_ep_of(sock);
    util_list_del(&ep->tx_link);
    util_list_del(&ep->rx_link);
    tp_tcp_cancel_ops(ep, op_status);
    if (ep->rx.imm_taken)
        tp_evq_arrival_cancel(&sock->ctx->evq);
    ep->rx.imm_taken = ep->rx.in_payload = false;
}

/* None while a frame is half sent: the peer would read it as the rest. */
size_t tp_tcp_bye(tp_sock_ep_t *sock, void *frame)
{
    if (tp_tcp_ep_of(sock)->sq_off != 0)
        return 0;
    tp_tcp_hdr_encode(&(tp_tcp_hdr_t){.type = TP_TCP_BYE}, frame);
    return TP_TCP_HDR_LEN;
}

strata_status_t tp_tcp_auth_send(tp_sock_ep_t *sock, const void *msg,
                                 size_t len, bool last)
{
    tp_tcp_ep_t *ep = tp_tcp_ep_of(sock);
    strata_status_t st =
        tp_tcp_queue_frame(ep, TP_TCP_AUTH, 0, msg, (uint32_t)len);
    if (last)
        tp_tcp_flush(ep); /* a refusal goes out before the close */
    return st;
}

/* ---- connections ---- */

void tp_tcp_accepted(tp_sock_ctx_t *ctx, int fd,
                     const struct sockaddr_storage *ss, char *peer, size_t len)
{
    tp_tcp_format((const struct sockaddr *)ss, peer, len);
    tp_tcp_sockopts(fd, ctx->base.timeout_ms, peer);
}

strata_status_t tp_tcp_connect(tp_ctx_t *base, const char *addr,
                               tp_ep_t **ep_out)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    strata_status_t st = tp_tcp_resolve(addr, false, &ss, &sl);
    if (st != STRATA_OK)
        return st;
    int fd =
        socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int err = errno;
        util_error("tcp: socket for %s: %s", addr, strerror(err));
        return util_errno_status(err, STRATA_ERR_IO);
    }
    tp_tcp_sockopts(fd, base->timeout_ms, addr);
    return tp_sock_connect(tp_sock_ctx(base), fd, (struct sockaddr *)&ss, sl,
                           addr, ep_out);
}

strata_status_t tp_tcp_listen(tp_ctx_t *base, const char *bind_addr,
                              tp_listener_t **listener_out)
{
    const char *where = bind_addr && *bind_addr ? bind_addr : "0.0.0.0:0";
    struct sockaddr_storage ss;
    socklen_t sl;
    strata_status_t st = tp_tcp_resolve(where, true, &ss, &sl);
    if (st == STRATA_OK)
        st = tp_sock_listen(tp_sock_ctx(base), SOCK_STREAM,
                            (struct sockaddr *)&ss, sl, where, listener_out);
    if (st != STRATA_OK)
        return st;
    /* The port the kernel chose, on an address peers can reach. */
    tp_listener_t *l = *listener_out;
    st = tp_tcp_listen_addr(tp_tcp_ctx(base), tp_sock_listener(l)->fd, l->addr,
                            sizeof(l->addr));
    if (st != STRATA_OK)
        tp_sock_listener_close(l);
    return st;
}
