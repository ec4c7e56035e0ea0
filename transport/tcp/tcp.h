/*
 * The tcp provider's private structures, shared by its files:
 *   tcp.c   context, regions, progress loop, on the base of sock.h
 *   conn.c  listen, connect, and an endpoint's own part of its lifecycle
 *   addr.c  "host:port" parsing and socket options
 *   tx.c    the send queue: posting and flushing with sendmsg
 *   rx.c    the receive state machine: payloads land straight in regions
 *
 * One epoll set (edge-triggered for endpoints) drives everything; readiness
 * is remembered on the endpoint and work is kept on lists, so a progress
 * call touches only endpoints that have something to do.
 */
#ifndef STRATA_TRANSPORT_TCP_TCP_H
#define STRATA_TRANSPORT_TCP_TCP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "transport/sock.h"
#include "transport/tcp/wire.h"
#include "util/bfifo.h"

#define TP_TCP_SQ_DEPTH 256         /* posts in flight per endpoint */
#define TP_TCP_MSG_FIFO (64 * 1024) /* queued tp_send() payloads */
#define TP_TCP_RX_STAGE (32 * 1024) /* header staging per endpoint */
#define TP_TCP_IOV_MAX 64           /* iovecs per sendmsg */
#define TP_TCP_ARRIVALS 4096        /* arrival events queued at most */
#define TP_TCP_RX_BUDGET (4u << 20) /* bytes read per endpoint per call */

_Static_assert(TP_TCP_RX_STAGE >= TP_TCP_HDR_LEN + TP_MSG_MAX,
               "a control message must fit the staging buffer");

typedef struct tp_tcp_mr {
    tp_sock_mr_t sock;
    bool owned; /* from tp_mem_alloc(): freed at dereg */
} tp_tcp_mr_t;

/* One queued frame: the encoded header and where its payload is. */
typedef struct tp_tcp_op {
    uint8_t hdr[TP_TCP_HDR_LEN];
    const uint8_t *payload;
    uint32_t len;
    bool user;        /* a tp_write/tp_send: completes with an event */
    bool released;    /* its event was reported (or it had none) */
    uint64_t msg_end; /* message FIFO position to release with it, or 0 */
    void *op_ctx;
} tp_tcp_op_t;

typedef struct tp_tcp_rx {
    uint8_t *stage; /* TP_TCP_RX_STAGE bytes; [beg, end) not parsed yet */
    uint32_t beg, end;
    bool ready;      /* the socket may have bytes (edge seen, not drained) */
    bool hup;        /* the peer closed: read on to the end, which no
                      * further edge announces */
    bool in_payload; /* hdr is a WRITE whose payload is landing */
    bool imm_taken;  /* an arrival event is reserved for hdr */
    tp_tcp_hdr_t hdr;
    uint8_t *dst; /* where the next payload byte lands */
    uint64_t left;
    uint32_t crc;
    uint64_t budget; /* bytes this progress call may still read */
} tp_tcp_rx_t;

typedef struct tp_tcp_ep {
    tp_sock_ep_t sock;
    tp_tcp_op_t *sq;
    uint32_t sq_head; /* next op to post */
    uint32_t sq_send; /* next op to (finish to) send */
    uint32_t sq_tail; /* oldest op not released */
    uint64_t sq_off;  /* bytes of op sq_send already sent */
    bool tx_blocked;  /* the socket buffer is full: wait for EPOLLOUT */
    util_bfifo_t msgs;

    tp_tcp_rx_t rx;

    util_list_t tx_link; /* ctx->tx_ready */
    util_list_t rx_link; /* ctx->rx_ready */
} tp_tcp_ep_t;

typedef struct tp_tcp_ctx {
    tp_sock_ctx_t sock;
    bool crc;
    char ifname[256];     /* STRATA_IFNAME */
    char route_to[256];   /* tp_params_t.route_to */
    util_list_t tx_ready; /* queued frames and a socket that takes them */
    util_list_t rx_ready; /* bytes in the socket or the staging buffer */
} tp_tcp_ctx_t;

static inline tp_tcp_ctx_t *tp_tcp_ctx(tp_ctx_t *ctx)
{
    return util_container_of(tp_sock_ctx(ctx), tp_tcp_ctx_t, sock);
}

static inline tp_tcp_ep_t *tp_tcp_ep_of(tp_sock_ep_t *ep)
{
    return util_container_of(ep, tp_tcp_ep_t, sock);
}

static inline tp_tcp_ep_t *tp_tcp_ep(tp_ep_t *ep)
{
    return tp_tcp_ep_of(tp_sock_ep(ep));
}

static inline tp_tcp_ctx_t *tp_tcp_ep_ctx(const tp_tcp_ep_t *ep)
{
    return util_container_of(ep->sock.ctx, tp_tcp_ctx_t, sock);
}

/* conn.c: the hooks of sock.h that make and end connections */
strata_status_t tp_tcp_listen(tp_ctx_t *ctx, const char *bind,
                              tp_listener_t **listener_out);
strata_status_t tp_tcp_connect(tp_ctx_t *ctx, const char *addr,
                               tp_ep_t **ep_out);
void tp_tcp_accepted(tp_sock_ctx_t *ctx, int fd,
                     const struct sockaddr_storage *ss, char *peer, size_t len);
strata_status_t tp_tcp_ep_init(tp_sock_ep_t *ep);
void tp_tcp_ep_fini(tp_sock_ep_t *ep);
void tp_tcp_ep_down(tp_sock_ep_t *ep, strata_status_t op_status);
size_t tp_tcp_bye(tp_sock_ep_t *ep, void *frame);
strata_status_t tp_tcp_auth_send(tp_sock_ep_t *ep, const void *msg, size_t len,
                                 bool last);

/* addr.c */
strata_status_t tp_tcp_resolve(const char *addr, bool passive,
                               struct sockaddr_storage *ss_out,
                               socklen_t *len_out);
void tp_tcp_format(const struct sockaddr *sa, char *buf, size_t len);
/* The address peers reach a listener on fd at: its own, or for a wildcard
 * listener the interface STRATA_IFNAME or the route to the coordinator
 * picks (STRATA_ERR_CONFIG, logged, when STRATA_IFNAME matches none). */
strata_status_t tp_tcp_listen_addr(const tp_tcp_ctx_t *ctx, int fd, char *buf,
                                   size_t len);
void tp_tcp_sockopts(int fd, int timeout_ms, const char *peer);

/* tx.c */
strata_status_t tp_tcp_write(tp_ep_t *ep, tp_mr_t *mr, size_t off,
                             const tp_rdesc_t *dst, uint64_t dst_off,
                             size_t len, uint32_t imm, unsigned flags,
                             void *op_ctx);
strata_status_t tp_tcp_send(tp_ep_t *ep, const void *buf, size_t len,
                            void *op_ctx);
strata_status_t tp_tcp_queue_frame(tp_tcp_ep_t *ep, uint8_t type, uint64_t key,
                                   const void *payload, uint32_t len);
void tp_tcp_flush(tp_tcp_ep_t *ep);
void tp_tcp_cancel_ops(tp_tcp_ep_t *ep, strata_status_t status);
void tp_tcp_op_reported(tp_sock_ep_t *ep, uint32_t slot);

/* rx.c */
void tp_tcp_rx(tp_tcp_ep_t *ep);

#endif /* STRATA_TRANSPORT_TCP_TCP_H */
