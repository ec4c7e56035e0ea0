/*
 * shm connections: listen, accept and connect on unix SOCK_SEQPACKET
 * sockets, the auth.h handshake, the exchange of rings and doorbells, and
 * the lifecycle of an endpoint. No descriptor of ours reaches a peer before
 * it proved the job secret.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "transport/shm/shm.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

/* ---- deadlines: handshakes, and rings a peer stopped draining ---- */

void tp_shm_timer_update(tp_shm_ctx_t *ctx)
{
    uint64_t first = 0;
    util_list_t *pos, *tmp;
    util_list_for_each_safe(pos, tmp, &ctx->timed)
    {
        tp_shm_ep_t *ep = util_container_of(pos, tp_shm_ep_t, timed_link);
        if (!first || ep->deadline_ns < first)
            first = ep->deadline_ns;
    }
    util_list_for_each_safe(pos, tmp, &ctx->listeners)
    {
        tp_shm_listener_t *l = util_container_of(pos, tp_shm_listener_t, link);
        first = tp_accept_first(&l->pause, first);
    }
    if (util_timer_arm(ctx->tfd, first) != 0)
        util_warn("shm: cannot arm the timer: %s", strerror(errno));
}

/* Polls the listener (EPOLLIN), or not (0) while it pauses. */
static void tp_shm_listener_poll(tp_shm_listener_t *l, uint32_t events)
{
    tp_shm_ctx_t *ctx = tp_shm_ctx(l->base.ctx);
    struct epoll_event ev = {.events = events, .data.ptr = &l->kind};
    if (epoll_ctl(ctx->epfd, EPOLL_CTL_MOD, l->fd, &ev) != 0)
        util_warn("shm: listener %s: epoll_ctl: %s", l->base.addr,
                  strerror(errno));
}

void tp_shm_expire(tp_shm_ctx_t *ctx)
{
    uint64_t ticks, now = util_now_ns();
    while (read(ctx->tfd, &ticks, sizeof(ticks)) > 0)
        ;
    util_list_t *pos, *tmp;
    util_list_for_each_safe(pos, tmp, &ctx->timed)
    {
        tp_shm_ep_t *ep = util_container_of(pos, tp_shm_ep_t, timed_link);
        if (ep->deadline_ns > now)
            continue;
        if (ep->state != TP_SHM_UP)
            tp_shm_ep_fail(ep, STRATA_ERR_TIMEOUT,
                           "no authenticated connection within "
                           "STRATA_TIMEOUT_MS=%d ms",
                           ctx->base.timeout_ms);
        else if (tp_shm_ring_room(&ep->tx, TP_MSG_MAX))
            util_list_del(&ep->timed_link); /* it drained meanwhile */
        else
            tp_shm_ep_fail(ep, STRATA_ERR_TIMEOUT,
                           "took no message from its full ring for "
                           "STRATA_TIMEOUT_MS=%d ms",
                           ctx->base.timeout_ms);
    }
    util_list_for_each_safe(pos, tmp, &ctx->listeners)
    {
        tp_shm_listener_t *l = util_container_of(pos, tp_shm_listener_t, link);
        if (tp_accept_due(&l->pause, now)) {
            tp_shm_listener_poll(l, EPOLLIN);
            tp_shm_accept(l);
        }
    }
    tp_shm_timer_update(ctx);
}

static void tp_shm_deadline(tp_shm_ep_t *ep, uint64_t deadline_ns)
{
    ep->deadline_ns = deadline_ns;
    util_list_del(&ep->timed_link);
    if (deadline_ns)
        util_list_add_tail(&ep->ctx->timed, &ep->timed_link);
    tp_shm_timer_update(ep->ctx);
}

/* ---- endpoints ---- */

tp_evq_item_t *tp_shm_ep_event(tp_shm_ep_t *ep, tp_event_type_t type,
                               strata_status_t status)
{
    tp_evq_item_t *it = tp_evq_push(&ep->ctx->evq);
    it->ev.type = type;
    it->ev.status = status;
    it->ev.ep = &ep->base;
    ep->events++;
    return it;
}

