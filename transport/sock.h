/*
 * The base of the socket providers (tcp, shm), which extend it as ucx's
 * transports extend uct_base_iface_t: each embeds the base structs below
 * as the FIRST member of its own and fills a tp_sock_ops_t with its sizes
 * and hooks. The base keeps what does not depend on the wire:
 *
 *   context    one epoll set, a timerfd for deadlines, an optional
 *              doorbell, the event queue (evq.h), the job secret, and the
 *              lists: regions, listeners, endpoints, and the graveyard of
 *              closed endpoints whose events are still queued. tp_close()
 *              closes listeners, then endpoints, then the graveyard, then
 *              regions.
 *   regions    key allocation (unique per context, never 0), and per
 *              endpoint the map of regions granted to its peer.
 *   listeners  accept(), with the pause when descriptors run out (accept.h).
 *   endpoints  connect, the states below, the handshake deadline
 *              (STRATA_TIMEOUT_MS), the auth.h exchange, failure (logged
 *              once, reported as CONNECTED or DISCONNECTED, or buried for a
 *              server endpoint the user never saw), close and free.
 *
 * The provider keeps its wire and data path: address formats, sockets and
 * their options, framing, the send and receive paths, and what its
 * endpoints hold beyond the base.
 */
#ifndef STRATA_TRANSPORT_SOCK_H
#define STRATA_TRANSPORT_SOCK_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "transport/accept.h"
#include "transport/auth.h"
#include "transport/evq.h"
#include "transport/provider.h"
#include "util/keymap.h"
#include "util/list.h"

/* What an epoll event's data points to. */
typedef enum tp_sock_kind {
    TP_SOCK_K_LISTENER,
    TP_SOCK_K_EP,
    TP_SOCK_K_TIMER,
    TP_SOCK_K_BELL,
} tp_sock_kind_t;

/* In order: a state below TP_SOCK_UP is the handshake. */
typedef enum tp_sock_state {
    TP_SOCK_CONNECTING, /* client: nonblocking connect() under way */
    TP_SOCK_AUTH,       /* auth.h exchange under way */
    TP_SOCK_SETUP,      /* authenticated; the provider's own setup */
    TP_SOCK_UP,         /* writes and messages flow */
    TP_SOCK_DOWN,       /* failed or closed; socket closed */
} tp_sock_state_t;

typedef struct tp_sock_ctx tp_sock_ctx_t;

typedef struct tp_sock_mr {
    tp_mr_t base;
    uint64_t key;
    util_list_t link; /* ctx->mrs */
} tp_sock_mr_t;

typedef struct tp_sock_listener {
    tp_listener_t base;
    tp_sock_kind_t kind;
    int fd;
    tp_accept_pause_t pause; /* out of descriptors: not polled for a while */
    util_list_t link;        /* ctx->listeners */
} tp_sock_listener_t;

typedef struct tp_sock_ep {
    tp_ep_t base;
    tp_sock_kind_t kind; /* TP_SOCK_K_EP: epoll data points here */
    tp_sock_ctx_t *ctx;
    int fd;
    tp_sock_state_t state;
    bool server;     /* accepted, not connected */
    bool closed;     /* tp_ep_close() was called; freed when events == 0 */
    uint32_t events; /* queued events naming this endpoint */
    tp_sock_listener_t *listener;
    uint64_t deadline_ns; /* of the handshake, or the provider's */
    tp_auth_t auth;
    int auth_received;      /* auth messages received */
    util_keymap_t grants;   /* region key -> tp_sock_mr_t granted the peer */
    util_list_t link;       /* ctx->eps, or ctx->graveyard once closed */
    util_list_t timed_link; /* ctx->timed: has a deadline */
} tp_sock_ep_t;

