/*
 * tcp connections: listen, accept, connect, the auth.h handshake, and the
 * lifecycle of an endpoint (failure, close, free). An endpoint is reported
 * CONNECTED/ACCEPTED only after both sides proved the job secret, and every
 * handshake is bounded by STRATA_TIMEOUT_MS.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "transport/tcp/tcp.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

/* ---- handshake deadlines ---- */

static void tp_tcp_timer_update(tp_tcp_ctx_t *ctx)
{
    uint64_t first = 0;
    util_list_t *pos, *tmp;
    util_list_for_each_safe(pos, tmp, &ctx->handshakes)
    {
        tp_tcp_ep_t *ep = util_container_of(pos, tp_tcp_ep_t, hs_link);
        if (!first || ep->deadline_ns < first)
            first = ep->deadline_ns;
    }
    util_list_for_each_safe(pos, tmp, &ctx->listeners)
    {
        tp_tcp_listener_t *l = util_container_of(pos, tp_tcp_listener_t, link);
        first = tp_accept_first(&l->pause, first);
    }
    if (util_timer_arm(ctx->tfd, first) != 0)
        util_warn("tcp: cannot arm the handshake timer: %s", strerror(errno));
}

/* Polls the listener (EPOLLIN), or not (0) while it pauses. */
static void tp_tcp_listener_poll(tp_tcp_listener_t *l, uint32_t events)
{
    tp_tcp_ctx_t *ctx = tp_tcp_ctx(l->base.ctx);
    struct epoll_event ev = {.events = events, .data.ptr = &l->kind};
    if (epoll_ctl(ctx->epfd, EPOLL_CTL_MOD, l->fd, &ev) != 0)
        util_warn("tcp: listener %s: epoll_ctl: %s", l->base.addr,
                  strerror(errno));
}

void tp_tcp_expire(tp_tcp_ctx_t *ctx)
{
    uint64_t ticks;
    while (read(ctx->tfd, &ticks, sizeof(ticks)) > 0)
        ;
    uint64_t now = util_now_ns();
    util_list_t *pos, *tmp;
    util_list_for_each_safe(pos, tmp, &ctx->handshakes)
    {
        tp_tcp_ep_t *ep = util_container_of(pos, tp_tcp_ep_t, hs_link);
        if (ep->deadline_ns <= now)
            tp_tcp_ep_fail(ep, STRATA_ERR_TIMEOUT,
                           "no authenticated connection within "
                           "STRATA_TIMEOUT_MS=%d ms",
                           ctx->base.timeout_ms);
    }
    util_list_for_each_safe(pos, tmp, &ctx->listeners)
    {
        tp_tcp_listener_t *l = util_container_of(pos, tp_tcp_listener_t, link);
        if (tp_accept_due(&l->pause, now)) {
            tp_tcp_listener_poll(l, EPOLLIN);
            tp_tcp_accept(l);
        }
    }
    tp_tcp_timer_update(ctx);
}

/* ---- endpoints ---- */

tp_evq_item_t *tp_tcp_ep_event(tp_tcp_ep_t *ep, tp_event_type_t type,
                               strata_status_t status)
{
    tp_evq_item_t *it = tp_evq_push(&ep->ctx->evq);
    it->ev.type = type;
    it->ev.status = status;
    it->ev.ep = &ep->base;
    ep->events++;
    return it;
}

void tp_tcp_ep_free(tp_tcp_ep_t *ep)
{
    util_list_del(&ep->link);
    util_keymap_fini(&ep->grants);
    tp_evq_unreserve(&ep->ctx->evq, TP_TCP_SQ_DEPTH + 2);
    util_free(ep->sq);
    util_free(ep->msgs.buf);
    util_free(ep->rx.stage);
    util_free(ep);
}

static tp_tcp_ep_t *tp_tcp_ep_alloc(tp_tcp_ctx_t *ctx)
{
    tp_tcp_ep_t *ep = util_calloc(1, sizeof(*ep));
    if (!ep)
        return NULL;
    ep->sq = util_calloc(TP_TCP_SQ_DEPTH, sizeof(*ep->sq));
    ep->msgs.buf = util_malloc(TP_TCP_MSG_FIFO);
    ep->msgs.cap = TP_TCP_MSG_FIFO;
    ep->rx.stage = util_malloc(TP_TCP_RX_STAGE);
    ep->ctx = ctx;
    util_list_init(&ep->link);
    if (!ep->sq || !ep->msgs.buf || !ep->rx.stage ||
        tp_evq_reserve(&ctx->evq, TP_TCP_SQ_DEPTH + 2) != STRATA_OK) {
        util_free(ep->sq);
        util_free(ep->msgs.buf);
        util_free(ep->rx.stage);
        util_free(ep);
        return NULL;
    }
    return ep;
}

