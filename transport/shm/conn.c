/*
 * shm connections: listen and connect on unix SOCK_SEQPACKET sockets, the
 * exchange of rings and doorbells after the auth.h handshake, and an
 * endpoint's own part of the lifecycle sock.h drives. No descriptor of ours
 * reaches a peer before it proved the job secret.
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

/* ---- endpoints ---- */

strata_status_t tp_shm_ep_init(tp_sock_ep_t *sock)
{
    tp_shm_ep_t *ep = tp_shm_ep_of(sock);
    ep->peer_bell = -1;
    util_keymap_init(&ep->imports);
    util_list_init(&ep->pending);
    return STRATA_OK;
}

/* The peer's regions are unmapped only here: tp_peer_map()'s addresses
 * stay valid after a failure, until the endpoint is closed. */
void tp_shm_ep_fini(tp_sock_ep_t *sock)
{
    tp_shm_unimport_all(tp_shm_ep_of(sock));
}

/* Everything the endpoint holds goes, except its queued events and the
 * peer's regions (tp_shm_ep_fini). */
void tp_shm_ep_down(tp_sock_ep_t *sock, strata_status_t op_status)
{
    (void)op_status; /* every post completed when it was made */
    tp_shm_ep_t *ep = tp_shm_ep_of(sock);
    if (ep->peer_bell >= 0)
        close(ep->peer_bell);
    ep->peer_bell = -1;
    if (ep->rx_map)
        munmap(ep->rx_map, tp_shm_ring_bytes(TP_SHM_RING_CAP));
    if (ep->tx_map)
        munmap(ep->tx_map, tp_shm_ring_bytes(TP_SHM_RING_CAP));
    ep->rx_map = ep->tx_map = NULL;
    tp_shm_ctl_drop(ep);
}

/* The peer left our ring full for STRATA_TIMEOUT_MS (tp_shm_room()). */
void tp_shm_ep_expired(tp_sock_ep_t *sock)
{
    if (tp_shm_ring_room(&tp_shm_ep_of(sock)->tx, TP_MSG_MAX))
        util_list_del(&sock->timed_link); /* it drained meanwhile */
    else
        tp_sock_ep_fail(sock, STRATA_ERR_TIMEOUT,
                        "took no message from its full ring for "
                        "STRATA_TIMEOUT_MS=%d ms",
                        sock->ctx->base.timeout_ms);
}

size_t tp_shm_bye(tp_sock_ep_t *sock, void *frame)
{
    (void)sock;
    tp_shm_pkt_t bye = {.type = TP_SHM_PKT_BYE};
    memcpy(frame, &bye, TP_SHM_PKT_HDR);
    return TP_SHM_PKT_HDR;
}

/* The socket closed (status: STRATA_OK after a goodbye). Records the peer
 * pushed before it left are still delivered; then DISCONNECTED. */
void tp_shm_peer_left(tp_shm_ep_t *ep, strata_status_t status)
{
    if (ep->sock.state != TP_SOCK_UP) {
        tp_sock_ep_auth_closed(&ep->sock);
        return;
    }
    if (ep->leaving)
        return;
    if (status == STRATA_OK)
        util_info("shm: peer %s closed the connection", ep->sock.base.peer);
    else
        util_error("shm: peer %s: connection closed without a goodbye "
                   "(process died?)",
                   ep->sock.base.peer);
    tp_sock_ep_unpoll(&ep->sock);
    ep->gone = status;
    ep->leaving = true;
}

/* Called by the drain once the ring of a leaving peer is empty. */
void tp_shm_ep_gone(tp_shm_ep_t *ep)
{
    tp_sock_ep_down(&ep->sock, STRATA_ERR_PEER);
    tp_sock_ep_event(&ep->sock, TP_EV_DISCONNECTED, ep->gone);
}

/* ---- after the handshake: rings and doorbells ---- */

strata_status_t tp_shm_auth_send(tp_sock_ep_t *ep, const void *msg, size_t len,
                                 bool last)
{
    (void)last; /* a packet leaves at once, or waits in pending */
    tp_shm_ctl_send(tp_shm_ep_of(ep), TP_SHM_PKT_AUTH, 0, 0, msg, (uint32_t)len,
                    NULL, 0);
    return STRATA_OK;
}

