/*
 * The tcp receive state machine. Headers are read into a small staging
 * buffer; a WRITE is checked against the regions exported to this peer
 * before any of its payload is stored, and its payload is then read with
 * readv() straight into the region (only the bytes that arrived in the same
 * read as the header are copied from staging). A write that does not fit
 * closes the connection and writes nothing.
 */
#include <errno.h>
#include <string.h>
#include <sys/uio.h>

#include "transport/tcp/tcp.h"
#include "util/log.h"

typedef enum tp_tcp_rx_result {
    TP_TCP_RX_MORE,  /* call again */
    TP_TCP_RX_IDLE,  /* the socket is drained: wait for the next edge */
    TP_TCP_RX_STALL, /* no room for the next event: wait for a report */
    TP_TCP_RX_DEAD,  /* the endpoint failed */
} tp_tcp_rx_result_t;

static uint32_t tp_tcp_staged(const tp_tcp_rx_t *rx)
{
    return rx->end - rx->beg;
}

/* Refuses what the peer sent: tells it why, then closes. */
static tp_tcp_rx_result_t tp_tcp_refuse(tp_tcp_ep_t *ep, strata_status_t status,
                                        const char *why)
{
    tp_tcp_queue_frame(ep, TP_TCP_REFUSE, (uint64_t)status, why,
                       (uint32_t)strnlen(why, TP_TCP_REFUSE_MAX));
    tp_tcp_flush(ep);
    tp_sock_ep_fail(&ep->sock, status, "refused what it sent: %s", why);
    return TP_TCP_RX_DEAD;
}

static tp_tcp_rx_result_t tp_tcp_rx_error(tp_tcp_ep_t *ep, ssize_t n)
{
    if (n == 0) {
        if (ep->sock.state == TP_SOCK_AUTH)
            tp_sock_ep_auth_closed(&ep->sock);
        else
            tp_sock_ep_fail(&ep->sock, STRATA_ERR_PEER,
                            "connection closed by the peer without a "
                            "goodbye (process died or host reset?)");
        return TP_TCP_RX_DEAD;
    }
    if (errno == EAGAIN || errno == EINTR) {
        ep->rx.ready = errno == EINTR;
        return errno == EINTR ? TP_TCP_RX_MORE : TP_TCP_RX_IDLE;
    }
    tp_sock_ep_fail(&ep->sock,
                    errno == ETIMEDOUT ? STRATA_ERR_TIMEOUT : STRATA_ERR_PEER,
                    "receive failed: %s", strerror(errno));
    return TP_TCP_RX_DEAD;
}

/* Reads more into staging until need bytes are staged (or the socket is
 * drained). */
static tp_tcp_rx_result_t tp_tcp_fill(tp_tcp_ep_t *ep, uint32_t need)
{
    tp_tcp_rx_t *rx = &ep->rx;
    if (!rx->ready)
        return TP_TCP_RX_IDLE;
    if (TP_TCP_RX_STAGE - rx->beg < need) {
        memmove(rx->stage, rx->stage + rx->beg, tp_tcp_staged(rx));
        rx->end -= rx->beg;
        rx->beg = 0;
    }
    size_t want = TP_TCP_RX_STAGE - rx->end;
    ssize_t n = recv(ep->sock.fd, rx->stage + rx->end, want, 0);
    if (n <= 0)
        return tp_tcp_rx_error(ep, n);
    rx->end += (uint32_t)n;
    rx->budget = rx->budget > (uint64_t)n ? rx->budget - (uint64_t)n : 0;
    /* Drained: the next byte brings a new edge. Not the end, though: the
     * edge that brought the last bytes may have brought the peer's close
     * too, and recv says so only when asked again. */
    if ((size_t)n < want)
        rx->ready = rx->hup;
    return TP_TCP_RX_MORE;
}

static void tp_tcp_land(tp_tcp_rx_t *rx, const uint8_t *from, uint64_t n,
                        bool crc)
{
    if (from)
        memcpy(rx->dst, from, n);
    if (crc)
        rx->crc = tp_tcp_crc_update(rx->crc, rx->dst, n);
    rx->dst += n;
    rx->left -= n;
}