void tp_shm_ep_free(tp_shm_ep_t *ep)
{
    util_list_del(&ep->link);
    util_keymap_fini(&ep->exports);
    util_keymap_fini(&ep->imports);
    tp_evq_unreserve(&ep->ctx->evq, TP_SHM_DEPTH + 2);
    util_free(ep);
}

static tp_shm_ep_t *tp_shm_ep_new(tp_shm_ctx_t *ctx, int fd, bool server,
                                  const char *peer)
{
    tp_shm_ep_t *ep = util_calloc(1, sizeof(*ep));
    if (!ep || tp_evq_reserve(&ctx->evq, TP_SHM_DEPTH + 2) != STRATA_OK) {
        util_error("shm: out of memory for an endpoint to %s", peer);
        util_free(ep);
        return NULL;
    }
    ep->base.ctx = &ctx->base;
    snprintf(ep->base.peer, sizeof(ep->base.peer), "%s", peer);
    ep->kind = TP_SHM_K_EP;
    ep->ctx = ctx;
    ep->fd = fd;
    ep->peer_bell = -1;
    ep->server = server;
    ep->state = TP_SHM_AUTH_WAIT;
    tp_auth_init(&ep->auth, &ctx->secret,
                 server ? TP_AUTH_SERVER : TP_AUTH_CLIENT);
    util_keymap_init(&ep->exports);
    util_keymap_init(&ep->imports);
    util_list_init(&ep->pending);
    util_list_init(&ep->timed_link);
    util_list_add_tail(&ctx->eps, &ep->link);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &ep->kind};
    if (epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        util_error("shm: peer %s: epoll_ctl: %s", peer, strerror(errno));
        tp_shm_ep_free(ep);
        return NULL;
    }
    tp_shm_deadline(ep,
                    util_now_ns() + (uint64_t)ctx->base.timeout_ms * 1000000u);
    return ep;
}

/* Everything the endpoint holds goes, except its queued events. */
static void tp_shm_ep_down(tp_shm_ep_t *ep)
{
    ep->state = TP_SHM_DOWN;
    if (ep->fd >= 0) {
        epoll_ctl(ep->ctx->epfd, EPOLL_CTL_DEL, ep->fd, NULL);
        close(ep->fd);
        ep->fd = -1;
    }
    if (ep->peer_bell >= 0)
        close(ep->peer_bell);
    ep->peer_bell = -1;
    if (ep->rx_map)
        munmap(ep->rx_map, tp_shm_ring_bytes(TP_SHM_RING_CAP));
    if (ep->tx_map)
        munmap(ep->tx_map, tp_shm_ring_bytes(TP_SHM_RING_CAP));
    ep->rx_map = ep->tx_map = NULL;
    tp_shm_unimport_all(ep);
    tp_shm_ctl_drop(ep);
    if (!util_list_empty(&ep->timed_link))
        tp_shm_deadline(ep, 0);
}

static void tp_shm_ep_bury(tp_shm_ep_t *ep)
{
    ep->closed = true;
    util_list_del(&ep->link);
    util_list_add_tail(&ep->ctx->graveyard, &ep->link);
}

static void tp_shm_ep_vfail(tp_shm_ep_t *ep, strata_status_t status,
                            const char *fmt, va_list ap)
{
    if (ep->state == TP_SHM_DOWN)
        return;
    char *why = ep->base.why;
    vsnprintf(why, sizeof(ep->base.why), fmt, ap);
    tp_shm_state_t was = ep->state;
    if (was != TP_SHM_UP && !ep->server) /* the caller reports it */
        util_debug("shm: peer %s: %s", ep->base.peer, why);
    else if (status == STRATA_OK)
        util_info("shm: peer %s: %s", ep->base.peer, why);
    else
        util_error("shm: peer %s: %s", ep->base.peer, why);
    tp_shm_ep_down(ep);
    if (was == TP_SHM_UP)
        tp_shm_ep_event(ep, TP_EV_DISCONNECTED, status);
    else if (!ep->server)
        tp_shm_ep_event(ep, TP_EV_CONNECTED, status);
    else
        tp_shm_ep_bury(ep); /* never seen by the user */
}

