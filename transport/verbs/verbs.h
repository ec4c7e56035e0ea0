/*
 * The verbs provider: RC queue pairs connected with rdma_cm. Private to
 * transport/verbs/. See docs/verbs.md for the design; in short:
 *
 * - One context = one device port, one protection domain, completion queues
 *   shared by all endpoints (a new CQ is added when one is full), one
 *   rdma_cm event channel, and a thread that drains the device's async events
 *   and watches the event channel so that tp_progress() makes no system call
 *   when nothing happened.
 * - An endpoint has STRATA_IB_QPS queue pairs. QP 0 carries everything the
 *   peer is told about (sends, writes with immediate) and receives; the others
 *   carry stripes of large writes only. An operation that the peer sees (an
 *   "arrival") is posted only after every stripe posted before it on the
 *   other QPs has completed, which keeps transport.h's ordering promise.
 * - Receives are pre-posted on QP 0 from the endpoint's block of the
 *   registered arena; the peer may only post as many receive-consuming
 *   operations as we have receives posted (credits, returned by an RDMA write
 *   of a counter into the peer's inbox).
 * - Work requests are signalled once per operation and QP, not per work
 *   request; internal work (credit returns, keepalives) is unsignalled.
 */
#ifndef STRATA_TRANSPORT_VERBS_H
#define STRATA_TRANSPORT_VERBS_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "transport/auth.h"
#include "transport/provider.h"
#include "transport/verbs/verbs_gid.h"
#include "transport/verbs/verbs_rcache.h"
#include "util/alloc.h"
#include "util/list.h"

#define TP_VERBS_SLOT 4096      /* a receive buffer or a staged send */
#define TP_VERBS_STAGE_SLOTS 16 /* staged sends per endpoint */
#define TP_VERBS_SQ_RESERVE 8   /* send queue entries kept for internal work */
#define TP_VERBS_STRIPE_MIN 65536 /* smallest write striped over the QPs */
#define TP_VERBS_STRIPE_ALIGN 4096
#define TP_VERBS_MAX_WR                                                        \
    (1u << 30) /* bytes one work request carries at most                       \
                */
#define TP_VERBS_QPS_MAX 64
#define TP_VERBS_INBOX_LINE 64
#define TP_VERBS_CQ_SIZE 8192
#define TP_VERBS_SMALL                                                         \
    80 /* payload kept in the operation (TP_AUTH_MSG_MAX)                      \
        */

/* Messages the provider sends itself, as SEND_WITH_IMM with this type as
 * immediate; the application's messages are plain SENDs. */
enum tp_verbs_msg_type {
    TP_VERBS_MSG_AUTH = 1,     /* an auth.h message */
    TP_VERBS_MSG_SETUP = 2,    /* inbox and extra QPs, after authentication */
    TP_VERBS_MSG_READY = 3,    /* client: extra QPs are ready */
    TP_VERBS_MSG_WIMM = 4,     /* {imm, len} ending a multi-request write */
    TP_VERBS_MSG_BYE = 5,      /* tp_ep_close(): the close is deliberate */
    TP_VERBS_MSG_EXPORT = 6,   /* {id, rkeys of QPs 1..} of an export */
    TP_VERBS_MSG_UNEXPORT = 7, /* {id}: the export is gone */
};

/* wr_id of a work request: a pointer tagged in its low bit. */
#define TP_VERBS_WR_RECV 1u

typedef struct tp_verbs_ctx tp_verbs_ctx_t;
typedef struct tp_verbs_ep tp_verbs_ep_t;
typedef struct tp_verbs_qp tp_verbs_qp_t;
typedef struct tp_verbs_op tp_verbs_op_t;
typedef struct tp_verbs_listener tp_verbs_listener_t;

/* What an rdma_cm_id's context points at. */
typedef struct tp_verbs_cmref {
    bool is_listener;
    void *obj;
} tp_verbs_cmref_t;

typedef struct tp_verbs_cq {
    struct ibv_cq *cq;
    int size, used; /* entries, and entries promised to queue pairs */
    bool armed;
} tp_verbs_cq_t;

/* One posted send work request. */
typedef struct tp_verbs_swr {
    tp_verbs_qp_t *qp;
    tp_verbs_op_t *op; /* NULL: internal work */
    uint32_t bind_id;  /* a memory-window bind of this export, or 0 */
} tp_verbs_swr_t;