/* A new endpoint on a connected or connecting socket, in the handshake. */
static tp_tcp_ep_t *tp_tcp_ep_new(tp_tcp_ctx_t *ctx, int fd, bool server,
                                  const char *peer)
{
    tp_tcp_ep_t *ep = tp_tcp_ep_alloc(ctx);
    if (!ep) {
        util_error("tcp: out of memory for an endpoint to %s", peer);
        return NULL;
    }
    ep->base.ctx = &ctx->base;
    snprintf(ep->base.peer, sizeof(ep->base.peer), "%s", peer);
    ep->kind = TP_TCP_K_EP;
    ep->fd = fd;
    ep->server = server;
    ep->state = server ? TP_TCP_AUTH_WAIT : TP_TCP_CONNECTING;
    tp_auth_init(&ep->auth, &ctx->secret,
                 server ? TP_AUTH_SERVER : TP_AUTH_CLIENT);
    util_keymap_init(&ep->grants);
    util_list_init(&ep->hs_link);
    util_list_init(&ep->tx_link);
    util_list_init(&ep->rx_link);
    struct epoll_event ev = {
        .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
        .data.ptr = &ep->kind,
    };
    if (epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        util_error("tcp: peer %s: epoll_ctl: %s", peer, strerror(errno));
        tp_tcp_ep_free(ep);
        return NULL;
    }
    util_list_add_tail(&ctx->eps, &ep->link);
    ep->deadline_ns = util_now_ns() + (uint64_t)ctx->base.timeout_ms * 1000000u;
    util_list_add_tail(&ctx->handshakes, &ep->hs_link);
    tp_tcp_timer_update(ctx);
    return ep;
}

static void tp_tcp_ep_unpoll(tp_tcp_ep_t *ep)
{
    if (ep->fd < 0)
        return;
    epoll_ctl(ep->ctx->epfd, EPOLL_CTL_DEL, ep->fd, NULL);
    close(ep->fd);
    ep->fd = -1;
}

/* Shared by failure and close: the socket goes, nothing is pending. */
static void tp_tcp_ep_down(tp_tcp_ep_t *ep, strata_status_t op_status)
{
    bool handshaking = !util_list_empty(&ep->hs_link);
    ep->state = TP_TCP_DOWN;
    tp_tcp_ep_unpoll(ep);
    util_list_del(&ep->hs_link);
    util_list_del(&ep->tx_link);
    util_list_del(&ep->rx_link);
    if (handshaking)
        tp_tcp_timer_update(ep->ctx);
    tp_tcp_cancel_ops(ep, op_status);
    if (ep->rx.imm_taken)
        tp_evq_arrival_cancel(&ep->ctx->evq);
    ep->rx.imm_taken = ep->rx.in_payload = false;
}

/* Moves a closed endpoint to the graveyard, or frees it when no event names
 * it any more. */
static void tp_tcp_ep_bury(tp_tcp_ep_t *ep)
{
    ep->closed = true;
    util_list_del(&ep->link);
    util_list_add_tail(&ep->ctx->graveyard, &ep->link);
}

void tp_tcp_ep_fail(tp_tcp_ep_t *ep, strata_status_t status, const char *fmt,
                    ...)
{
    if (ep->state == TP_TCP_DOWN)
        return;
    char *why = ep->base.why;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(ep->base.why), fmt, ap);
    va_end(ap);
    tp_tcp_state_t was = ep->state;
    if (was != TP_TCP_UP && !ep->server) /* the caller reports it */
        util_debug("tcp: peer %s: %s", ep->base.peer, why);
    else if (status == STRATA_OK)
        util_info("tcp: peer %s: %s", ep->base.peer, why);
    else
        util_error("tcp: peer %s: %s", ep->base.peer, why);
    tp_tcp_ep_down(ep, status == STRATA_OK ? STRATA_ERR_PEER : status);
    if (was == TP_TCP_UP)
        tp_tcp_ep_event(ep, TP_EV_DISCONNECTED, status);
    else if (!ep->server)
        tp_tcp_ep_event(ep, TP_EV_CONNECTED, status);
    else
        tp_tcp_ep_bury(ep); /* never seen by the user */
}