void tp_shm_ep_fail(tp_shm_ep_t *ep, strata_status_t status, const char *fmt,
                    ...)
{
    va_list ap;
    va_start(ap, fmt);
    tp_shm_ep_vfail(ep, status, fmt, ap);
    va_end(ap);
}

/* The socket closed (status: STRATA_OK after a goodbye). Records the peer
 * pushed before it left are still delivered; then DISCONNECTED. */
void tp_shm_peer_left(tp_shm_ep_t *ep, strata_status_t status)
{
    if (ep->state != TP_SHM_UP) {
        tp_shm_ep_fail(ep, STRATA_ERR_AUTH,
                       "closed the connection during authentication (a "
                       "different job secret, or no Strata peer)");
        return;
    }
    if (ep->leaving)
        return;
    if (status == STRATA_OK)
        util_info("shm: peer %s closed the connection", ep->base.peer);
    else
        util_error("shm: peer %s: connection closed without a goodbye "
                   "(process died?)",
                   ep->base.peer);
    epoll_ctl(ep->ctx->epfd, EPOLL_CTL_DEL, ep->fd, NULL);
    close(ep->fd);
    ep->fd = -1;
    ep->gone = status;
    ep->leaving = true;
}

/* Called by the drain once the ring of a leaving peer is empty. */
void tp_shm_ep_gone(tp_shm_ep_t *ep)
{
    tp_shm_ep_down(ep);
    tp_shm_ep_event(ep, TP_EV_DISCONNECTED, ep->gone);
}