static tp_tcp_rx_result_t tp_tcp_write_done(tp_tcp_ep_t *ep)
{
    tp_tcp_rx_t *rx = &ep->rx;
    rx->in_payload = false;
    if ((rx->hdr.flags & TP_TCP_F_CRC) && rx->crc != rx->hdr.crc) {
        char why[TP_TCP_REFUSE_MAX];
        snprintf(why, sizeof(why),
                 "CRC32C mismatch on a write of %u bytes to region %#llx at "
                 "%llu (got %08x, sent %08x): corrupted in transit or changed "
                 "before its completion",
                 rx->hdr.len, (unsigned long long)rx->hdr.key,
                 (unsigned long long)rx->hdr.off, rx->crc, rx->hdr.crc);
        return tp_tcp_refuse(ep, STRATA_ERR_IO, why);
    }
    if (rx->hdr.flags & TP_TCP_F_IMM) {
        rx->imm_taken = false;
        tp_evq_item_t *it = tp_sock_ep_arrival(&ep->sock, true, TP_EV_WRITE_IMM,
                                               NULL, rx->hdr.len);
        it->ev.imm = rx->hdr.imm;
    }
    return TP_TCP_RX_MORE;
}

/* Lands payload: first what is staged, then straight from the socket. */
static tp_tcp_rx_result_t tp_tcp_payload(tp_tcp_ep_t *ep)
{
    tp_tcp_rx_t *rx = &ep->rx;
    bool crc = rx->hdr.flags & TP_TCP_F_CRC;
    uint64_t take = tp_tcp_staged(rx) < rx->left ? tp_tcp_staged(rx) : rx->left;
    tp_tcp_land(rx, rx->stage + rx->beg, take, crc);
    rx->beg += (uint32_t)take;
    if (rx->left == 0)
        return tp_tcp_write_done(ep);
    if (!rx->ready)
        return TP_TCP_RX_IDLE;
    rx->beg = rx->end = 0;
    struct iovec iov[2] = {{rx->dst, rx->left}, {rx->stage, TP_TCP_RX_STAGE}};
    ssize_t n = readv(ep->sock.fd, iov, 2);
    if (n <= 0)
        return tp_tcp_rx_error(ep, n);
    uint64_t got = (uint64_t)n, landed = got < rx->left ? got : rx->left;
    tp_tcp_land(rx, NULL, landed, crc);
    rx->end = (uint32_t)(got - landed);
    if (got < iov[0].iov_len + iov[1].iov_len)
        rx->ready = rx->hup; /* as in tp_tcp_fill */
    rx->budget = rx->budget > got ? rx->budget - got : 0;
    return rx->left == 0 ? tp_tcp_write_done(ep) : TP_TCP_RX_MORE;
}

/* Checks a WRITE header against the regions exported to this peer. */
static tp_tcp_rx_result_t tp_tcp_write_begin(tp_tcp_ep_t *ep)
{
    tp_tcp_rx_t *rx = &ep->rx;
    const tp_tcp_hdr_t *h = &rx->hdr;
    char why[TP_TCP_REFUSE_MAX];
    tp_sock_mr_t *mr = util_keymap_get(&ep->sock.grants, h->key);
    if (!mr) {
        snprintf(why, sizeof(why),
                 "write of %u bytes to region %#llx, which is not exported "
                 "to this peer",
                 h->len, (unsigned long long)h->key);
        return tp_tcp_refuse(ep, STRATA_ERR_RANGE, why);
    }
    if (!tp_tcp_write_fits(h, mr->base.len)) {
        snprintf(why, sizeof(why),
                 "write of %u bytes at offset %llu of region %#llx, which "
                 "has %zu bytes",
                 h->len, (unsigned long long)h->off, (unsigned long long)h->key,
                 mr->base.len);
        return tp_tcp_refuse(ep, STRATA_ERR_RANGE, why);
    }
    if (tp_tcp_ep_ctx(ep)->crc && !(h->flags & TP_TCP_F_CRC))
        return tp_tcp_refuse(ep, STRATA_ERR_CONFIG,
                             "write without CRC32C, but STRATA_TCP_CRC=1 "
                             "here: set it alike on every rank");
    if ((h->flags & TP_TCP_F_IMM) && !tp_evq_arrival_take(&ep->sock.ctx->evq))
        return TP_TCP_RX_STALL;
    rx->imm_taken = h->flags & TP_TCP_F_IMM;
    rx->crc =
        (h->flags & TP_TCP_F_CRC) ? tp_tcp_crc_hdr(rx->stage + rx->beg) : 0;
    rx->beg += TP_TCP_HDR_LEN;
    rx->dst = (uint8_t *)mr->base.addr + h->off;
    rx->left = h->len;
    rx->in_payload = true;
    return TP_TCP_RX_MORE;
}