/* A region exported to one endpoint: with type-2 memory windows, one window
 * per queue pair of the endpoint, bound over exactly the region, so that
 * only that peer reaches it and only within its bounds. */
typedef struct tp_verbs_export {
    struct tp_verbs_mr *mr;
    tp_verbs_ep_t *ep;
    struct tp_verbs_export *mr_next, *ep_next;
    uint32_t id;
    unsigned binds_pending; /* on QPs 1.., before the peer may stripe */
    struct ibv_mw **mw;     /* nqps */
    uint32_t *rkey;         /* nqps */
} tp_verbs_export_t;

/* The peer's windows on QPs 1.. for one of its exports (EXPORT message). */
typedef struct tp_verbs_peer_export {
    uint32_t id; /* 0: free */
    uint32_t *rkey;
} tp_verbs_peer_export_t;

/* One receive buffer of QP 0. */
typedef struct tp_verbs_rbuf {
    tp_verbs_ep_t *ep;
    uint32_t index;
} tp_verbs_rbuf_t;

struct tp_verbs_qp {
    struct ibv_qp *qp;
    tp_verbs_ep_t *ep;
    tp_verbs_cq_t *cq;
    unsigned index;
    uint32_t psn;
    tp_verbs_swr_t *swr; /* ring of sq_depth, indexed by counters */
    uint32_t sq_depth, sq_head, sq_tail;
    uint32_t unsignaled; /* internal WRs posted since the last signal */
};

typedef enum tp_verbs_op_kind {
    TP_VERBS_OP_WRITE,
    TP_VERBS_OP_SEND,
    TP_VERBS_OP_MSG, /* internal message, no event */
} tp_verbs_op_kind_t;

/* One tp_write(), tp_send() or internal message, in the endpoint's ring. */
struct tp_verbs_op {
    uint32_t seq;
    uint8_t kind;
    bool data;    /* has plain-write requests (posted in order) */
    bool arrival; /* has one request the peer sees (posted in order on QP 0,
                     after the stripes before it, with a credit) */
    bool data_done, arrival_done, done;
    int8_t stage; /* staging slot of a send, or -1 */
    uint32_t imm; /* writes: the immediate; messages: the type */
    uint32_t len, posted;
    uint32_t stripe;    /* bytes per QP of a striped write, 0: QP 0 only */
    uint32_t export_id; /* of the target, for the rkeys of QPs 1.. */
    uint32_t wrs_out;
    uint32_t lkey, rkey;
    uint64_t laddr, raddr;
    strata_status_t status;
    void *op_ctx;
    uint8_t small[TP_VERBS_SMALL];
};

typedef enum tp_verbs_ep_state {
    TP_VERBS_EP_RESOLVE_ADDR,
    TP_VERBS_EP_RESOLVE_ROUTE,
    TP_VERBS_EP_CONNECTING, /* client: REQ sent */
    TP_VERBS_EP_ACCEPTING,  /* server: REP sent */
    TP_VERBS_EP_HANDSHAKE,  /* authentication and setup messages */
    TP_VERBS_EP_CONNECTED,
    TP_VERBS_EP_FAILED, /* flushing; DISCONNECTED once nothing is pending */
    TP_VERBS_EP_CLOSED, /* tp_ep_close(): draining, then freed */
} tp_verbs_ep_state_t;

/* Handshake progress, beyond tp_auth_t's own state. */
enum {
    TP_VERBS_HS_AUTH,       /* exchanging auth messages */
    TP_VERBS_HS_WAIT_SETUP, /* authenticated, waiting for the peer's SETUP */
    TP_VERBS_HS_WAIT_READY, /* server: SETUP sent, waiting for READY */
    TP_VERBS_HS_REFUSED,    /* server: RESULT(refused) being sent */
};

