/* Control messages to peers, their backlog, and peers' names. */
#include "engine/msg.h"

#include <stdio.h>
#include <string.h>

#include "util/alloc.h"
#include "util/log.h"

struct eng_msg {
    struct eng_msg *next;
    eng_peer_t *peer;
    void *op_ctx;
    size_t len;
    unsigned char data[];
};

const char *eng_peer_name(eng_peer_t *peer)
{
    if (peer->ep && (uintptr_t)peer->ep != peer->named_ep) {
        snprintf(peer->addr, sizeof(peer->addr), "%s", tp_ep_peer(peer->ep));
        peer->named_ep = (uintptr_t)peer->ep;
        peer->name[0] = '\0';
    }
    if (peer->name[0] && peer->named_rank == peer->rank)
        return peer->name;
    const char *where = peer->addr[0] ? peer->addr : "?";
    if (peer->ops->singular)
        snprintf(peer->name, sizeof(peer->name), "%s (rank %d at %s)",
                 peer->ops->what, peer->rank, where);
    else if (peer->rank >= 0)
        snprintf(peer->name, sizeof(peer->name), "%s rank %d (%s)",
                 peer->ops->what, peer->rank, where);
    else
        snprintf(peer->name, sizeof(peer->name), "an unidentified peer (%s)",
                 where);
    peer->named_rank = peer->rank;
    return peer->name;
}

/* A message a full send queue refused waits in the backlog, and every
 * later one queues behind it so that each peer's messages keep their
 * order. Control traffic only: the data path never comes here. */
strata_status_t eng_send(eng_peer_t *peer, const eng_wbuf_t *w, void *op_ctx)
{
    eng_msgq_t *q = peer->q;
    size_t len = eng_wbuf_len(w);
    if (len == 0) {
        util_error("a control message overflowed its buffer (a bug)");
        return STRATA_ERR_PROTO;
    }
    if (!peer->ep)
        return STRATA_ERR_STATE;
    strata_status_t st =
        q->head ? STRATA_ERR_AGAIN : tp_send(peer->ep, w->p, len, op_ctx);
    if (st != STRATA_ERR_AGAIN)
        return st;
    eng_msg_t *m = util_malloc(sizeof(*m) + len);
    if (!m) {
        util_error("out of memory queueing a %zu-byte control message", len);
        return STRATA_ERR_NOMEM;
    }
    *m = (eng_msg_t){.peer = peer, .op_ctx = op_ctx, .len = len};
    memcpy(m->data, w->p, len);
    if (q->tail)
        q->tail->next = m;
    else
        q->head = m;
    q->tail = m;
    return STRATA_OK;
}

void eng_send_part_clock(eng_peer_t *peer, unsigned type, uint32_t part,
                         int64_t clock)
{
    unsigned char buf[16];
    eng_wbuf_t m;
    eng_wbuf_init(&m, buf, sizeof(buf), type);
    eng_put_u32(&m, part);
    eng_put_i64(&m, clock);
    if (eng_send(peer, &m, NULL) != STRATA_OK)
        util_debug("cannot send %s to %s", eng_msg_name(type),
                   eng_peer_name(peer));
}

bool eng_msgq_flush(eng_msgq_t *q)
{
    bool any = false;
    while (q->head) {
        eng_msg_t *m = q->head;
        strata_status_t st = STRATA_OK;
        if (m->peer->ep) {
            st = tp_send(m->peer->ep, m->data, m->len, m->op_ctx);
            if (st == STRATA_ERR_AGAIN)
                return any;
        }
        if (st != STRATA_OK)
            util_debug("dropping a queued message to %s: %s",
                       eng_peer_name(m->peer), strata_strerror(st));
        q->head = m->next;
        if (!q->head)
            q->tail = NULL;
        util_free(m);
        any = true;
    }
    return any;
}

static void eng_msgq_drop(eng_msgq_t *q, const eng_peer_t *peer)
{
    eng_msg_t **pp = &q->head, *last = NULL;
    while (*pp) {
        eng_msg_t *m = *pp;
        if (m->peer == peer) {
            *pp = m->next;
            util_free(m);
        } else {
            last = m;
            pp = &m->next;
        }
    }
    q->tail = last;
}

void eng_msgq_clear(eng_msgq_t *q)
{
    while (q->head) {
        eng_msg_t *m = q->head;
        q->head = m->next;
        util_free(m);
    }
    q->tail = NULL;
}

void eng_peer_close(eng_peer_t *peer)
{
    if (peer->ep) {
        eng_peer_name(peer); /* still named by its address afterwards */
        tp_ep_close(peer->ep);
        peer->ep = NULL;
    }
    if (peer->q)
        eng_msgq_drop(peer->q, peer);
}
