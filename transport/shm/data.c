/*
 * shm data path. A write is one memcpy into the peer's mapping of the
 * target region, then (with an immediate) a record in the peer's ring; a
 * message is a record with its bytes. Both complete before the post
 * returns, so nothing is ever pending: the completion waits in the event
 * queue for tp_progress(). Doorbells are rung only for a peer that armed
 * its ring before sleeping.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "transport/shm/shm.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/log.h"

/* ---- the peer's regions, mapped here ---- */

void tp_shm_import(tp_shm_ep_t *ep, uint64_t key, uint64_t len, int fd)
{
    const char *why = NULL;
    tp_shm_import_t *imp = util_calloc(1, sizeof(*imp));
    if (!imp) {
        tp_sock_ep_fail(&ep->sock, STRATA_ERR_NOMEM,
                        "no memory to map a region");
        return;
    }
    imp->len = len;
    imp->base = tp_shm_map_fd(fd, len, &imp->map_len, &why);
    if (!imp->base || key == 0) {
        util_free(imp);
        tp_sock_ep_fail(&ep->sock, STRATA_ERR_PROTO, "exported %s",
                        why ? why : "region key 0");
        return;
    }
    tp_shm_unimport(ep, key); /* exported again: the new mapping wins */
    if (util_keymap_put(&ep->imports, key, imp) != STRATA_OK) {
        munmap(imp->base, imp->map_len);
        util_free(imp);
        tp_sock_ep_fail(&ep->sock, STRATA_ERR_NOMEM,
                        "no memory to map a region");
    }
}

void tp_shm_unimport(tp_shm_ep_t *ep, uint64_t key)
{
    tp_shm_import_t *imp = util_keymap_del(&ep->imports, key);
    if (imp) {
        munmap(imp->base, imp->map_len);
        util_free(imp);
    }
}

void tp_shm_unimport_all(tp_shm_ep_t *ep)
{
    uint64_t key;
    void *val;
    for (uint32_t i = 0; util_keymap_next(&ep->imports, &i, &key, &val);) {
        tp_shm_import_t *imp = val;
        munmap(imp->base, imp->map_len);
        util_free(imp);
    }
    util_keymap_fini(&ep->imports);
}

/* ---- posting ---- */

void tp_shm_ring_bell(tp_shm_ep_t *ep)
{
    uint64_t one = 1;
    if (write(ep->peer_bell, &one, sizeof(one)) < 0 && errno != EAGAIN)
        util_debug("shm: peer %s: doorbell: %s", ep->sock.base.peer,
                   strerror(errno));
}

static strata_status_t tp_shm_postable(tp_shm_ep_t *ep, const char *what)
{
    strata_status_t st = tp_sock_postable(&ep->sock, what, ep->leaving);
    if (st == STRATA_OK && ep->unreported >= TP_SHM_DEPTH)
        st = STRATA_ERR_AGAIN;
    return st;
}

/* Room for a record in the peer's ring. A peer that leaves it full for
 * STRATA_TIMEOUT_MS fails (the timer checks it even if nobody posts). */
static strata_status_t tp_shm_room(tp_shm_ep_t *ep, uint32_t payload_len)
{
    if (tp_shm_ring_room(&ep->tx, payload_len) ||
        !tp_shm_ring_want_space(&ep->tx, payload_len)) {
        if (!util_list_empty(&ep->sock.timed_link)) {
            /* The timer stays armed: it may fire once for nothing, which
             * costs less than rearming it here. */
            util_list_del(&ep->sock.timed_link);
            ep->sock.deadline_ns = 0;
        }
        return STRATA_OK;
    }
    if (util_list_empty(&ep->sock.timed_link))
        tp_sock_deadline(
            &ep->sock,
            util_now_ns() + (uint64_t)ep->sock.ctx->base.timeout_ms * 1000000u);
    return STRATA_ERR_AGAIN;
}

static void tp_shm_push(tp_shm_ep_t *ep, uint32_t type, uint32_t len,
                        uint32_t imm, const void *payload)
{
    if (tp_shm_ring_push(&ep->tx, type, len, imm, payload))
        tp_shm_ring_bell(ep);
}

static void tp_shm_complete(tp_shm_ep_t *ep, tp_event_type_t type, void *op_ctx)
{
    tp_evq_item_t *it = tp_sock_ep_event(&ep->sock, type, STRATA_OK);
    it->ev.op_ctx = op_ctx;
    ep->unreported++;
}

/* The peer's mapping of key; picks up exports already sent but not read
 * (the peer exports before it hands out the descriptor). */