struct tp_verbs_ep {
    tp_ep_t base; /* first: provider.h */
    tp_verbs_cmref_t cmref;
    tp_verbs_ctx_t *ctx;
    struct rdma_cm_id *id;
    tp_verbs_listener_t *listener; /* server side */
    tp_verbs_ep_t *prev, *next;    /* ctx->eps */
    tp_verbs_ep_t *todo_next;      /* ctx->todo */
    bool in_todo;
    tp_verbs_ep_state_t state;
    bool client;
    bool visible; /* the application holds it (connect, or ACCEPTED) */
    bool connected_once;
    bool disconnected_sent;
    bool bye_pending; /* closing: waiting for BYE to leave */
    bool torn;        /* queue pairs moved to the error state */
    bool zombie;      /* work requests never flushed: kept until close */
    unsigned cq_entries;
    strata_status_t error;
    uint64_t deadline_ns; /* of the handshake, then of the drain */
    uint64_t last_tx_ns;  /* for keepalives */
    uint32_t last_tx_head;
    _Atomic int async_event; /* fatal ibv_event_type + 1, from the thread */
    _Atomic bool comm_est;
    unsigned evq_refs; /* queued events naming this endpoint */

    unsigned nqps;
    tp_verbs_qp_t *qps;
    struct ibv_qp_attr init, rtr, rts; /* QP 0's, reused for the others */
    int init_mask, rtr_mask, rts_mask;

    int hs;
    unsigned hs_rx; /* auth messages received */
    uint32_t hs_result_seq;
    tp_auth_t auth;
    uint32_t peer_rx_depth;

    /* memory: one block of the context's registered arena */
    uint8_t *block;
    tp_verbs_reg_t *block_reg;
    uint8_t *rmem; /* rx_depth receive buffers */
    tp_verbs_rbuf_t *rbufs;
    uint16_t *rfree; /* stack of receive buffers to post */
    uint32_t rx_depth, nrfree, rq_out;
    uint8_t *stage;      /* TP_VERBS_STAGE_SLOTS send buffers */
    uint32_t stage_free; /* bit i: slot i free */

    /* exports: ours to the peer, and the peer's windows for striping */
    tp_verbs_export_t *exports;
    uint32_t next_export_id;
    tp_verbs_peer_export_t *peer_exports; /* open addressing */
    uint32_t npeer_exports, peer_exports_cap;

    /* credits */
    volatile uint32_t *inbox; /* receives the peer posted for us, in total */
    struct ibv_mr *inbox_mr;  /* the inbox line alone, for remote writes */
    struct ibv_mw *inbox_mw;
    uint32_t inbox_rkey;
    uint64_t peer_inbox_addr;
    uint32_t peer_inbox_rkey;
    uint32_t credits_used; /* receive-consuming requests we posted */
    uint32_t rq_posted;    /* receives we posted, in total */
    uint32_t rq_reported;  /* rq_posted as last written to the peer */
    uint32_t *credit_src;  /* registered source of credit writes */

    /* operation ring: tail <= data_cur, arr_cur <= head */
    tp_verbs_op_t *ops;
    uint32_t nops, head, tail, data_cur, arr_cur;
};

struct tp_verbs_listener {
    tp_listener_t base; /* first: provider.h */
    tp_verbs_cmref_t cmref;
    struct rdma_cm_id *id;
    tp_verbs_listener_t *prev, *next;
};

typedef struct tp_verbs_mr {
    tp_mr_t base;     /* first: provider.h */
    util_list_t link; /* ctx->mrs */
    tp_verbs_reg_t *reg;
    bool from_arena;      /* tp_mem_alloc(): free into the arena */
    struct ibv_mr *exact; /* the region alone, once exported */
    tp_verbs_export_t *exports;
} tp_verbs_mr_t;

/* Per-context settings, read once at open. */
typedef struct tp_verbs_params {
    unsigned nqps;
    uint32_t tx_depth, rx_depth, inline_max;
    uint8_t qp_timeout, retry_cnt, rnr_retry, min_rnr_timer;
    int gid_override; /* -1: auto */
} tp_verbs_params_t;

struct tp_verbs_ctx {
    tp_ctx_t base; /* first: provider.h */
    tp_verbs_params_t p;
    struct ibv_context *verbs; /* opened by the provider itself */
    char dev_name[IBV_SYSFS_NAME_MAX];
    uint8_t port;
    bool ethernet;
    uint32_t max_msg; /* bytes one work request carries */
    bool mw_type2;    /* memory windows bound to a QP: see verbs_mem.c */
    tp_verbs_gid_t gid;
    char addr[64]; /* the port's IP address, "" if none */
    struct ibv_pd *pd;
    struct ibv_comp_channel *comp;
    tp_verbs_cq_t **cqs;
    int ncqs, max_cqe;
    bool any_armed;
    struct rdma_event_channel *cm;
    tp_auth_secret_t secret;