/* A provider's sizes and hooks. Hooks marked optional may be NULL. */
typedef struct tp_sock_ops {
    size_t ctx_size, ep_size, mr_size; /* of the provider's structs */
    uint32_t ep_depth;  /* completions an endpoint can have queued */
    uint32_t ep_poll;   /* epoll events of an endpoint's socket */
    uint32_t arrivals;  /* arrival events queued at most */
    uint64_t recv_fifo; /* bytes of received messages until reported */
    bool bell;          /* the context has a doorbell eventfd */
    uint64_t poll_ns;   /* sockets polled at most this often (tp_params_t's
                           poll_us may ask less often) */

    /* A new endpoint's own part, zeroed; STRATA_ERR_NOMEM if it cannot. */
    strata_status_t (*ep_init)(tp_sock_ep_t *ep);
    /* Frees that part (also after a failed ep_init). */
    void (*ep_fini)(tp_sock_ep_t *ep);
    /* epoll reported events on a connected socket (or EPOLLIN: look at a
     * new socket once). */
    void (*ep_ready)(tp_sock_ep_t *ep, uint32_t events);
    /* The endpoint goes down (socket closed, off the timer already):
     * release what it holds but its queued events; pending posts complete
     * with op_status. */
    void (*ep_down)(tp_sock_ep_t *ep, strata_status_t op_status);
    /* Writes the goodbye tp_ep_close() sends an endpoint that is up
     * (TP_SOCK_BYE_MAX bytes at most); 0: none now. */
    size_t (*bye)(tp_sock_ep_t *ep, void *frame);
    /* Optional: an endpoint that is up passed its deadline. */
    void (*ep_expired)(tp_sock_ep_t *ep);
    /* Sends an auth.h message; last: the endpoint fails right after, so
     * it must leave now. */
    strata_status_t (*auth_send)(tp_sock_ep_t *ep, const void *msg, size_t len,
                                 bool last);
    /* The peer proved the secret: tp_sock_ep_up(), or the provider's setup
     * first (state TP_SOCK_SETUP). */
    void (*authed)(tp_sock_ep_t *ep);
    /* A completion the provider pushed (its item's slot) was reported. */
    void (*op_reported)(tp_sock_ep_t *ep, uint32_t slot);
    /* Names the peer of an accepted socket, and sets its options. */
    void (*accepted)(tp_sock_ctx_t *ctx, int fd,
                     const struct sockaddr_storage *ss, char *peer, size_t len);
    /* Optional: mr was granted to the peer of ep (it was not before). */
    void (*mr_granted)(tp_sock_ep_t *ep, tp_sock_mr_t *mr);
    /* mr, granted to the peer of ep, is deregistered. */
    void (*mr_revoke)(tp_sock_ep_t *ep, tp_sock_mr_t *mr);
    /* Frees what the provider's region holds, before the region goes. */
    void (*mr_release)(tp_sock_mr_t *mr);
} tp_sock_ops_t;

#define TP_SOCK_BYE_MAX 64

struct tp_sock_ctx {
    tp_ctx_t base;
    const tp_sock_ops_t *sops;
    int epfd;
    int tfd;                        /* deadlines, and listeners' pauses */
    int bell;                       /* peers write it to wake us; -1: none */
    uint64_t poll_ns, next_poll_ns; /* tp_sock_poll(): the interval, and
                                       when it polls the sockets again */
    tp_sock_kind_t timer_kind, bell_kind;
    tp_auth_secret_t secret;
    tp_evq_t evq;
    uint64_t next_key;
    util_list_t mrs, listeners;
    util_list_t eps;       /* open endpoints */
    util_list_t graveyard; /* closed, waiting for their events to be reported */
    util_list_t timed;     /* endpoints with a deadline */
};

static inline tp_sock_ctx_t *tp_sock_ctx(tp_ctx_t *ctx)
{
    return util_container_of(ctx, tp_sock_ctx_t, base);
}

static inline tp_sock_ep_t *tp_sock_ep(tp_ep_t *ep)
{
    return util_container_of(ep, tp_sock_ep_t, base);
}

static inline tp_sock_listener_t *tp_sock_listener(tp_listener_t *l)
{
    return util_container_of(l, tp_sock_listener_t, base);
}

static inline tp_sock_mr_t *tp_sock_mr(tp_mr_t *mr)
{
    return util_container_of(mr, tp_sock_mr_t, base);
}

static inline const char *tp_sock_name(const tp_sock_ctx_t *ctx)
{
    return ctx->base.ops->name;
}

/* ---- context (tp_ops_t entries where the signature matches) ---- */

/* A context of sops->ctx_size bytes with the base filled in. */
strata_status_t tp_sock_open(const tp_ops_t *ops, const tp_sock_ops_t *sops,
                             unsigned caps, const tp_params_t *params,
                             tp_sock_ctx_t **ctx_out);
void tp_sock_close(tp_ctx_t *ctx);
int tp_sock_wait_fd(const tp_ctx_t *ctx);

/* Progress: tp_sock_begin() (frees the closed endpoints the previous batch
 * named last), tp_sock_poll() (accepts, deadlines, ep_ready: epoll_wait
 * once per poll_ns, and at once after tp_sock_wait_arm()), the provider's
 * own work, then tp_sock_report(). */
void tp_sock_begin(tp_sock_ctx_t *ctx);
strata_status_t tp_sock_poll(tp_sock_ctx_t *ctx);
int tp_sock_report(tp_sock_ctx_t *ctx, tp_event_t *events, int max);
/* STRATA_ERR_AGAIN while events are queued or endpoints wait to be freed
 * (else the next tp_sock_poll() polls); the provider adds its own
 * conditions. */