static tp_shm_import_t *tp_shm_target(tp_shm_ep_t *ep, uint64_t key)
{
    tp_shm_import_t *imp = util_keymap_get(&ep->imports, key);
    if (!imp) {
        tp_shm_ctl_recv(ep);
        imp = util_keymap_get(&ep->imports, key);
    }
    return imp;
}

/* Where [off, off + len) of the peer's region key is mapped here; NULL
 * (logged, with what was tried) when it was not exported to this endpoint
 * or the range is outside it. */
static uint8_t *tp_shm_peer_range(tp_shm_ep_t *ep, const char *what,
                                  uint64_t key, uint64_t off, size_t len)
{
    tp_shm_import_t *imp = tp_shm_target(ep, key);
    if (!imp) {
        util_error("shm: %s %s: region %#llx was not exported to this "
                   "endpoint",
                   what, ep->sock.base.peer, (unsigned long long)key);
        return NULL;
    }
    if (off > imp->len || len > imp->len - off) {
        util_error("shm: %s %s: [%llu, +%zu) is outside region %#llx of "
                   "%llu bytes",
                   what, ep->sock.base.peer, (unsigned long long)off, len,
                   (unsigned long long)key, (unsigned long long)imp->len);
        return NULL;
    }
    return imp->base + off;
}

strata_status_t tp_shm_write(tp_ep_t *base, tp_mr_t *mr, size_t off,
                             const tp_rdesc_t *dst, uint64_t dst_off,
                             size_t len, uint32_t imm, unsigned flags,
                             void *op_ctx)
{
    tp_shm_ep_t *ep = tp_shm_ep(base);
    strata_status_t st = tp_shm_postable(ep, "tp_write");
    if (st != STRATA_OK)
        return st;
    uint8_t *to = tp_shm_peer_range(ep, "tp_write to", dst->key, dst_off, len);
    if (!to)
        return STRATA_ERR_RANGE;
    if ((flags & TP_WRITE_IMM) && (st = tp_shm_room(ep, 0)) != STRATA_OK)
        return st;
    memcpy(to, (const uint8_t *)mr->addr + off, len);
    if (flags & TP_WRITE_IMM)
        tp_shm_push(ep, TP_SHM_REC_WRITE_IMM, (uint32_t)len, imm, NULL);
    tp_shm_complete(ep, TP_EV_WRITE_DONE, op_ctx);
    return STRATA_OK;
}

/* The peer's mappings stay until the endpoint is freed (tp_shm_ep_fini),
 * also after the peer died: what it announced stays readable. */
strata_status_t tp_shm_peer_map(tp_ep_t *base, const tp_rdesc_t *desc,
                                uint64_t off, size_t len, const void **addr_out)
{
    const uint8_t *at = tp_shm_peer_range(tp_shm_ep(base), "tp_peer_map from",
                                          desc->key, off, len);
    if (!at)
        return STRATA_ERR_RANGE;
    *addr_out = at;
    return STRATA_OK;
}

strata_status_t tp_shm_send(tp_ep_t *base, const void *buf, size_t len,
                            void *op_ctx)
{
    tp_shm_ep_t *ep = tp_shm_ep(base);
    strata_status_t st = tp_shm_postable(ep, "tp_send");
    if (st == STRATA_OK)
        st = tp_shm_room(ep, (uint32_t)len);
    if (st != STRATA_OK)
        return st;
    tp_shm_push(ep, TP_SHM_REC_MSG, (uint32_t)len, 0, buf);
    tp_shm_complete(ep, TP_EV_SEND_DONE, op_ctx);
    return STRATA_OK;
}

/* ---- arrivals ---- */

/* Moves records from our ring into events while there is room. A peer that
 * left is reported once its ring is empty. */
void tp_shm_drain(tp_shm_ep_t *ep)
{
    bool moved = false, got = false;
    for (;;) {
        tp_shm_rec_t rec;
        const uint8_t *payload;
        const char *why = NULL;
        if (tp_shm_ring_peek(&ep->rx, &rec, &payload, &got, &why) !=
            STRATA_OK) {
            tp_sock_ep_fail(&ep->sock, STRATA_ERR_PROTO, "broke its ring: %s",
                            why);
            return;
        }
        if (!got)
            break;
        bool msg = rec.type == TP_SHM_REC_MSG;
        tp_evq_item_t *it = tp_sock_ep_arrival(
            &ep->sock, false, msg ? TP_EV_RECV : TP_EV_WRITE_IMM, payload,
            rec.len);
        if (!it)
            break; /* no room: the rest waits for the next call */
        it->ev.imm = rec.imm;
        tp_shm_ring_next(&ep->rx, &rec);
        moved = true;
    }
    if (moved && tp_shm_ring_release(&ep->rx))
        tp_shm_ring_bell(ep);
    if (!got && ep->leaving)
        tp_shm_ep_gone(ep);
}
