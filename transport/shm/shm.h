/*
 * The shm provider's private structures, shared by its files:
 *   shm.c   context, regions (sealed memfds), progress loop, on the base of
 *           sock.h
 *   conn.c  listen, connect, rings and doorbells, and an endpoint's own
 *           part of its lifecycle
 *   ctl.c   control packets on the unix socket, with descriptors attached
 *   data.c  writes (a copy into the peer's mapping), reads in place
 *           (tp_peer_map) and the rings
 *   ring.c  the lock-free record ring in shared memory
 *
 * Peers meet on a unix SOCK_SEQPACKET socket. It carries the authentication,
 * then the descriptors of each side's ring and doorbell, then a region's
 * memfd when it is exported; it also tells us at once when the peer dies.
 * Data never crosses it: a write is a memcpy into the peer's mapping of the
 * target region, and its immediate, like every control message, is a record
 * in the peer's ring, so both keep the order they were posted in.
 */
#ifndef STRATA_TRANSPORT_SHM_SHM_H
#define STRATA_TRANSPORT_SHM_SHM_H

#include <stdbool.h>
#include <stdint.h>

#include "transport/shm/ring.h"
#include "transport/sock.h"

#define TP_SHM_RING_CAP (256 * 1024) /* record bytes per direction */
#define TP_SHM_DEPTH 256             /* unreported completions per ep */
#define TP_SHM_ARRIVALS 4096         /* arrival events queued at most */
#define TP_SHM_RECV_FIFO (256 * 1024)
#define TP_SHM_POLL_NS 100000 /* the sockets are polled this often */

/* Control packets on the socket. */
enum tp_shm_pkt_type {
    TP_SHM_PKT_AUTH = 1,     /* payload: an auth.h message */
    TP_SHM_PKT_SETUP = 2,    /* fds: ring memfd, doorbell eventfd */
    TP_SHM_PKT_EXPORT = 3,   /* fd: region memfd; key, size */
    TP_SHM_PKT_UNEXPORT = 4, /* key */
    TP_SHM_PKT_BYE = 5,
};

typedef struct tp_shm_pkt {
    uint32_t type;
    uint32_t len; /* payload bytes */
    uint64_t key;
    uint64_t size;
    uint8_t payload[TP_AUTH_MSG_MAX];
} tp_shm_pkt_t;

#define TP_SHM_PKT_HDR offsetof(tp_shm_pkt_t, payload)

/* A packet that could not be sent yet (the socket's queue was full). */
typedef struct tp_shm_pending {
    util_list_t link;
    tp_shm_pkt_t pkt;
    int fds[2];
    int nfds;
} tp_shm_pending_t;

typedef struct tp_shm_mr {
    tp_sock_mr_t sock;
    int fd;         /* the memfd, or -1 for tp_mr_reg() memory */
    size_t map_len; /* bytes mapped (len rounded up to pages) */
} tp_shm_mr_t;

/* A region of the peer's, mapped here. */
typedef struct tp_shm_import {
    uint8_t *base;
    uint64_t len;
    size_t map_len;
} tp_shm_import_t;

/* The state TP_SOCK_SETUP: authenticated, waiting for the peer's ring.
 * Its deadline is the handshake's, then, once up, a full ring's patience. */
typedef struct tp_shm_ep {
    tp_sock_ep_t sock;
    bool want_out;         /* EPOLLOUT: packets wait in pending */
    util_keymap_t imports; /* key -> tp_shm_import_t the peer granted us */
    void *rx_map, *tx_map;
    tp_shm_ring_t rx;     /* ours: the peer produces, we consume */
    tp_shm_ring_t tx;     /* the peer's: we produce */
    int peer_bell;        /* the peer's doorbell eventfd */
    uint32_t unreported;  /* completions queued, not reported yet */
    strata_status_t gone; /* the peer left: DISCONNECTED once drained */
    bool leaving;
    util_list_t pending; /* tp_shm_pending_t */
} tp_shm_ep_t;

typedef struct tp_shm_ctx {
    tp_sock_ctx_t sock;
} tp_shm_ctx_t;

static inline tp_shm_ctx_t *tp_shm_ctx(tp_ctx_t *ctx)
{
    return util_container_of(tp_sock_ctx(ctx), tp_shm_ctx_t, sock);
}

static inline tp_shm_ep_t *tp_shm_ep_of(tp_sock_ep_t *ep)
{
    return util_container_of(ep, tp_shm_ep_t, sock);
}

static inline tp_shm_ep_t *tp_shm_ep(tp_ep_t *ep)
{
    return tp_shm_ep_of(tp_sock_ep(ep));
}

/* conn.c: the hooks of sock.h that make and end connections */
strata_status_t tp_shm_listen(tp_ctx_t *ctx, const char *bind,
                              tp_listener_t **listener_out);
void tp_shm_listener_close(tp_listener_t *listener);
strata_status_t tp_shm_connect(tp_ctx_t *ctx, const char *addr,
                               tp_ep_t **ep_out);
void tp_shm_accepted(tp_sock_ctx_t *ctx, int fd,
                     const struct sockaddr_storage *ss, char *peer, size_t len);
strata_status_t tp_shm_ep_init(tp_sock_ep_t *ep);
void tp_shm_ep_fini(tp_sock_ep_t *ep);
void tp_shm_ep_down(tp_sock_ep_t *ep, strata_status_t op_status);
void tp_shm_ep_expired(tp_sock_ep_t *ep);
size_t tp_shm_bye(tp_sock_ep_t *ep, void *frame);
strata_status_t tp_shm_auth_send(tp_sock_ep_t *ep, const void *msg, size_t len,
                                 bool last);
void tp_shm_setup_send(tp_sock_ep_t *ep);
void tp_shm_peer_left(tp_shm_ep_t *ep, strata_status_t status);
void tp_shm_ep_gone(tp_shm_ep_t *ep);
void tp_shm_setup_recv(tp_shm_ep_t *ep, const tp_shm_pkt_t *pkt, int ring_fd,
                       int bell_fd);
void tp_shm_ring_bell(tp_shm_ep_t *ep);

/* ctl.c */
void tp_shm_ctl_send(tp_shm_ep_t *ep, uint32_t type, uint64_t key,
                     uint64_t size, const void *payload, uint32_t len,
                     const int *fds, int nfds);
void tp_shm_ctl_flush(tp_shm_ep_t *ep);
void tp_shm_ctl_recv(tp_shm_ep_t *ep);
void tp_shm_ctl_drop(tp_shm_ep_t *ep);
void *tp_shm_map_fd(int fd, uint64_t len, size_t *map_len_out,
                    const char **why_out);

/* data.c */
strata_status_t tp_shm_write(tp_ep_t *ep, tp_mr_t *mr, size_t off,
                             const tp_rdesc_t *dst, uint64_t dst_off,
                             size_t len, uint32_t imm, unsigned flags,
                             void *op_ctx);
strata_status_t tp_shm_send(tp_ep_t *ep, const void *buf, size_t len,
                            void *op_ctx);
strata_status_t tp_shm_peer_map(tp_ep_t *ep, const tp_rdesc_t *desc,
                                uint64_t off, size_t len,
                                const void **addr_out);
void tp_shm_drain(tp_shm_ep_t *ep);
void tp_shm_import(tp_shm_ep_t *ep, uint64_t key, uint64_t len, int fd);
void tp_shm_unimport(tp_shm_ep_t *ep, uint64_t key);
void tp_shm_unimport_all(tp_shm_ep_t *ep);

#endif /* STRATA_TRANSPORT_SHM_SHM_H */