/* Our ring, which the peer will produce into, and our doorbell. */
void tp_shm_setup_send(tp_sock_ep_t *sock)
{
    tp_shm_ep_t *ep = tp_shm_ep_of(sock);
    uint64_t bytes = tp_shm_ring_bytes(TP_SHM_RING_CAP);
    int fd = memfd_create("strata-shm-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) !=
            0 ||
        (ep->rx_map = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                           MAP_SHARED | MAP_POPULATE, fd, 0)) == MAP_FAILED) {
        int err = errno;
        ep->rx_map = NULL;
        tp_sock_ep_fail(sock, util_errno_status(err, STRATA_ERR_NOMEM),
                        "cannot create a ring: %s", strerror(err));
        if (fd >= 0)
            close(fd);
        return;
    }
    tp_shm_ring_attach(&ep->rx, ep->rx_map, TP_SHM_RING_CAP);
    int fds[2] = {fd, sock->ctx->bell};
    tp_shm_ctl_send(ep, TP_SHM_PKT_SETUP, 0, TP_SHM_RING_CAP, NULL, 0, fds, 2);
    close(fd);
    sock->state = TP_SOCK_SETUP;
}

/* Sends the regions exported before the endpoint was up. */
static void tp_shm_export_all(tp_shm_ep_t *ep)
{
    uint64_t key;
    void *val;
    for (uint32_t i = 0; util_keymap_next(&ep->sock.grants, &i, &key, &val);) {
        tp_shm_mr_t *mr = val;
        tp_shm_ctl_send(ep, TP_SHM_PKT_EXPORT, key, mr->sock.base.len, NULL, 0,
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
        tp_sock_ep_fail(&ep->sock, STRATA_ERR_PROTO, "sent %s", why);
        return;
    }
    tp_shm_ring_attach(&ep->tx, ep->tx_map, TP_SHM_RING_CAP);
    ep->peer_bell = bell_fd;
    tp_sock_ep_up(&ep->sock);
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
    return tp_sock_connect(tp_sock_ctx(base), fd, (struct sockaddr *)&sun, sl,
                           addr, ep_out);
}

void tp_shm_accepted(tp_sock_ctx_t *ctx, int fd,
                     const struct sockaddr_storage *ss, char *peer, size_t len)
{
    (void)ctx, (void)ss;
    struct ucred cred = {0};
    socklen_t cl = sizeof(cred);
    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl);
    snprintf(peer, len, "pid %d (uid %u)", (int)cred.pid, (unsigned)cred.uid);
}

strata_status_t tp_shm_listen(tp_ctx_t *base, const char *bind_addr,
                              tp_listener_t **listener_out)
{
    static _Atomic unsigned serial;
    char addr[sizeof(((tp_listener_t *)0)->addr)];
    /* No name, or a host:port meant for another provider: a fresh abstract
     * name, so callers can pass one bind string to any provider. */
    if (bind_addr && (bind_addr[0] == '@' || strchr(bind_addr, '/')))
        snprintf(addr, sizeof(addr), "%s", bind_addr);
    else
        snprintf(addr, sizeof(addr), "@strata-shm.%d.%u.%x", (int)getpid(),
                 serial++, (unsigned)(util_now_ns() & 0xffffff));
    struct sockaddr_un sun;
    socklen_t sl;
    if (!tp_shm_sockaddr(addr, &sun, &sl)) {
        util_error("shm: cannot listen on '%s': too long", addr);
        return STRATA_ERR_INVALID;
    }
    return tp_sock_listen(tp_sock_ctx(base), SOCK_SEQPACKET,
                          (struct sockaddr *)&sun, sl, addr, listener_out);
}

/* A socket file goes with its listener. */
void tp_shm_listener_close(tp_listener_t *l)
{
    if (l->addr[0] == '/')
        unlink(l->addr);
    tp_sock_listener_close(l);
}
