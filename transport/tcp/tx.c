/*
 * The tcp send queue. A post encodes its header into a preallocated slot
 * (payloads of writes stay in the caller's region; messages are copied into
 * the endpoint's FIFO) and returns; tp_progress() hands runs of slots to the
 * kernel with one sendmsg() of header/payload iovecs. A write completes when
 * the kernel has taken all of it. Slots are freed in order once their
 * completion was reported, which bounds the events an endpoint can queue.
 */
#include <errno.h>
#include <string.h>
#include <sys/uio.h>

#include "transport/tcp/tcp.h"
#include "util/log.h"

#define TP_TCP_SQ_MASK (TP_TCP_SQ_DEPTH - 1)
_Static_assert((TP_TCP_SQ_DEPTH & TP_TCP_SQ_MASK) == 0, "a power of two");

static strata_status_t tp_tcp_postable(tp_tcp_ep_t *ep, const char *what)
{
    strata_status_t st = tp_sock_postable(&ep->sock, what, false);
    if (st == STRATA_OK && ep->sq_head - ep->sq_tail >= TP_TCP_SQ_DEPTH)
        st = STRATA_ERR_AGAIN;
    return st;
}

static tp_tcp_op_t *tp_tcp_op_new(tp_tcp_ep_t *ep, const tp_tcp_hdr_t *hdr)
{
    tp_tcp_op_t *op = &ep->sq[ep->sq_head & TP_TCP_SQ_MASK];
    tp_tcp_hdr_encode(hdr, op->hdr);
    op->payload = NULL;
    op->len = hdr->len;
    op->user = true;
    op->released = false;
    op->msg_end = 0;
    op->op_ctx = NULL;
    return op;
}

static void tp_tcp_op_post(tp_tcp_ep_t *ep)
{
    ep->sq_head++;
    if (!ep->tx_blocked)
        util_list_ensure(&tp_tcp_ep_ctx(ep)->tx_ready, &ep->tx_link);
}

strata_status_t tp_tcp_write(tp_ep_t *base, tp_mr_t *mr, size_t off,
                             const tp_rdesc_t *dst, uint64_t dst_off,
                             size_t len, uint32_t imm, unsigned flags,
                             void *op_ctx)
{
    tp_tcp_ep_t *ep = tp_tcp_ep(base);
    strata_status_t st = tp_tcp_postable(ep, "tp_write");
    if (st != STRATA_OK)
        return st;
    bool with_imm = flags & TP_WRITE_IMM;
    tp_tcp_hdr_t hdr = {
        .type = TP_TCP_WRITE,
        .flags = (uint8_t)((with_imm ? TP_TCP_F_IMM : 0) |
                           (tp_tcp_ep_ctx(ep)->crc ? TP_TCP_F_CRC : 0)),
        .len = (uint32_t)len,
        .key = dst->key,
        .off = dst_off,
        .imm = with_imm ? imm : 0,
    };
    tp_tcp_op_t *op = tp_tcp_op_new(ep, &hdr);
    op->payload = (const uint8_t *)mr->addr + off;
    op->op_ctx = op_ctx;
    if (tp_tcp_ep_ctx(ep)->crc) {
        hdr.crc = tp_tcp_crc_update(tp_tcp_crc_hdr(op->hdr), op->payload, len);
        tp_tcp_hdr_encode(&hdr, op->hdr);
    }
    tp_tcp_op_post(ep);
    return STRATA_OK;
}

/* A frame whose payload is copied into the message FIFO. */
static tp_tcp_op_t *tp_tcp_op_copy(tp_tcp_ep_t *ep, const tp_tcp_hdr_t *hdr,
                                   const void *payload)
{
    uint64_t end;
    void *copy = util_bfifo_alloc(&ep->msgs, hdr->len, &end);
    if (!copy)
        return NULL;
    memcpy(copy, payload, hdr->len);
    tp_tcp_op_t *op = tp_tcp_op_new(ep, hdr);
    op->payload = copy;
    op->msg_end = end;
    return op;
}

strata_status_t tp_tcp_send(tp_ep_t *base, const void *buf, size_t len,
                            void *op_ctx)
{
    tp_tcp_ep_t *ep = tp_tcp_ep(base);
    strata_status_t st = tp_tcp_postable(ep, "tp_send");
    if (st != STRATA_OK)
        return st;
    tp_tcp_hdr_t hdr = {.type = TP_TCP_MSG, .len = (uint32_t)len};
    tp_tcp_op_t *op = tp_tcp_op_copy(ep, &hdr, buf);
    if (!op)
        return STRATA_ERR_AGAIN;
    op->op_ctx = op_ctx;
    tp_tcp_op_post(ep);
    return STRATA_OK;
}

