/*
 * shm control packets: one per SOCK_SEQPACKET message, descriptors attached
 * with SCM_RIGHTS. Everything the peer sends is checked (type, state,
 * length, number of descriptors, seals of the memfds it hands us) before it
 * is used; anything else fails the endpoint naming the peer.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "transport/shm/shm.h"
#include "util/alloc.h"
#include "util/log.h"

void *tp_shm_map_fd(int fd, uint64_t len, size_t *map_len_out,
                    const char **why_out)
{
    struct stat st;
    int seals = fcntl(fd, F_GET_SEALS);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t map_len = (size_t)((len + page - 1) & ~(uint64_t)(page - 1));
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size < map_len) {
        *why_out = "a memory descriptor smaller than announced";
        return NULL;
    }
    /* Unless the owner can no longer shrink it, a shrink would turn our
     * writes into SIGBUS. */
    if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
        *why_out = "a memory descriptor not sealed against shrinking";
        return NULL;
    }
    void *p = mmap(NULL, map_len, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) {
        *why_out = "a memory descriptor that cannot be mapped";
        return NULL;
    }
    *map_len_out = map_len;
    return p;
}

static void tp_shm_want_out(tp_shm_ep_t *ep, bool want)
{
    if (ep->want_out == want || ep->sock.fd < 0)
        return;
    struct epoll_event ev = {.events = EPOLLIN | (want ? EPOLLOUT : 0),
                             .data.ptr = &ep->sock.kind};
    if (epoll_ctl(ep->sock.ctx->epfd, EPOLL_CTL_MOD, ep->sock.fd, &ev) == 0)
        ep->want_out = want;
}