void tp_shm_ep_close(tp_ep_t *base)
{
    tp_shm_ep_t *ep = tp_shm_ep(base);
    if (ep->state == TP_SHM_UP && ep->fd >= 0) {
        tp_shm_pkt_t bye = {.type = TP_SHM_PKT_BYE};
        if (send(ep->fd, &bye, TP_SHM_PKT_HDR, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
            util_debug("shm: peer %s: no room to say goodbye", base->peer);
    }
    tp_shm_ep_down(ep);
    tp_evq_drop_ep(&ep->ctx->evq, base);
    /* Freed by the next progress call: the caller may still be reading
     * events of this batch that name ep. */
    tp_shm_ep_bury(ep);
}

/* ---- the handshake ---- */

/* Our ring, which the peer will produce into, and our doorbell. */
static void tp_shm_setup_send(tp_shm_ep_t *ep)
{
    uint64_t bytes = tp_shm_ring_bytes(TP_SHM_RING_CAP);
    int fd = memfd_create("strata-shm-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) !=
            0 ||
        (ep->rx_map = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                           MAP_SHARED | MAP_POPULATE, fd, 0)) == MAP_FAILED) {
        int err = errno;
        ep->rx_map = NULL;
        tp_shm_ep_fail(ep, util_errno_status(err, STRATA_ERR_NOMEM),
                       "cannot create a ring: %s", strerror(err));
        if (fd >= 0)
            close(fd);
        return;
    }
    tp_shm_ring_attach(&ep->rx, ep->rx_map, TP_SHM_RING_CAP);
    int fds[2] = {fd, ep->ctx->bell};
    tp_shm_ctl_send(ep, TP_SHM_PKT_SETUP, 0, TP_SHM_RING_CAP, NULL, 0, fds, 2);
    close(fd);
    ep->state = TP_SHM_SETUP_WAIT;
}

static const char *tp_shm_auth_why(const tp_shm_ep_t *ep, strata_status_t st)
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

static void tp_shm_auth_step(tp_shm_ep_t *ep, const uint8_t *msg, uint32_t len)
{
    uint8_t out[TP_AUTH_MSG_MAX];
    size_t out_len = 0;
    bool done = false;
    strata_status_t st =
        tp_auth_step(&ep->auth, msg, len, out, &out_len, &done);
    if (out_len)
        tp_shm_ctl_send(ep, TP_SHM_PKT_AUTH, 0, 0, out, (uint32_t)out_len, NULL,
                        0);
    if (st != STRATA_OK)
        tp_shm_ep_fail(ep, st, "%s", tp_shm_auth_why(ep, st));
    else if (done)
        tp_shm_setup_send(ep);
}

void tp_shm_auth_recv(tp_shm_ep_t *ep, const uint8_t *msg, uint32_t len)
{
    ep->auth_received++;
    tp_shm_auth_step(ep, msg, len);
}

/* Sends the regions exported before the endpoint was up. */
static void tp_shm_export_all(tp_shm_ep_t *ep)
{
    uint64_t key;
    void *val;
    for (uint32_t i = 0; util_keymap_next(&ep->exports, &i, &key, &val);) {
        tp_shm_mr_t *mr = val;
        tp_shm_ctl_send(ep, TP_SHM_PKT_EXPORT, key, mr->base.len, NULL, 0,
                        &mr->fd, 1);
    }
}

void tp_shm_setup_recv(tp_shm_ep_t *ep, const tp_shm_pkt_t *pkt, int ring_fd,
                       int bell_fd)
{
    const char *why = "a ring of another size";
    size_t map_len = 0;
    if (pkt->size != TP_SHM_RING_CAP ||
        !(ep->tx_map = tp_shm_map_fd(
              ring_fd, tp_shm_ring_bytes(TP_SHM_RING_CAP), &map_len, &why))) {
        close(bell_fd);
        tp_shm_ep_fail(ep, STRATA_ERR_PROTO, "sent %s", why);
        return;
    }
    tp_shm_ring_attach(&ep->tx, ep->tx_map, TP_SHM_RING_CAP);
    ep->peer_bell = bell_fd;
    ep->state = TP_SHM_UP;
    tp_shm_deadline(ep, 0);
    util_debug("shm: peer %s authenticated", ep->base.peer);
    tp_evq_item_t *it = tp_shm_ep_event(
        ep, ep->server ? TP_EV_ACCEPTED : TP_EV_CONNECTED, STRATA_OK);
    if (ep->server)
        it->ev.listener = ep->listener ? &ep->listener->base : NULL;
    tp_shm_export_all(ep);
}

/* ---- addresses ---- */

/* "@name": abstract (no file, gone with the listener); anything with a '/'
 * a socket file. */
static bool tp_shm_sockaddr(const char *addr, struct sockaddr_un *sun,
                            socklen_t *len_out)
{
    size_t n = strlen(addr);
    memset(sun, 0, sizeof(*sun));
    sun->sun_family = AF_UNIX;
    if (n == 0 || n >= sizeof(sun->sun_path) ||
        (addr[0] != '@' && !strchr(addr, '/')))
        return false;
    memcpy(sun->sun_path, addr, n);
    if (addr[0] == '@')
        sun->sun_path[0] = '\0';
    *len_out = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n +
                           (addr[0] != '@'));
    return true;
}

strata_status_t tp_shm_connect(tp_ctx_t *base, const char *addr,
                               tp_ep_t **ep_out)
{
    tp_shm_ctx_t *ctx = tp_shm_ctx(base);
    struct sockaddr_un sun;
    socklen_t sl;
    if (!tp_shm_sockaddr(addr, &sun, &sl)) {
        util_error("shm: address '%s' is neither @name nor a socket path",
                   addr);
        return STRATA_ERR_INVALID;
    }
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int err = errno;
        util_error("shm: socket for %s: %s", addr, strerror(err));
        return util_errno_status(err, STRATA_ERR_IO);
    }
    int rc = connect(fd, (struct sockaddr *)&sun, sl);
    int err = rc == 0 ? 0 : errno;
    tp_shm_ep_t *ep = tp_shm_ep_new(ctx, fd, false, addr);
    if (!ep) {
        close(fd);
        return STRATA_ERR_NOMEM;
    }
    if (rc != 0)
        tp_shm_ep_fail(ep, STRATA_ERR_PEER, "connect failed: %s",
                       strerror(err));
    else
        tp_shm_auth_step(ep, NULL, 0);
    *ep_out = &ep->base;
    return STRATA_OK;
}

