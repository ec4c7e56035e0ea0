/*
 * One-sided transport: the sender writes straight into memory the receiver
 * registered, and the receiver learns of it through a 32-bit immediate.
 * Providers (verbs, tcp, shm) sit behind one ops table chosen at run time.
 * Internal API of the transport module, used by the engine.
 *
 * Model
 *   A context (tp_ctx_t) is one opened provider. It owns memory regions
 *   (tp_mr_t), listeners and endpoints (tp_ep_t, one connection to one peer).
 *   Everything is non-blocking: posts return at once, and tp_progress()
 *   reports what happened as events. Every post produces exactly one
 *   completion event, carrying a status. A context is driven by one thread at
 *   a time (posts and progress alike); providers take no locks per message.
 *
 * Ordering
 *   On one endpoint, arrivals (TP_EV_WRITE_IMM, TP_EV_RECV) are reported in
 *   the order the peer posted them, and when one is reported, every write the
 *   peer posted before it on that endpoint has landed in memory.
 *
 * Failure
 *   When a peer dies, the connection breaks or a queue pair errors, every
 *   pending post on that endpoint completes with an error status and one
 *   TP_EV_DISCONNECTED event is reported for the endpoint, within
 *   STRATA_TIMEOUT_MS. Nothing hangs.
 *
 * Security
 *   Before an endpoint is reported connected, both sides prove they know the
 *   job secret (STRATA_JOB_SECRET or STRATA_JOB_SECRET_FILE) through an
 *   HMAC-SHA256 challenge-response; the secret never crosses the wire. A peer
 *   that fails is disconnected and logged. A region is reachable by a peer
 *   only after tp_mr_export() for that peer's endpoint, and grants only the
 *   access it was registered with.
 */
#ifndef STRATA_TRANSPORT_H
#define STRATA_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <strata/strata.h>

#include "util/settings.h"

/* Largest control message tp_send() accepts. */
#define TP_MSG_MAX 4096

typedef struct tp_ctx tp_ctx_t;
typedef struct tp_listener tp_listener_t;
typedef struct tp_ep tp_ep_t;
typedef struct tp_mr tp_mr_t;

/* What a peer needs to target a region; the engine sends it in a control
 * message. The meaning of addr and key is the provider's (verbs: virtual
 * address and rkey; tcp and shm: region id). Offsets are from the start of
 * the region; len bounds them. */
typedef struct tp_rdesc {
    uint64_t addr;
    uint64_t len;
    uint64_t key;
} tp_rdesc_t;

/* Access a region grants. Local access (source of writes, target of the
 * provider's own copies) is always granted. */
enum {
    TP_ACCESS_LOCAL = 0,
    TP_ACCESS_REMOTE_WRITE = 1u << 0,
};

/* Capabilities of an opened provider. */
enum {
    /* tp_mr_reg() can grant remote access to memory the caller allocated.
     * Without it (shm), regions peers write into come from tp_mem_alloc(). */
    TP_CAP_REMOTE_ANY_MEMORY = 1u << 0,
    /* Writes move data without a CPU copy on either side (verbs). */
    TP_CAP_ZERO_COPY = 1u << 1,
    /* tp_peer_map() gives the address of a peer's exported region in this
     * process (shm): a receiver can read what the peer holds in place,
     * where a write would copy it. */
    TP_CAP_PEER_MAP = 1u << 2,
};

/* tp_write() flags. */
enum {
    /* Deliver imm to the peer as a TP_EV_WRITE_IMM once the data landed. */
    TP_WRITE_IMM = 1u << 0,
};

typedef enum tp_event_type {
    TP_EV_CONNECTED,    /* tp_connect() finished; status says how */
    TP_EV_ACCEPTED,     /* a listener accepted and authenticated ep */
    TP_EV_WRITE_DONE,   /* a tp_write() completed locally: op_ctx */
    TP_EV_SEND_DONE,    /* a tp_send() completed locally: op_ctx */
    TP_EV_WRITE_IMM,    /* a peer's write with immediate landed: imm, len */
    TP_EV_RECV,         /* a control message arrived: data, len */
    TP_EV_DISCONNECTED, /* ep failed (status: why) or the peer closed it
                           with tp_ep_close() (STRATA_OK) */
} tp_event_type_t;

typedef struct tp_event {
    tp_event_type_t type;
    strata_status_t status;
    tp_ep_t *ep;
    tp_listener_t *listener; /* TP_EV_ACCEPTED; NULL once it was closed */
    void *op_ctx;            /* WRITE_DONE, SEND_DONE: given at the post */
    uint32_t imm;            /* WRITE_IMM */
    uint32_t len;            /* WRITE_IMM: bytes written; RECV: bytes */
    const void *data;        /* RECV: valid until the next tp_progress() */
} tp_event_t;

