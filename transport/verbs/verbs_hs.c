/*
 * The handshake on QP 0 after rdma_cm connected it: the auth.h exchange,
 * then the SETUP messages (credit inbox and extra queue pairs), then READY.
 *
 *   client                         server
 *   HELLO            ---->
 *                    <----         CHALLENGE
 *   RESPONSE, SETUP  ---->         (server proved the secret first)
 *                    <----         RESULT, SETUP   (extra QPs up)
 *   READY            ---->         (client's extra QPs up)
 *   CONNECTED                      ACCEPTED
 *
 * Remote writes are refused by the queue pairs until the peer is
 * authenticated, and no address or key is sent before that.
 */
#include "transport/verbs/verbs.h"

#include <endian.h>
#include <string.h>

#include "util/log.h"

/* SETUP: inbox {addr, rkey}, then {qpn, psn} of QPs 1..nqps-1. */
typedef struct tp_verbs_setup {
    uint8_t nqps;
    uint8_t pad[3];
    uint32_t inbox_rkey;
    uint64_t inbox_addr;
    uint32_t qp[2 * (TP_VERBS_QPS_MAX - 1)];
} tp_verbs_setup_t;

#define TP_VERBS_SETUP_HDR 16

static void tp_verbs_hs_fail(tp_verbs_ep_t *ep, strata_status_t st,
                             const char *what)
{
    util_error("verbs: handshake with %s failed: %s (%s)", ep->base.peer, what,
               strata_strerror(st));
    tp_verbs_ep_fail(ep, st);
}

static void tp_verbs_hs_send(tp_verbs_ep_t *ep, uint32_t type, const void *buf,
                             size_t len)
{
    strata_status_t st = tp_verbs_msg(ep, type, buf, len);
    if (st != STRATA_OK)
        tp_verbs_hs_fail(ep, st, "cannot queue a handshake message");
}

void tp_verbs_hs_start(tp_verbs_ep_t *ep)
{
    tp_auth_init(&ep->auth, &ep->ctx->secret,
                 ep->client ? TP_AUTH_CLIENT : TP_AUTH_SERVER);
    ep->state = TP_VERBS_EP_HANDSHAKE;
    ep->hs = TP_VERBS_HS_AUTH;
    if (!ep->client)
        return; /* the server speaks when HELLO arrives */
    uint8_t out[TP_AUTH_MSG_MAX];
    size_t out_len;
    bool done;
    strata_status_t st = tp_auth_step(&ep->auth, NULL, 0, out, &out_len, &done);
    if (st != STRATA_OK)
        tp_verbs_hs_fail(ep, st, "cannot start authentication");
    else
        tp_verbs_hs_send(ep, TP_VERBS_MSG_AUTH, out, out_len);
}

static void tp_verbs_hs_send_setup(tp_verbs_ep_t *ep)
{
    strata_status_t st = tp_verbs_inbox_open(ep);
    if (st != STRATA_OK) {
        tp_verbs_hs_fail(ep, st, "cannot open the credit inbox");
        return;
    }
    tp_verbs_setup_t s = {0};
    s.nqps = (uint8_t)ep->nqps;
    s.inbox_rkey = htole32(ep->inbox_rkey);
    s.inbox_addr = htole64((uint64_t)(uintptr_t)ep->inbox);
    for (unsigned i = 1; i < ep->nqps; i++) {
        s.qp[2 * (i - 1)] = htole32(ep->qps[i].qp->qp_num);
        s.qp[2 * (i - 1) + 1] = htole32(ep->qps[i].psn);
    }
    tp_verbs_hs_send(ep, TP_VERBS_MSG_SETUP, &s,
                     TP_VERBS_SETUP_HDR + 8 * (ep->nqps - 1));
}