void tp_shm_accept(tp_shm_listener_t *l)
{
    tp_shm_ctx_t *ctx = tp_shm_ctx(l->base.ctx);
    for (;;) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno != EAGAIN &&
                tp_accept_failed(&l->pause, "shm", l->base.addr, errno)) {
                tp_shm_listener_poll(l, 0);
                tp_shm_timer_update(ctx);
            }
            return;
        }
        tp_accept_ok(&l->pause, "shm", l->base.addr);
        struct ucred cred = {0};
        socklen_t cl = sizeof(cred);
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl);
        char peer[64];
        snprintf(peer, sizeof(peer), "pid %d (uid %u)", (int)cred.pid,
                 (unsigned)cred.uid);
        tp_shm_ep_t *ep = tp_shm_ep_new(ctx, fd, true, peer);
        if (!ep)
            close(fd);
        else
            ep->listener = l;
    }
}

strata_status_t tp_shm_listen(tp_ctx_t *base, const char *bind_addr,
                              tp_listener_t **listener_out)
{
    tp_shm_ctx_t *ctx = tp_shm_ctx(base);
    static _Atomic unsigned serial;
    tp_shm_listener_t *l = util_calloc(1, sizeof(*l));
    if (!l)
        return STRATA_ERR_NOMEM;
    /* No name, or a host:port meant for another provider: a fresh abstract
     * name, so callers can pass one bind string to any provider. */
    if (bind_addr && (bind_addr[0] == '@' || strchr(bind_addr, '/')))
        snprintf(l->base.addr, sizeof(l->base.addr), "%s", bind_addr);
    else
        snprintf(l->base.addr, sizeof(l->base.addr), "@strata-shm.%d.%u.%x",
                 (int)getpid(), serial++, (unsigned)(util_now_ns() & 0xffffff));
    struct sockaddr_un sun;
    socklen_t sl;
    strata_status_t st = STRATA_ERR_IO;
    if (!tp_shm_sockaddr(l->base.addr, &sun, &sl)) {
        util_error("shm: cannot listen on '%s': too long", l->base.addr);
        st = STRATA_ERR_INVALID;
        goto free_l;
    }
    l->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->fd < 0 || bind(l->fd, (struct sockaddr *)&sun, sl) != 0 ||
        listen(l->fd, SOMAXCONN) != 0) {
        st = util_errno_status(errno, STRATA_ERR_IO);
        util_error("shm: cannot listen on %s: %s", l->base.addr,
                   strerror(errno));
        goto close_fd;
    }
    l->base.ctx = base;
    l->kind = TP_SHM_K_LISTENER;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &l->kind};
    if (epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, l->fd, &ev) != 0) {
        util_error("shm: epoll_ctl for %s: %s", l->base.addr, strerror(errno));
        goto close_fd;
    }
    util_list_add_tail(&ctx->listeners, &l->link);
    *listener_out = &l->base;
    return STRATA_OK;
close_fd:
    if (l->fd >= 0)
        close(l->fd);
free_l:
    util_free(l);
    return st;
}

void tp_shm_listener_close(tp_listener_t *base)
{
    tp_shm_listener_t *l = util_container_of(base, tp_shm_listener_t, base);
    tp_shm_ctx_t *ctx = tp_shm_ctx(base->ctx);
    util_list_t *pos, *tmp;
    util_list_for_each_safe(pos, tmp, &ctx->eps)
    {
        tp_shm_ep_t *ep = util_container_of(pos, tp_shm_ep_t, link);
        if (ep->listener != l)
            continue;
        ep->listener = NULL;
        if (ep->state < TP_SHM_UP) { /* not the user's yet */
            tp_shm_ep_down(ep);
            tp_shm_ep_bury(ep);
        }
    }
    tp_evq_forget_listener(&ctx->evq, base);
    epoll_ctl(ctx->epfd, EPOLL_CTL_DEL, l->fd, NULL);
    close(l->fd);
    if (base->addr[0] == '/')
        unlink(base->addr);
    util_list_del(&l->link);
    util_free(l);
}
