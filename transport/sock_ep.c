/*
 * Endpoints of the socket providers (sock.h): made on an accepted or a
 * connecting socket, in the auth.h handshake until both sides proved the
 * job secret (only then reported CONNECTED/ACCEPTED), bounded by
 * STRATA_TIMEOUT_MS; then failure, close and free.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "transport/sock.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/log.h"

/* ---- events ---- */

tp_evq_item_t *tp_sock_ep_event(tp_sock_ep_t *ep, tp_event_type_t type,
                                strata_status_t status)
{
    tp_evq_item_t *it = tp_evq_push(&ep->ctx->evq);
    it->ev.type = type;
    it->ev.status = status;
    it->ev.ep = &ep->base;
    ep->events++;
    return it;
}

tp_evq_item_t *tp_sock_ep_arrival(tp_sock_ep_t *ep, bool taken,
                                  tp_event_type_t type, const void *data,
                                  uint32_t len)
{
    tp_evq_item_t *it =
        tp_evq_push_arrival(&ep->ctx->evq, taken, type, &ep->base, data, len);
    if (it)
        ep->events++;
    return it;
}

/* ---- deadlines ---- */

void tp_sock_deadline(tp_sock_ep_t *ep, uint64_t deadline_ns)
{
    ep->deadline_ns = deadline_ns;
    util_list_del(&ep->timed_link);
    if (deadline_ns)
        util_list_add_tail(&ep->ctx->timed, &ep->timed_link);
    tp_sock_timer_update(ep->ctx);
}

/* ---- lifecycle ---- */

void tp_sock_ep_free(tp_sock_ep_t *ep)
{
    tp_sock_ctx_t *ctx = ep->ctx;
    util_list_del(&ep->link);
    util_keymap_fini(&ep->grants);
    ctx->sops->ep_fini(ep);
    tp_evq_unreserve(&ctx->evq, ctx->sops->ep_depth + 2);
    util_free(ep);
}

tp_sock_ep_t *tp_sock_ep_new(tp_sock_ctx_t *ctx, int fd, bool server,
                             const char *peer)
{
    const tp_sock_ops_t *sops = ctx->sops;
    tp_sock_ep_t *ep = util_calloc(1, sops->ep_size);
    if (!ep || tp_evq_reserve(&ctx->evq, sops->ep_depth + 2) != STRATA_OK) {
        util_error("%s: out of memory for an endpoint to %s", tp_sock_name(ctx),
                   peer);
        util_free(ep);
        return NULL;
    }
    ep->base.ctx = &ctx->base;
    snprintf(ep->base.peer, sizeof(ep->base.peer), "%s", peer);
    ep->kind = TP_SOCK_K_EP;
    ep->ctx = ctx;
    ep->fd = fd;
    ep->server = server;
    ep->state = server ? TP_SOCK_AUTH : TP_SOCK_CONNECTING;
    tp_auth_init(&ep->auth, &ctx->secret,
                 server ? TP_AUTH_SERVER : TP_AUTH_CLIENT);
    util_keymap_init(&ep->grants);
    util_list_init(&ep->link);
    util_list_init(&ep->timed_link);
    struct epoll_event ev = {.events = sops->ep_poll, .data.ptr = &ep->kind};
    if (sops->ep_init(ep) != STRATA_OK) {
        util_error("%s: out of memory for an endpoint to %s", tp_sock_name(ctx),
                   peer);
        goto free_ep;
    }
    if (epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        util_error("%s: peer %s: epoll_ctl: %s", tp_sock_name(ctx), peer,
                   strerror(errno));
        goto free_ep;
    }
    util_list_add_tail(&ctx->eps, &ep->link);
    tp_sock_deadline(ep,
                     util_now_ns() + (uint64_t)ctx->base.timeout_ms * 1000000u);
    return ep;
free_ep:
    tp_sock_ep_free(ep);
    return NULL;
}