void tp_tcp_peer_closed(tp_tcp_ep_t *ep)
{
    tp_tcp_ep_fail(ep, STRATA_OK, "closed the connection");
}

void tp_tcp_ep_close(tp_ep_t *base)
{
    tp_tcp_ep_t *ep = tp_tcp_ep(base);
    if (ep->state == TP_TCP_UP && ep->sq_off == 0) {
        /* Best effort, without waiting: tells the peer this is on purpose. */
        uint8_t bye[TP_TCP_HDR_LEN];
        tp_tcp_hdr_encode(&(tp_tcp_hdr_t){.type = TP_TCP_BYE}, bye);
        if (send(ep->fd, bye, sizeof(bye), MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
            util_debug("tcp: peer %s: no room to say goodbye", base->peer);
    }
    tp_tcp_ep_down(ep, STRATA_ERR_CANCELED);
    tp_evq_drop_ep(&ep->ctx->evq, base);
    /* Freed by the next progress call: the caller may still be reading
     * events of this batch that name ep. */
    tp_tcp_ep_bury(ep);
}

/* ---- the handshake ---- */

static void tp_tcp_up(tp_tcp_ep_t *ep)
{
    ep->state = TP_TCP_UP;
    util_list_del(&ep->hs_link);
    tp_tcp_timer_update(ep->ctx);
    util_debug("tcp: peer %s authenticated", ep->base.peer);
    tp_evq_item_t *it = tp_tcp_ep_event(
        ep, ep->server ? TP_EV_ACCEPTED : TP_EV_CONNECTED, STRATA_OK);
    if (ep->server)
        it->ev.listener = ep->listener ? &ep->listener->base : NULL;
}

/* received: auth messages received so far; a client's first is the
 * challenge, its second the result. */
static const char *tp_tcp_auth_why(const tp_tcp_ep_t *ep, strata_status_t st,
                                   int received)
{
    if (st == STRATA_ERR_PROTO)
        return "malformed authentication message (not a Strata peer, or "
               "another version)";
    if (st != STRATA_ERR_AUTH)
        return "authentication failed";
    if (ep->server)
        return "refused: the peer does not know the job secret";
    return received == 1 ? "authentication failed: the server proved another "
                           "job secret (STRATA_JOB_SECRET differs)"
                         : "the server refused our proof of the job secret "
                           "(STRATA_JOB_SECRET differs)";
}

static void tp_tcp_auth_step(tp_tcp_ep_t *ep, const uint8_t *msg, uint32_t len,
                             int received)
{
    uint8_t out[TP_AUTH_MSG_MAX];
    size_t out_len = 0;
    bool done = false;
    strata_status_t st =
        tp_auth_step(&ep->auth, msg, len, out, &out_len, &done);
    if (out_len && tp_tcp_queue_frame(ep, TP_TCP_AUTH, 0, out,
                                      (uint32_t)out_len) != STRATA_OK)
        st = STRATA_ERR_AGAIN;
    if (st != STRATA_OK) {
        tp_tcp_flush(ep); /* a refusal goes out before the close */
        tp_tcp_ep_fail(ep, st, "%s", tp_tcp_auth_why(ep, st, received));
        return;
    }
    if (done)
        tp_tcp_up(ep);
}

void tp_tcp_auth_recv(tp_tcp_ep_t *ep, const uint8_t *msg, uint32_t len)
{
    tp_tcp_auth_step(ep, msg, len, ++ep->auth_received);
}

void tp_tcp_connected(tp_tcp_ep_t *ep)
{
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(ep->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    if (err) {
        tp_tcp_ep_fail(ep, STRATA_ERR_PEER, "connect failed: %s",
                       strerror(err));
        return;
    }
    ep->state = TP_TCP_AUTH_WAIT;
    ep->rx.ready = true;
    util_list_ensure(&ep->ctx->rx_ready, &ep->rx_link);
    tp_tcp_auth_step(ep, NULL, 0, 0);
}

strata_status_t tp_tcp_connect(tp_ctx_t *base, const char *addr,
                               tp_ep_t **ep_out)
{
    tp_tcp_ctx_t *ctx = tp_tcp_ctx(base);
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
    int rc = connect(fd, (struct sockaddr *)&ss, sl);
    int err = rc == 0 ? 0 : errno;
    tp_tcp_ep_t *ep = tp_tcp_ep_new(ctx, fd, false, addr);
    if (!ep) {
        close(fd);
        return STRATA_ERR_NOMEM;
    }
    if (rc == 0)
        tp_tcp_connected(ep);
    else if (err != EINPROGRESS)
        tp_tcp_ep_fail(ep, STRATA_ERR_PEER, "connect failed: %s",
                       strerror(err));
    *ep_out = &ep->base;
    return STRATA_OK;
}

/* ---- listeners ---- */

static void tp_tcp_accept_failed(tp_tcp_listener_t *l, int err)
{
    if (!tp_accept_failed(&l->pause, "tcp", l->base.addr, err))
        return;
    tp_tcp_listener_poll(l, 0);
    tp_tcp_timer_update(tp_tcp_ctx(l->base.ctx));
}

void tp_tcp_accept(tp_tcp_listener_t *l)
{
    tp_tcp_ctx_t *ctx = tp_tcp_ctx(l->base.ctx);
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(l->fd, (struct sockaddr *)&ss, &sl,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno != EAGAIN)
                tp_tcp_accept_failed(l, errno);
            return;
        }
        tp_accept_ok(&l->pause, "tcp", l->base.addr);
        char peer[128];
        tp_tcp_format((struct sockaddr *)&ss, peer, sizeof(peer));
        tp_tcp_sockopts(fd, ctx->base.timeout_ms, peer);
        tp_tcp_ep_t *ep = tp_tcp_ep_new(ctx, fd, true, peer);
        if (!ep) {
            close(fd);
            continue;
        }
        ep->listener = l;
        ep->rx.ready = true;
        util_list_ensure(&ctx->rx_ready, &ep->rx_link);
    }
}

strata_status_t tp_tcp_listen(tp_ctx_t *base, const char *bind_addr,
                              tp_listener_t **listener_out)
{
    tp_tcp_ctx_t *ctx = tp_tcp_ctx(base);
    const char *where = bind_addr && *bind_addr ? bind_addr : "0.0.0.0:0";
    struct sockaddr_storage ss;
    socklen_t sl;
    strata_status_t st = tp_tcp_resolve(where, true, &ss, &sl);
    if (st != STRATA_OK)
        return st;
    tp_tcp_listener_t *l = util_calloc(1, sizeof(*l));
    if (!l)
        return STRATA_ERR_NOMEM;
    int one = 1;
    l->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->fd < 0 ||
        setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(l->fd, (struct sockaddr *)&ss, sl) != 0 ||
        listen(l->fd, SOMAXCONN) != 0) {
        util_error("tcp: cannot listen on %s: %s", where, strerror(errno));
        st = util_errno_status(errno, STRATA_ERR_IO);
        goto close_fd;
    }
    if ((st = tp_tcp_listen_addr(ctx, l->fd, l->base.addr,
                                 sizeof(l->base.addr))))
        goto close_fd;
    l->base.ctx = base;
    l->kind = TP_TCP_K_LISTENER;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &l->kind};
    if (epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, l->fd, &ev) != 0) {
        util_error("tcp: epoll_ctl for listener %s: %s", where,
                   strerror(errno));
        st = STRATA_ERR_IO;
        goto close_fd;
    }
    util_list_add_tail(&ctx->listeners, &l->link);
    *listener_out = &l->base;
    return STRATA_OK;
close_fd:
    if (l->fd >= 0)
        close(l->fd);
    util_free(l);
    return st;
}

void tp_tcp_listener_close(tp_listener_t *base)
{
    tp_tcp_listener_t *l = util_container_of(base, tp_tcp_listener_t, base);
    tp_tcp_ctx_t *ctx = tp_tcp_ctx(base->ctx);
    util_list_t *pos, *tmp;
    util_list_for_each_safe(pos, tmp, &ctx->eps)
    {
        tp_tcp_ep_t *ep = util_container_of(pos, tp_tcp_ep_t, link);
        if (ep->listener != l)
            continue;
        ep->listener = NULL;
        if (ep->state == TP_TCP_AUTH_WAIT) { /* not the user's yet */
            tp_tcp_ep_down(ep, STRATA_ERR_CANCELED);
            tp_tcp_ep_bury(ep);
        }
    }
    tp_evq_forget_listener(&ctx->evq, base);
    epoll_ctl(ctx->epfd, EPOLL_CTL_DEL, l->fd, NULL);
    close(l->fd);
    util_list_del(&l->link);
    util_free(l);
}