/* ---- settings ---- */

/* The transports' settings, the rows of transport/settings.def. */
typedef enum tp_setting {
#define UTIL_SETTING(name, ...) TP_SET_##name,
#include "transport/settings.def"
#undef UTIL_SETTING
    TP_SET__COUNT
} tp_setting_t;

extern const util_setting_t tp_settings[TP_SET__COUNT];

/* STRATA_IB_GID_INDEX: auto, N, or device:N pairs. */
extern const util_setting_syntax_t tp_setting_syntax_gid_index;

/* What a provider is opened with. Strings are read during tp_open() only. */
typedef struct tp_params {
    int timeout_ms;          /* bound on every handshake and wait, > 0 */
    const char *transport;   /* STRATA_TRANSPORT: verbs, tcp, shm; NULL: auto */
    const char *secret;      /* STRATA_JOB_SECRET ("": none) */
    const char *secret_file; /* STRATA_JOB_SECRET_FILE ("": none) */
    bool tcp_crc;            /* STRATA_TCP_CRC */
    const char *ifname;      /* STRATA_IFNAME ("": choose) */
    /* host:port whose route picks the interface tcp listeners advertise
     * when ifname is empty (the engine's coordinator); "" or NULL: none. */
    const char *route_to;
    const char *ib_device;    /* STRATA_IB_DEVICE ("": first active port) */
    const char *ib_gid_index; /* STRATA_IB_GID_INDEX */
    unsigned ib_qps;          /* STRATA_IB_QPS */
    uint32_t ib_tx_depth;     /* STRATA_IB_TX_DEPTH */
    uint32_t ib_rx_depth;     /* STRATA_IB_RX_DEPTH */
    uint32_t ib_inline;       /* STRATA_IB_INLINE */
    /* Sockets (tcp, shm) polled at most this often while tp_progress() is
     * called in a loop, and at once after tp_wait_arm(); 0: on every call.
     * For a context of few messages (the engine's coordinator context),
     * so that a caller polling it makes no system call on most calls. */
    uint32_t poll_us;
} tp_params_t;

/* The parameters from settings that hold the rows of tp_settings, alone or
 * among other modules' rows, and the bound on waits (the engine's
 * STRATA_TIMEOUT_MS). Strings point into s. */
strata_status_t tp_params_read(const util_settings_t *s, int timeout_ms,
                               tp_params_t *params_out);

/* Whether host (a numeric address or a name) is an address of an interface
 * of this host, where a listener can bind it. */
bool tp_addr_is_local(const char *host);

/* Whether host (a numeric address or a name) is a loopback address, and
 * every address it resolves to is: no other host reaches it. */
bool tp_addr_is_loopback(const char *host);

/* ---- providers ---- */

/* name: "verbs", "tcp" or "shm". A provider not compiled in, or without a
 * usable device, is STRATA_ERR_UNSUPPORTED or STRATA_ERR_NO_DEVICE, logged
 * with the reason. */
strata_status_t tp_open(const char *name, const tp_params_t *params,
                        tp_ctx_t **ctx_out);
/* Closes the endpoints, listeners and regions still open, then the context. */
void tp_close(tp_ctx_t *ctx);

const char *tp_name(const tp_ctx_t *ctx);
unsigned tp_caps(const tp_ctx_t *ctx);

/* Whether the named provider is compiled in and has a usable device. Quiet:
 * for STRATA_TRANSPORT=auto. */
bool tp_available(const char *name);

/* The provider STRATA_TRANSPORT selects for a peer: the setting itself, or
 * for auto (or params NULL): shm for a peer on this host, verbs with an
 * active RDMA port, tcp otherwise. */
const char *tp_select(const tp_params_t *params, bool peer_on_this_host);

/* ---- memory ---- */

/* Register [addr, addr+len) with the provider. Remote access to arbitrary
 * memory needs TP_CAP_REMOTE_ANY_MEMORY. */
strata_status_t tp_mr_reg(tp_ctx_t *ctx, void *addr, size_t len,
                          unsigned access, tp_mr_t **mr_out);
/* Allocate len bytes peers can be granted access to, registered. */
strata_status_t tp_mem_alloc(tp_ctx_t *ctx, size_t len, unsigned access,
                             void **addr_out, tp_mr_t **mr_out);
/* Deregisters; memory from tp_mem_alloc() is freed as well. */
void tp_mr_dereg(tp_mr_t *mr);
void *tp_mr_addr(const tp_mr_t *mr);
size_t tp_mr_len(const tp_mr_t *mr);

