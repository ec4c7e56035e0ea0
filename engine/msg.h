/*
 * Peers and control messages. A peer is one connection of the engine (to
 * the coordinator, to a rank, to an aggregator, to a worker); the role that
 * creates it gives it a table of handlers, through which the progress
 * thread hands it the transport's events, so the loop knows no role. This
 * module sends control messages in order through a backlog when a send
 * queue is full, and names peers for log messages. It knows no role either.
 */
#ifndef STRATA_ENGINE_MSG_H
#define STRATA_ENGINE_MSG_H

#include <stdbool.h>
#include <stdint.h>

#include <strata/strata.h>

#include "engine/wire.h"
#include "transport/transport.h"

typedef struct eng_peer eng_peer_t;
typedef struct eng_msg eng_msg_t;

/* What the transport reports about a peer's endpoint, for the role that
 * owns it; on the progress thread. A NULL handler: the event is not
 * expected from such a peer, and the job fails naming it. */
typedef struct eng_peer_ops {
    /* What the peer is, for messages: "aggregator" names an identified one
     * "aggregator rank 3 (host:port)"; with `singular`, "the coordinator"
     * is "the coordinator (rank 0 at host:port)". */
    const char *what;
    bool singular;
    void (*on_connected)(strata_ctx_t *ctx, eng_peer_t *peer,
                         strata_status_t status);
    void (*on_message)(strata_ctx_t *ctx, eng_peer_t *peer, unsigned type,
                       eng_rbuf_t *r);
    void (*on_imm)(strata_ctx_t *ctx, eng_peer_t *peer, uint32_t imm,
                   uint32_t len);
    void (*on_write_done)(strata_ctx_t *ctx, eng_peer_t *peer, void *op_ctx,
                          strata_status_t status);
    void (*on_disconnected)(strata_ctx_t *ctx, eng_peer_t *peer,
                            strata_status_t status);
} eng_peer_ops_t;

/* Messages a full send queue refused, oldest first, for every peer of a
 * context: each peer's messages keep their order. */
typedef struct eng_msgq {
    eng_msg_t *head, *tail;
} eng_msgq_t;

#define ENG_PEER_NAME_MAX 192

struct eng_peer {
    const eng_peer_ops_t *ops;
    eng_msgq_t *q; /* where its refused messages wait */
    int rank;      /* -1 until known */
    tp_ep_t *ep;   /* NULL once closed */
    tp_ctx_t *tp;
    bool up;     /* connected (and, for accepted ones, identified) */
    bool left;   /* said goodbye: a disconnect is no failure */
    void *owner; /* the role's per-peer state */
    /* eng_peer_name's cache, and what it was made from */
    char name[ENG_PEER_NAME_MAX];
    char addr[128];
    int named_rank;
    uintptr_t named_ep;
};

/* Describes a peer for messages: "worker rank 5 (host:port)", "an
 * unidentified peer (host:port)". Stays valid, and keeps the address, after
 * the endpoint is closed. */
const char *eng_peer_name(eng_peer_t *peer);

/* Send a control message built in w. A full send queue keeps it in the
 * peer's backlog, sent before anything later (control messages are rare).
 * Failures are the caller's to report. */
strata_status_t eng_send(eng_peer_t *peer, const eng_wbuf_t *w, void *op_ctx);
/* Send a message of a partition and a clock (zero copy's CONSUMED and
 * RELEASE). A link that broke fails the job (or drops the worker) through
 * its disconnect, so a failure here is only logged. */
void eng_send_part_clock(eng_peer_t *peer, unsigned type, uint32_t part,
                         int64_t clock);

/* Closes the peer's endpoint, if open, and forgets the messages waiting
 * for it: the peer may be freed next. */
void eng_peer_close(eng_peer_t *peer);

/* Send what the backlog holds, in order, until a queue is full again;
 * whether anything left it. */
bool eng_msgq_flush(eng_msgq_t *q);
/* Forget every message (the transports are being closed). */
void eng_msgq_clear(eng_msgq_t *q);

#endif /* STRATA_ENGINE_MSG_H */