    tp_verbs_rcache_t rcache; /* local access: sources and buffers */
    util_list_t mrs;          /* regions, for tp_close */
    util_arena_t *arena;      /* created on first use */

    tp_verbs_ep_t *eps;
    tp_verbs_listener_t *listeners;
    tp_verbs_ep_t *todo;

    /* events not yet reported: a power-of-two ring that grows */
    tp_event_t *evq;
    uint32_t evq_cap, evq_head, evq_tail; /* head, tail: free-running */
    /* receive buffers of RECV events reported by the last progress call */
    tp_verbs_rbuf_t **held;
    uint32_t nheld, held_cap;

    uint64_t next_tick_ns;
    uint32_t calls; /* of tp_progress, to look at the clock every 8th */

    /* the async thread */
    pthread_t thread;
    bool thread_started;
    int thread_epfd, stop_fd, notify_fd, wait_epfd, timer_fd;
    _Atomic unsigned pending; /* TP_VERBS_PENDING_* */
    _Atomic int fatal_event;  /* device or CQ fatal: ibv_event_type + 1 */
};

enum {
    TP_VERBS_PENDING_CM = 1u << 0,
    TP_VERBS_PENDING_ASYNC = 1u << 1,
};

static inline tp_verbs_ctx_t *tp_verbs_ctx(tp_ctx_t *ctx)
{
    return (tp_verbs_ctx_t *)ctx;
}

static inline tp_verbs_ep_t *tp_verbs_ep(tp_ep_t *ep)
{
    return (tp_verbs_ep_t *)ep;
}

static inline tp_verbs_op_t *tp_verbs_op_at(tp_verbs_ep_t *ep, uint32_t seq)
{
    return &ep->ops[seq & (ep->nops - 1)];
}

uint64_t tp_verbs_now_ns(void);

/* verbs_dev.c: the device, async events, waiting */
bool tp_verbs_available(void);
strata_status_t tp_verbs_dev_open(tp_verbs_ctx_t *c, const tp_params_t *params);
void tp_verbs_dev_close(tp_verbs_ctx_t *c);
void tp_verbs_memlock_hint(char *buf, size_t len);
bool tp_verbs_same_device(const tp_verbs_ctx_t *c, struct ibv_context *dev);
strata_status_t tp_verbs_thread_start(tp_verbs_ctx_t *c);
void tp_verbs_cm_rearm(tp_verbs_ctx_t *c);
void tp_verbs_thread_stop(tp_verbs_ctx_t *c);
void tp_verbs_cq_events_drain(tp_verbs_ctx_t *c);
strata_status_t tp_verbs_cq_reserve(tp_verbs_ctx_t *c, int entries,
                                    tp_verbs_cq_t **cq_out);
int tp_verbs_wait_fd(const tp_ctx_t *ctx);
strata_status_t tp_verbs_wait_arm(tp_ctx_t *ctx);

/* verbs_mem.c: registration, the registered arenas, the inboxes */
strata_status_t tp_verbs_mem_init(tp_verbs_ctx_t *c);
void tp_verbs_mem_fini(tp_verbs_ctx_t *c);
strata_status_t tp_verbs_mr_reg(tp_ctx_t *ctx, void *addr, size_t len,
                                unsigned access, tp_mr_t **mr_out);
strata_status_t tp_verbs_mem_alloc(tp_ctx_t *ctx, size_t len, unsigned access,
                                   void **addr_out, tp_mr_t **mr_out);
void tp_verbs_mr_dereg(tp_mr_t *mr);
strata_status_t tp_verbs_mr_export(tp_mr_t *mr, tp_ep_t *ep,
                                   tp_rdesc_t *desc_out);
strata_status_t tp_verbs_block_alloc(tp_verbs_ctx_t *c, size_t len,
                                     void **addr_out, tp_verbs_reg_t **reg_out);
void tp_verbs_block_free(tp_verbs_ctx_t *c, void *addr, tp_verbs_reg_t *reg);
strata_status_t tp_verbs_inbox_open(tp_verbs_ep_t *ep);
void tp_verbs_exports_drop(tp_verbs_ep_t *ep);
void tp_verbs_unexport(tp_verbs_export_t *x, bool tell);
void tp_verbs_export_bound(tp_verbs_ep_t *ep, uint32_t id);
void tp_verbs_peer_export_add(tp_verbs_ep_t *ep, const uint8_t *msg,
                              uint32_t len);