void tp_sock_ep_unpoll(tp_sock_ep_t *ep)
{
    if (ep->fd < 0)
        return;
    epoll_ctl(ep->ctx->epfd, EPOLL_CTL_DEL, ep->fd, NULL);
    close(ep->fd);
    ep->fd = -1;
}

/* Shared by failure and close: the socket goes, nothing is pending, and
 * what the endpoint holds goes except its queued events. */
void tp_sock_ep_down(tp_sock_ep_t *ep, strata_status_t op_status)
{
    ep->state = TP_SOCK_DOWN;
    tp_sock_ep_unpoll(ep);
    if (!util_list_empty(&ep->timed_link))
        tp_sock_deadline(ep, 0);
    ep->ctx->sops->ep_down(ep, op_status);
}

/* Moves a closed endpoint to the graveyard; the next progress call frees
 * it once no event names it any more. */
static void tp_sock_ep_bury(tp_sock_ep_t *ep)
{
    ep->closed = true;
    util_list_del(&ep->link);
    util_list_add_tail(&ep->ctx->graveyard, &ep->link);
}

void tp_sock_ep_drop(tp_sock_ep_t *ep)
{
    tp_sock_ep_down(ep, STRATA_ERR_CANCELED);
    tp_sock_ep_bury(ep);
}

void tp_sock_ep_fail(tp_sock_ep_t *ep, strata_status_t status, const char *fmt,
                     ...)
{
    if (ep->state == TP_SOCK_DOWN)
        return;
    const char *name = tp_sock_name(ep->ctx), *why = ep->base.why;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ep->base.why, sizeof(ep->base.why), fmt, ap);
    va_end(ap);
    tp_sock_state_t was = ep->state;
    if (was != TP_SOCK_UP && !ep->server) /* the caller reports it */
        util_debug("%s: peer %s: %s", name, ep->base.peer, why);
    else if (status == STRATA_OK)
        util_info("%s: peer %s: %s", name, ep->base.peer, why);
    else
        util_error("%s: peer %s: %s", name, ep->base.peer, why);
    tp_sock_ep_down(ep, status == STRATA_OK ? STRATA_ERR_PEER : status);
    if (was == TP_SOCK_UP)
        tp_sock_ep_event(ep, TP_EV_DISCONNECTED, status);
    else if (!ep->server)
        tp_sock_ep_event(ep, TP_EV_CONNECTED, status);
    else
        tp_sock_ep_bury(ep); /* never seen by the user */
}

void tp_sock_ep_auth_closed(tp_sock_ep_t *ep)
{
    tp_sock_ep_fail(ep, STRATA_ERR_AUTH,
                    "closed the connection during authentication (a "
                    "different job secret, or no Strata peer)");
}