strata_status_t tp_sock_wait_arm(tp_sock_ctx_t *ctx);

/* ---- regions ---- */

/* A region of sops->mr_size bytes with a fresh key, on ctx->mrs. */
tp_sock_mr_t *tp_sock_mr_new(tp_sock_ctx_t *ctx, void *addr, size_t len,
                             unsigned access);
strata_status_t tp_sock_mr_reg(tp_ctx_t *ctx, void *addr, size_t len,
                               unsigned access, tp_mr_t **mr_out);
/* Revokes the region from every peer it was granted to, then frees it. */
void tp_sock_mr_dereg(tp_mr_t *mr);
strata_status_t tp_sock_mr_export(tp_mr_t *mr, tp_ep_t *ep,
                                  tp_rdesc_t *desc_out);

/* ---- listeners ---- */

/* A listener on a new socket of type bound to sa, whose address is addr
 * until the caller sets a better one. */
strata_status_t tp_sock_listen(tp_sock_ctx_t *ctx, int type,
                               const struct sockaddr *sa, socklen_t sl,
                               const char *addr, tp_listener_t **listener_out);
/* Endpoints it accepted that are still in the handshake go with it. */
void tp_sock_listener_close(tp_listener_t *listener);

/* ---- endpoints ---- */

/* Connects fd (nonblocking; closed on failure) to sa: an endpoint whose
 * outcome TP_EV_CONNECTED reports. */
strata_status_t tp_sock_connect(tp_sock_ctx_t *ctx, int fd,
                                const struct sockaddr *sa, socklen_t sl,
                                const char *peer, tp_ep_t **ep_out);
void tp_sock_ep_close(tp_ep_t *ep);
void tp_sock_ep_free(tp_sock_ep_t *ep);

/* An event naming ep, in room its creation reserved. */
tp_evq_item_t *tp_sock_ep_event(tp_sock_ep_t *ep, tp_event_type_t type,
                                strata_status_t status);
/* An arrival naming ep (tp_evq_push_arrival()); NULL: no room yet. */
tp_evq_item_t *tp_sock_ep_arrival(tp_sock_ep_t *ep, bool taken,
                                  tp_event_type_t type, const void *data,
                                  uint32_t len);

/* Fails ep once: why (formatted) is logged and kept for tp_ep_error(). */
void tp_sock_ep_fail(tp_sock_ep_t *ep, strata_status_t status, const char *fmt,
                     ...) __attribute__((format(printf, 3, 4)));
/* Down without a word, for a provider that logged and reports it itself:
 * socket closed, off the timer, the provider's ep_down. */
void tp_sock_ep_down(tp_sock_ep_t *ep, strata_status_t op_status);
/* The peer closed the socket before the handshake ended. */
void tp_sock_ep_auth_closed(tp_sock_ep_t *ep);
/* Takes the socket out of the epoll set and closes it. */
void tp_sock_ep_unpoll(tp_sock_ep_t *ep);

/* A nonblocking connect() finished (epoll said so, or connect() did). */
void tp_sock_connected(tp_sock_ep_t *ep);
/* An auth.h message arrived from the peer. */
void tp_sock_auth_recv(tp_sock_ep_t *ep, const void *msg, uint32_t len);
/* The endpoint is up: CONNECTED or ACCEPTED. */
void tp_sock_ep_up(tp_sock_ep_t *ep);

/* Sets (0: clears) the endpoint's deadline and rearms the timer. */
void tp_sock_deadline(tp_sock_ep_t *ep, uint64_t deadline_ns);
void tp_sock_timer_update(tp_sock_ctx_t *ctx);

/* Whether ep takes posts; gone: the provider knows the peer left. */
strata_status_t tp_sock_unpostable(const tp_sock_ep_t *ep, const char *what,
                                   bool gone);
static inline strata_status_t tp_sock_postable(const tp_sock_ep_t *ep,
                                               const char *what, bool gone)
{
    if (ep->state == TP_SOCK_UP && !gone)
        return STRATA_OK;
    return tp_sock_unpostable(ep, what, gone);
}

/* ---- inside the base (sock.c, sock_ep.c) ---- */

/* A new endpoint on a connected or connecting socket, in the handshake;
 * NULL (logged) if it cannot be made. */
tp_sock_ep_t *tp_sock_ep_new(tp_sock_ctx_t *ctx, int fd, bool server,
                             const char *peer);
/* An endpoint the user never saw goes: down, and freed once no queued
 * event names it. */
void tp_sock_ep_drop(tp_sock_ep_t *ep);

#endif /* STRATA_TRANSPORT_SOCK_H */