/* One attempt: true when sent, false when the queue is full. */
static bool tp_shm_ctl_try(tp_shm_ep_t *ep, const tp_shm_pkt_t *pkt,
                           const int *fds, int nfds)
{
    struct iovec iov = {(void *)pkt, TP_SHM_PKT_HDR + pkt->len};
    union {
        char buf[CMSG_SPACE(2 * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds > 0) {
        msg.msg_control = u.buf;
        msg.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
        memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
    }
    for (;;) {
        if (sendmsg(ep->sock.fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0)
            return true;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN)
            return false;
        tp_shm_peer_left(ep, STRATA_ERR_PEER);
        return true; /* nothing more to send to this peer */
    }
}

static void tp_shm_pending_free(tp_shm_pending_t *p)
{
    for (int i = 0; i < p->nfds; i++)
        close(p->fds[i]);
    util_list_del(&p->link);
    util_free(p);
}

/* Queues the packet when the socket is full; its descriptors are
 * duplicated, the caller keeps its own. */
void tp_shm_ctl_send(tp_shm_ep_t *ep, uint32_t type, uint64_t key,
                     uint64_t size, const void *payload, uint32_t len,
                     const int *fds, int nfds)
{
    if (ep->sock.fd < 0)
        return;
    tp_shm_pkt_t pkt = {.type = type, .len = len, .key = key, .size = size};
    if (len)
        memcpy(pkt.payload, payload, len);
    if (util_list_empty(&ep->pending) && tp_shm_ctl_try(ep, &pkt, fds, nfds))
        return;
    tp_shm_pending_t *p = util_calloc(1, sizeof(*p));
    if (!p) {
        tp_sock_ep_fail(&ep->sock, STRATA_ERR_NOMEM,
                        "no memory to queue a packet");
        return;
    }
    p->pkt = pkt;
    for (; p->nfds < nfds; p->nfds++)
        p->fds[p->nfds] = fcntl(fds[p->nfds], F_DUPFD_CLOEXEC, 0);
    util_list_add_tail(&ep->pending, &p->link);
    tp_shm_want_out(ep, true);
}

void tp_shm_ctl_flush(tp_shm_ep_t *ep)
{
    while (!util_list_empty(&ep->pending) && ep->sock.fd >= 0) {
        tp_shm_pending_t *p =
            util_container_of(ep->pending.next, tp_shm_pending_t, link);
        if (!tp_shm_ctl_try(ep, &p->pkt, p->fds, p->nfds))
            return;
        tp_shm_pending_free(p);
    }
    tp_shm_want_out(ep, false);
}

void tp_shm_ctl_drop(tp_shm_ep_t *ep)
{
    while (!util_list_empty(&ep->pending))
        tp_shm_pending_free(
            util_container_of(ep->pending.next, tp_shm_pending_t, link));
}

/* What each packet needs: its state, descriptors and payload bound. */
static const char *tp_shm_pkt_check(const tp_shm_ep_t *ep,
                                    const tp_shm_pkt_t *pkt, size_t n, int nfds)
{
    static const struct {
        tp_sock_state_t state;
        int nfds;
        uint32_t max_len;
    } rules[] = {
        [TP_SHM_PKT_AUTH] = {TP_SOCK_AUTH, 0, TP_AUTH_MSG_MAX},
        [TP_SHM_PKT_SETUP] = {TP_SOCK_SETUP, 2, 0},
        [TP_SHM_PKT_EXPORT] = {TP_SOCK_UP, 1, 0},
        [TP_SHM_PKT_UNEXPORT] = {TP_SOCK_UP, 0, 0},
        [TP_SHM_PKT_BYE] = {TP_SOCK_UP, 0, 0},
    };
    if (n < TP_SHM_PKT_HDR || pkt->type < TP_SHM_PKT_AUTH ||
        pkt->type > TP_SHM_PKT_BYE || pkt->len != n - TP_SHM_PKT_HDR)
        return "a malformed control packet";
    if (pkt->len > rules[pkt->type].max_len || nfds != rules[pkt->type].nfds)
        return "a control packet with the wrong payload or descriptors";
    if (ep->sock.state != rules[pkt->type].state &&
        !(pkt->type == TP_SHM_PKT_BYE && ep->sock.state == TP_SOCK_SETUP))
        return "a control packet out of turn";
    return NULL;
}

/* Handles one packet; consumes the descriptors it keeps (-1 in fds). */
static void tp_shm_pkt_handle(tp_shm_ep_t *ep, const tp_shm_pkt_t *pkt,
                              size_t n, int *fds, int nfds)
{
    const char *why = tp_shm_pkt_check(ep, pkt, n, nfds);
    if (why) {
        tp_sock_ep_fail(&ep->sock, STRATA_ERR_PROTO, "sent %s", why);
        return;
    }
    switch (pkt->type) {
    case TP_SHM_PKT_AUTH:
        tp_sock_auth_recv(&ep->sock, pkt->payload, pkt->len);
        break;
    case TP_SHM_PKT_SETUP:
        tp_shm_setup_recv(ep, pkt, fds[0], fds[1]);
        fds[1] = -1; /* the doorbell is kept */
        break;
    case TP_SHM_PKT_EXPORT:
        tp_shm_import(ep, pkt->key, pkt->size, fds[0]);
        break;
    case TP_SHM_PKT_UNEXPORT:
        tp_shm_unimport(ep, pkt->key);
        break;
    case TP_SHM_PKT_BYE:
        tp_shm_peer_left(ep, STRATA_OK);
        break;
    }
}

/* Takes the descriptors of a message; false if some were lost. */
static bool tp_shm_take_fds(struct msghdr *msg, int *fds, int *nfds)
{
    *nfds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (*nfds < 4)
                fds[(*nfds)++] = fd;
            else
                close(fd);
        }
    }
    return !(msg->msg_flags & (MSG_CTRUNC | MSG_TRUNC));
}

void tp_shm_ctl_recv(tp_shm_ep_t *ep)
{
    while (ep->sock.fd >= 0 && ep->sock.state != TP_SOCK_DOWN && !ep->leaving) {
        tp_shm_pkt_t pkt;
        union {
            char buf[CMSG_SPACE(4 * sizeof(int))];
            struct cmsghdr align;
        } u;
        struct iovec iov = {&pkt, sizeof(pkt)};
        struct msghdr msg = {.msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = u.buf,
                             .msg_controllen = sizeof(u.buf)};
        ssize_t n = recvmsg(ep->sock.fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (n <= 0) { /* closed (died?) or reset */
            tp_shm_peer_left(ep, STRATA_ERR_PEER);
            return;
        }
        int fds[4], nfds;
        if (!tp_shm_take_fds(&msg, fds, &nfds)) {
            tp_sock_ep_fail(&ep->sock, STRATA_ERR_PROTO,
                            "sent an oversized packet");
            nfds = nfds < 4 ? nfds : 4;
        } else {
            tp_shm_pkt_handle(ep, &pkt, (size_t)n, fds, nfds);
        }
        for (int i = 0; i < nfds; i++)
            if (fds[i] >= 0)
                close(fds[i]);
    }
}