void tp_sock_ep_close(tp_ep_t *base)
{
    tp_sock_ep_t *ep = tp_sock_ep(base);
    uint8_t bye[TP_SOCK_BYE_MAX];
    size_t n;
    /* Best effort, without waiting: tells the peer this is on purpose. */
    if (ep->state == TP_SOCK_UP && ep->fd >= 0 &&
        (n = ep->ctx->sops->bye(ep, bye)) > 0 &&
        send(ep->fd, bye, n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
        util_debug("%s: peer %s: no room to say goodbye", tp_sock_name(ep->ctx),
                   base->peer);
    tp_sock_ep_down(ep, STRATA_ERR_CANCELED);
    tp_evq_drop_ep(&ep->ctx->evq, base);
    /* Freed by the progress call after the one that reports its last
     * event: the caller may still be reading events that name ep. */
    tp_sock_ep_bury(ep);
}

strata_status_t tp_sock_unpostable(const tp_sock_ep_t *ep, const char *what,
                                   bool gone)
{
    const char *name = tp_sock_name(ep->ctx);
    if (ep->state == TP_SOCK_DOWN || gone) {
        /* The failure was logged when it happened. */
        util_debug("%s: %s to %s: the endpoint is down", name, what,
                   ep->base.peer);
        return STRATA_ERR_PEER;
    }
    util_error("%s: %s to %s before TP_EV_CONNECTED/ACCEPTED", name, what,
               ep->base.peer);
    return STRATA_ERR_STATE;
}

/* ---- the handshake ---- */

void tp_sock_ep_up(tp_sock_ep_t *ep)
{
    ep->state = TP_SOCK_UP;
    tp_sock_deadline(ep, 0);
    util_debug("%s: peer %s authenticated", tp_sock_name(ep->ctx),
               ep->base.peer);
    tp_evq_item_t *it = tp_sock_ep_event(
        ep, ep->server ? TP_EV_ACCEPTED : TP_EV_CONNECTED, STRATA_OK);
    if (ep->server)
        it->ev.listener = ep->listener ? &ep->listener->base : NULL;
}

/* A client's first auth message received is the challenge, its second the
 * result. */
static const char *tp_sock_auth_why(const tp_sock_ep_t *ep, strata_status_t st)
{
    if (st == STRATA_ERR_PROTO)
        return "malformed authentication message (not a Strata peer, or "
               "another version)";
    if (st != STRATA_ERR_AUTH)
        return "authentication failed";
    if (ep->server)
        return "refused: the peer does not know the job secret";
    return ep->auth_received == 1
               ? "authentication failed: the server proved another job "
                 "secret (STRATA_JOB_SECRET differs)"
               : "the server refused our proof of the job secret "
                 "(STRATA_JOB_SECRET differs)";
}

static void tp_sock_auth_step(tp_sock_ep_t *ep, const void *msg, uint32_t len)
{
    uint8_t out[TP_AUTH_MSG_MAX];
    size_t out_len = 0;
    bool done = false;
    strata_status_t st =
        tp_auth_step(&ep->auth, msg, len, out, &out_len, &done);
    if (out_len && ep->ctx->sops->auth_send(ep, out, out_len,
                                            st != STRATA_OK) != STRATA_OK)
        st = STRATA_ERR_AGAIN;
    if (st != STRATA_OK)
        tp_sock_ep_fail(ep, st, "%s", tp_sock_auth_why(ep, st));
    else if (done)
        ep->ctx->sops->authed(ep);
}

void tp_sock_auth_recv(tp_sock_ep_t *ep, const void *msg, uint32_t len)
{
    ep->auth_received++;
    tp_sock_auth_step(ep, msg, len);
}

void tp_sock_connected(tp_sock_ep_t *ep)
{
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(ep->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    if (err) {
        tp_sock_ep_fail(ep, STRATA_ERR_PEER, "connect failed: %s",
                        strerror(err));
        return;
    }
    ep->state = TP_SOCK_AUTH;
    /* Readable, as far as we know: an edge that came with the connect's
     * was not looked at. */
    ep->ctx->sops->ep_ready(ep, EPOLLIN);
    if (ep->state == TP_SOCK_AUTH)
        tp_sock_auth_step(ep, NULL, 0);
}

strata_status_t tp_sock_connect(tp_sock_ctx_t *ctx, int fd,
                                const struct sockaddr *sa, socklen_t sl,
                                const char *peer, tp_ep_t **ep_out)
{
    int rc = connect(fd, sa, sl);
    int err = rc == 0 ? 0 : errno;
    tp_sock_ep_t *ep = tp_sock_ep_new(ctx, fd, false, peer);
    if (!ep) {
        close(fd);
        return STRATA_ERR_NOMEM;
    }
    if (rc == 0)
        tp_sock_connected(ep);
    else if (err != EINPROGRESS)
        tp_sock_ep_fail(ep, STRATA_ERR_PEER, "connect failed: %s",
                        strerror(err));
    *ep_out = &ep->base;
    return STRATA_OK;
}