/* Let the peer of ep target mr, and describe it for that peer. */
strata_status_t tp_mr_export(tp_mr_t *mr, tp_ep_t *ep, tp_rdesc_t *desc_out);

/* With TP_CAP_PEER_MAP: *addr_out is where bytes [off, off + len) of the
 * region the peer of ep exported to it (desc, as the peer described it)
 * are mapped here, for reading what the peer put there without a copy. The
 * address stays valid until the peer exports the region again or revokes
 * it, or ep is closed; a peer that dies leaves its last contents readable
 * until then. Nothing orders these reads with the peer's stores: the caller
 * reads only what the peer announced on ep (a message or immediate it sent
 * after the stores), and tells it when it may store there again. A region
 * not exported to ep, or a range outside it, is STRATA_ERR_RANGE; a
 * provider without the capability, STRATA_ERR_UNSUPPORTED. */
strata_status_t tp_peer_map(tp_ep_t *ep, const tp_rdesc_t *desc, uint64_t off,
                            size_t len, const void **addr_out);

/* ---- connections ---- */

/* bind: "host:port" (port 0: any free port), or NULL for the provider's
 * default. tp_listener_addr() gives the address peers pass to tp_connect(). */
strata_status_t tp_listen(tp_ctx_t *ctx, const char *bind,
                          tp_listener_t **listener_out);
const char *tp_listener_addr(const tp_listener_t *listener);
void tp_listener_close(tp_listener_t *listener);

/* Starts connecting; TP_EV_CONNECTED reports the outcome. ep_ctx is the
 * caller's, returned by tp_ep_ctx(). */
strata_status_t tp_connect(tp_ctx_t *ctx, const char *addr, void *ep_ctx,
                           tp_ep_t **ep_out);
void tp_ep_set_ctx(tp_ep_t *ep, void *ep_ctx);
void *tp_ep_ctx(const tp_ep_t *ep);
/* "host:port" (or the provider's equivalent) of the peer, for messages. */
const char *tp_ep_peer(const tp_ep_t *ep);
/* Why the endpoint failed ("connect failed: Connection refused"), or "" while
 * it has not. A failed connect is logged by the provider at debug only: the
 * caller, which knows whether it will try again, reports it (with this). */
const char *tp_ep_error(const tp_ep_t *ep);
/* Closes at once; pending posts complete with STRATA_ERR_CANCELED events
 * (completions already queued are reported too), and no event names ep
 * after them. Events that name ep, in the batch in hand or in one a later
 * tp_progress() returns, stay safe to read until the call after that:
 * tp_ep_ctx() of a closed endpoint is NULL. */
void tp_ep_close(tp_ep_t *ep);

/* ---- data ---- */

/* Write len bytes from mr+off to the peer's region dst at dst_off. With
 * TP_WRITE_IMM the peer gets imm. STRATA_ERR_AGAIN: the queue is full,
 * progress and retry. A range outside mr or dst, or len above UINT32_MAX
 * (the event's length field), is STRATA_ERR_RANGE. mr must not change until
 * TP_EV_WRITE_DONE. */
strata_status_t tp_write(tp_ep_t *ep, tp_mr_t *mr, size_t off,
                         const tp_rdesc_t *dst, uint64_t dst_off, size_t len,
                         uint32_t imm, unsigned flags, void *op_ctx);

/* Send a control message of at most TP_MSG_MAX bytes; buf is copied before
 * the call returns. STRATA_ERR_AGAIN as for tp_write(). */
strata_status_t tp_send(tp_ep_t *ep, const void *buf, size_t len, void *op_ctx);

/* ---- progress ---- */

/* Make progress and report up to max events; never blocks. */
strata_status_t tp_progress(tp_ctx_t *ctx, tp_event_t *events, int max,
                            int *n_out);
/* A file descriptor that becomes readable when tp_progress() may have
 * something to report, for poll()/epoll alongside other contexts, once
 * tp_wait_arm() returned STRATA_OK. */
int tp_wait_fd(const tp_ctx_t *ctx);
/* Call before sleeping on tp_wait_fd(). STRATA_OK: nothing is pending and the
 * fd will become readable when something happens; STRATA_ERR_AGAIN: call
 * tp_progress() first (events are queued or posts wait to be sent). A caller
 * that only busy-polls never needs it; it lets providers skip a doorbell
 * system call per message while nobody sleeps (as ucp_worker_arm and
 * fi_trywait). Quiet. */
strata_status_t tp_wait_arm(tp_ctx_t *ctx);

#endif /* STRATA_TRANSPORT_H */