static tp_tcp_rx_result_t tp_tcp_message(tp_tcp_ep_t *ep)
{
    tp_tcp_rx_t *rx = &ep->rx;
    const uint8_t *body = rx->stage + rx->beg + TP_TCP_HDR_LEN;
    if (!tp_sock_ep_arrival(&ep->sock, false, TP_EV_RECV, body, rx->hdr.len))
        return TP_TCP_RX_STALL;
    rx->beg += TP_TCP_HDR_LEN + rx->hdr.len;
    return TP_TCP_RX_MORE;
}

/* The peer refuses what we sent, and says why in (untrusted) text. */
static tp_tcp_rx_result_t tp_tcp_refused(tp_tcp_ep_t *ep)
{
    const tp_tcp_hdr_t *h = &ep->rx.hdr;
    char why[TP_TCP_REFUSE_MAX + 1];
    const uint8_t *body = ep->rx.stage + ep->rx.beg + TP_TCP_HDR_LEN;
    for (uint32_t i = 0; i < h->len; i++)
        why[i] = body[i] >= 0x20 && body[i] < 0x7f ? (char)body[i] : '?';
    why[h->len] = '\0';
    strata_status_t st = h->key > STRATA_OK && h->key <= STRATA_ERR_CANCELED
                             ? (strata_status_t)h->key
                             : STRATA_ERR_PROTO;
    tp_sock_ep_fail(&ep->sock, st, "the peer refused what we sent: %s", why);
    return TP_TCP_RX_DEAD;
}

/* Which frames each state accepts. */
static bool tp_tcp_frame_allowed(const tp_tcp_ep_t *ep, uint8_t type)
{
    if (type == TP_TCP_REFUSE)
        return true;
    if (ep->sock.state == TP_SOCK_AUTH)
        return type == TP_TCP_AUTH;
    return type != TP_TCP_AUTH;
}

static tp_tcp_rx_result_t tp_tcp_frame(tp_tcp_ep_t *ep)
{
    tp_tcp_rx_t *rx = &ep->rx;
    if (tp_tcp_staged(rx) < TP_TCP_HDR_LEN)
        return tp_tcp_fill(ep, TP_TCP_HDR_LEN);
    const char *why = NULL;
    if (tp_tcp_hdr_decode(rx->stage + rx->beg, &rx->hdr, &why) != STRATA_OK)
        return tp_tcp_refuse(ep, STRATA_ERR_PROTO, why);
    if (!tp_tcp_frame_allowed(ep, rx->hdr.type))
        return tp_tcp_refuse(ep, STRATA_ERR_PROTO,
                             ep->sock.state == TP_SOCK_AUTH
                                 ? "data before authentication"
                                 : "authentication after it succeeded");
    if (rx->hdr.type == TP_TCP_WRITE)
        return tp_tcp_write_begin(ep);
    if (rx->hdr.type == TP_TCP_BYE) {
        tp_sock_ep_fail(&ep->sock, STRATA_OK, "closed the connection");
        return TP_TCP_RX_DEAD;
    }
    uint32_t frame = TP_TCP_HDR_LEN + rx->hdr.len;
    if (tp_tcp_staged(rx) < frame)
        return tp_tcp_fill(ep, frame);
    if (rx->hdr.type == TP_TCP_MSG)
        return tp_tcp_message(ep);
    if (rx->hdr.type == TP_TCP_REFUSE)
        return tp_tcp_refused(ep);
    rx->beg += frame;
    tp_sock_auth_recv(&ep->sock, rx->stage + rx->beg - rx->hdr.len,
                      rx->hdr.len);
    return ep->sock.state == TP_SOCK_DOWN ? TP_TCP_RX_DEAD : TP_TCP_RX_MORE;
}

void tp_tcp_rx(tp_tcp_ep_t *ep)
{
    tp_tcp_rx_result_t r = TP_TCP_RX_MORE;
    ep->rx.budget = TP_TCP_RX_BUDGET;
    while (r == TP_TCP_RX_MORE && ep->rx.budget > 0)
        r = ep->rx.in_payload ? tp_tcp_payload(ep) : tp_tcp_frame(ep);
    /* Idle: the next byte brings an edge. Dead: off every list already.
     * Out of budget, or stalled for room: stay and retry next time. */
    if (r == TP_TCP_RX_IDLE)
        util_list_del(&ep->rx_link);
}