void tp_verbs_peer_export_remove(tp_verbs_ep_t *ep, const uint8_t *msg,
                                 uint32_t len);
const uint32_t *tp_verbs_peer_export_find(const tp_verbs_ep_t *ep, uint32_t id);

/* verbs_cm.c: listeners, connections, queue pairs */
strata_status_t tp_verbs_listen(tp_ctx_t *ctx, const char *bind,
                                tp_listener_t **listener_out);
void tp_verbs_listener_close(tp_listener_t *listener);
strata_status_t tp_verbs_connect(tp_ctx_t *ctx, const char *addr,
                                 tp_ep_t **ep_out);
void tp_verbs_cm_drain(tp_verbs_ctx_t *c);
strata_status_t tp_verbs_qps_extra_up(tp_verbs_ep_t *ep, const uint32_t *qpn,
                                      const uint32_t *psn);
strata_status_t tp_verbs_qps_allow_write(tp_verbs_ep_t *ep);

/* verbs_hs.c: authentication and setup over QP 0 */
void tp_verbs_hs_start(tp_verbs_ep_t *ep);
void tp_verbs_hs_recv(tp_verbs_ep_t *ep, uint32_t type, const uint8_t *msg,
                      uint32_t len);
void tp_verbs_hs_sent(tp_verbs_ep_t *ep, const tp_verbs_op_t *op);

/* verbs_ep.c: endpoint life */
strata_status_t tp_verbs_ep_create(tp_verbs_ctx_t *c, struct rdma_cm_id *id,
                                   bool client, unsigned nqps,
                                   tp_verbs_ep_t **ep_out);
void tp_verbs_ep_fail(tp_verbs_ep_t *ep, strata_status_t status);
void tp_verbs_ep_close(tp_ep_t *ep);
void tp_verbs_ep_connected(tp_verbs_ep_t *ep);
void tp_verbs_ep_tick(tp_verbs_ep_t *ep, uint64_t now);
void tp_verbs_ep_destroy(tp_verbs_ep_t *ep);
void tp_verbs_todo(tp_verbs_ep_t *ep);
void tp_verbs_todo_run(tp_verbs_ctx_t *c);
void tp_verbs_async_drain(tp_verbs_ctx_t *c);

/* verbs_data.c: operations, credits, receives */
strata_status_t tp_verbs_write(tp_ep_t *ep, tp_mr_t *mr, size_t off,
                               const tp_rdesc_t *dst, uint64_t dst_off,
                               size_t len, uint32_t imm, unsigned flags,
                               void *op_ctx);
strata_status_t tp_verbs_send(tp_ep_t *ep, const void *buf, size_t len,
                              void *op_ctx);
strata_status_t tp_verbs_msg(tp_verbs_ep_t *ep, uint32_t type, const void *buf,
                             size_t len);
strata_status_t tp_verbs_post_bind(tp_verbs_qp_t *qp, struct ibv_mw *mw,
                                   struct ibv_mr *mr, uint32_t bind_id,
                                   uint32_t *rkey_out);
void tp_verbs_pump(tp_verbs_ep_t *ep);
void tp_verbs_rq_refill(tp_verbs_ep_t *ep, bool force);
void tp_verbs_credit_return(tp_verbs_ep_t *ep, bool force);
void tp_verbs_op_finish(tp_verbs_ep_t *ep, tp_verbs_op_t *op);
void tp_verbs_ops_fail(tp_verbs_ep_t *ep, strata_status_t status);
bool tp_verbs_ep_drained(const tp_verbs_ep_t *ep);

/* verbs_cq.c: completions and events */
strata_status_t tp_verbs_progress(tp_ctx_t *ctx, tp_event_t *events, int max,
                                  int *n_out);
int tp_verbs_cq_poll(tp_verbs_ctx_t *c);
void tp_verbs_event(tp_verbs_ctx_t *c, const tp_event_t *ev);
const char *tp_verbs_wc_hint(enum ibv_wc_status status);
strata_status_t tp_verbs_wc_status(enum ibv_wc_status status);

#endif /* STRATA_TRANSPORT_VERBS_H */