static void tp_verbs_hs_auth(tp_verbs_ep_t *ep, const uint8_t *msg,
                             uint32_t len)
{
    uint8_t out[TP_AUTH_MSG_MAX];
    size_t out_len;
    bool done;
    strata_status_t st =
        tp_auth_step(&ep->auth, msg, len, out, &out_len, &done);
    ep->hs_rx++;
    if (st != STRATA_OK) {
        if (st != STRATA_ERR_AUTH)
            util_error("verbs: malformed authentication message from %s (%s)",
                       ep->base.peer, strata_strerror(st));
        else if (!ep->client)
            util_error("verbs: %s failed authentication (its job secret "
                       "differs); disconnected",
                       ep->base.peer);
        else
            util_error("verbs: %s %s (STRATA_JOB_SECRET differs between the "
                       "peers)",
                       ep->base.peer,
                       ep->hs_rx == 1 ? "does not prove the job secret"
                                      : "refused our job secret");
        if (!ep->client && out_len) { /* tell it, then drop it */
            ep->hs = TP_VERBS_HS_REFUSED;
            tp_verbs_hs_send(ep, TP_VERBS_MSG_AUTH, out, out_len);
            ep->hs_result_seq = ep->head - 1;
            return;
        }
        tp_verbs_ep_fail(ep, st);
        return;
    }
    if (out_len)
        tp_verbs_hs_send(ep, TP_VERBS_MSG_AUTH, out, out_len);
    if (ep->client && !done) {
        /* The server proved the secret: it may learn where to write. */
        tp_verbs_hs_send_setup(ep);
        return;
    }
    if (!done)
        return;
    ep->hs = TP_VERBS_HS_WAIT_SETUP;
    st = tp_verbs_qps_allow_write(ep);
    if (st != STRATA_OK)
        tp_verbs_ep_fail(ep, st);
}

static void tp_verbs_hs_setup(tp_verbs_ep_t *ep, const uint8_t *msg,
                              uint32_t len)
{
    tp_verbs_setup_t s;
    if (len < TP_VERBS_SETUP_HDR || len > sizeof(s)) {
        tp_verbs_hs_fail(ep, STRATA_ERR_PROTO, "SETUP of a wrong size");
        return;
    }
    memcpy(&s, msg, len);
    if (s.nqps != ep->nqps || len != TP_VERBS_SETUP_HDR + 8u * (s.nqps - 1)) {
        tp_verbs_hs_fail(ep, STRATA_ERR_PROTO,
                         "SETUP for another number of queue pairs");
        return;
    }
    uint32_t qpn[TP_VERBS_QPS_MAX], psn[TP_VERBS_QPS_MAX];
    for (unsigned i = 0; i + 1 < ep->nqps; i++) {
        qpn[i] = le32toh(s.qp[2 * i]);
        psn[i] = le32toh(s.qp[2 * i + 1]);
    }
    ep->peer_inbox_addr = le64toh(s.inbox_addr);
    ep->peer_inbox_rkey = le32toh(s.inbox_rkey);
    strata_status_t st = tp_verbs_qps_extra_up(ep, qpn, psn);
    if (st != STRATA_OK) {
        tp_verbs_ep_fail(ep, st);
        return;
    }
    if (ep->client) {
        tp_verbs_hs_send(ep, TP_VERBS_MSG_READY, NULL, 0);
        if (ep->state == TP_VERBS_EP_HANDSHAKE)
            tp_verbs_ep_connected(ep);
        return;
    }
    ep->hs = TP_VERBS_HS_WAIT_READY;
    tp_verbs_hs_send_setup(ep);
}

void tp_verbs_hs_recv(tp_verbs_ep_t *ep, uint32_t type, const uint8_t *msg,
                      uint32_t len)
{
    if (ep->hs == TP_VERBS_HS_REFUSED)
        return; /* what a refused client sent after its RESPONSE */
    if (ep->state != TP_VERBS_EP_HANDSHAKE) {
        tp_verbs_hs_fail(ep, STRATA_ERR_PROTO,
                         "handshake message after the handshake");
        return;
    }
    if (ep->hs == TP_VERBS_HS_AUTH && type == TP_VERBS_MSG_AUTH)
        tp_verbs_hs_auth(ep, msg, len);
    else if (ep->hs == TP_VERBS_HS_WAIT_SETUP && type == TP_VERBS_MSG_SETUP)
        tp_verbs_hs_setup(ep, msg, len);
    else if (ep->hs == TP_VERBS_HS_WAIT_READY && type == TP_VERBS_MSG_READY &&
             len == 0)
        tp_verbs_ep_connected(ep);
    else
        tp_verbs_hs_fail(ep, STRATA_ERR_PROTO,
                         "message out of order in the handshake");
}

void tp_verbs_hs_sent(tp_verbs_ep_t *ep, const tp_verbs_op_t *op)
{
    /* A refused client has its RESULT: now it goes. */
    if (ep->state == TP_VERBS_EP_HANDSHAKE && ep->hs == TP_VERBS_HS_REFUSED &&
        op->seq == ep->hs_result_seq)
        tp_verbs_ep_fail(ep, STRATA_ERR_AUTH);
}