/* A frame of the provider's own (AUTH, REFUSE, BYE): no event. */
strata_status_t tp_tcp_queue_frame(tp_tcp_ep_t *ep, uint8_t type, uint64_t key,
                                   const void *payload, uint32_t len)
{
    tp_tcp_hdr_t hdr = {.type = type, .len = len, .key = key};
    tp_tcp_op_t *op = NULL;
    if (ep->sq_head - ep->sq_tail < TP_TCP_SQ_DEPTH)
        op = tp_tcp_op_copy(ep, &hdr, payload);
    if (!op) {
        util_error("tcp: peer %s: no room to queue a frame of type %u",
                   ep->sock.base.peer, type);
        return STRATA_ERR_AGAIN;
    }
    op->user = false;
    op->released = true;
    tp_tcp_op_post(ep);
    return STRATA_OK;
}

/* Frees released slots at the tail, in order. */
static void tp_tcp_sq_release(tp_tcp_ep_t *ep)
{
    while (ep->sq_tail != ep->sq_send) {
        tp_tcp_op_t *op = &ep->sq[ep->sq_tail & TP_TCP_SQ_MASK];
        if (!op->released)
            break;
        if (op->msg_end)
            util_bfifo_release(&ep->msgs, op->msg_end);
        ep->sq_tail++;
    }
}

static void tp_tcp_op_complete(tp_tcp_ep_t *ep, uint32_t slot,
                               strata_status_t status)
{
    tp_tcp_op_t *op = &ep->sq[slot & TP_TCP_SQ_MASK];
    if (!op->user)
        return;
    tp_tcp_hdr_t h = {.type = op->hdr[0]};
    tp_evq_item_t *it = tp_sock_ep_event(
        &ep->sock, h.type == TP_TCP_WRITE ? TP_EV_WRITE_DONE : TP_EV_SEND_DONE,
        status);
    it->ev.op_ctx = op->op_ctx;
    it->slot = slot;
}

void tp_tcp_op_reported(tp_sock_ep_t *sock, uint32_t slot)
{
    tp_tcp_ep_t *ep = tp_tcp_ep_of(sock);
    ep->sq[slot & TP_TCP_SQ_MASK].released = true;
    tp_tcp_sq_release(ep);
}

/* Fills iov with the unsent bytes of ops from sq_send on. */
static int tp_tcp_gather(const tp_tcp_ep_t *ep, struct iovec *iov)
{
    int n = 0;
    uint64_t skip = ep->sq_off;
    for (uint32_t i = ep->sq_send; i != ep->sq_head && n < TP_TCP_IOV_MAX - 1;
         i++) {
        const tp_tcp_op_t *op = &ep->sq[i & TP_TCP_SQ_MASK];
        if (skip < TP_TCP_HDR_LEN)
            iov[n++] =
                (struct iovec){(void *)(op->hdr + skip), TP_TCP_HDR_LEN - skip};
        uint64_t pskip = skip > TP_TCP_HDR_LEN ? skip - TP_TCP_HDR_LEN : 0;
        if (op->len > pskip)
            iov[n++] =
                (struct iovec){(void *)(op->payload + pskip), op->len - pskip};
        skip = 0;
    }
    return n;
}

/* Accounts for sent bytes: completes every op sent in full. */
static void tp_tcp_advance(tp_tcp_ep_t *ep, uint64_t sent)
{
    while (sent > 0) {
        const tp_tcp_op_t *op = &ep->sq[ep->sq_send & TP_TCP_SQ_MASK];
        uint64_t rest = TP_TCP_HDR_LEN + op->len - ep->sq_off;
        if (sent < rest) {
            ep->sq_off += sent;
            return;
        }
        sent -= rest;
        ep->sq_off = 0;
        tp_tcp_op_complete(ep, ep->sq_send++, STRATA_OK);
    }
}

void tp_tcp_flush(tp_tcp_ep_t *ep)
{
    struct iovec iov[TP_TCP_IOV_MAX];
    while (ep->sq_send != ep->sq_head && ep->sock.fd >= 0) {
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 0};
        msg.msg_iovlen = (size_t)tp_tcp_gather(ep, iov);
        uint64_t want = 0;
        for (size_t i = 0; i < msg.msg_iovlen; i++)
            want += iov[i].iov_len;
        ssize_t n = sendmsg(ep->sock.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN) {
            tp_sock_ep_fail(&ep->sock, STRATA_ERR_PEER, "send failed: %s",
                            strerror(errno));
            return;
        }
        tp_tcp_advance(ep, n > 0 ? (uint64_t)n : 0);
        if (n < 0 || (uint64_t)n < want) {
            ep->tx_blocked = true; /* EPOLLOUT (edge) will resume us */
            break;
        }
    }
    tp_tcp_sq_release(ep);
    util_list_del(&ep->tx_link);
}

/* Every op not sent in full completes with status. */
void tp_tcp_cancel_ops(tp_tcp_ep_t *ep, strata_status_t status)
{
    ep->sq_off = 0;
    while (ep->sq_send != ep->sq_head)
        tp_tcp_op_complete(ep, ep->sq_send++, status);
    tp_tcp_sq_release(ep);
}
