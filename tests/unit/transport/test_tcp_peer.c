/*
 * The tcp provider against a hand-written peer speaking its wire format:
 * what a buggy or hostile peer sends is refused, logged and written
 * nowhere, and a silent peer is dropped after STRATA_TIMEOUT_MS.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "transport/auth.h"
#include "transport/tcp/wire.h"
#include "transport/transport.h"

#define SECRET "raw peer"
#define TIMEOUT_MS 300
#define REGION 4096

typedef struct fixture {
    tp_ctx_t *ctx;
    tp_listener_t *l;
    tp_mr_t *mr;
    unsigned char *buf;
    tp_event_t ev[16];
    int nev;
} fixture_t;

static void open_server(fixture_t *f, bool crc)
{
    memset(f, 0, sizeof(*f));
    tp_params_t params = {
        .timeout_ms = TIMEOUT_MS, .secret = SECRET, .tcp_crc = crc};
    assert_int_equal(tp_open("tcp", &params, &f->ctx), STRATA_OK);
    assert_int_equal(tp_listen(f->ctx, "127.0.0.1:0", &f->l), STRATA_OK);
    void *addr;
    assert_int_equal(
        tp_mem_alloc(f->ctx, REGION, TP_ACCESS_REMOTE_WRITE, &addr, &f->mr),
        STRATA_OK);
    f->buf = addr;
    memset(f->buf, 0xa5, REGION);
}

/* Progresses the server for ms, collecting its events. */
static void pump(fixture_t *f, int ms)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        int n = 0;
        assert_int_equal(tp_progress(f->ctx, f->ev + f->nev, 16 - f->nev, &n),
                         STRATA_OK);
        f->nev += n;
        usleep(200);
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000 +
                 (t.tv_nsec - t0.tv_nsec) / 1000000 <
             ms);
}

static int raw_connect(fixture_t *f)
{
    const char *a = tp_listener_addr(f->l);
    struct sockaddr_in sin = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
    sin.sin_port = htons((uint16_t)atoi(strrchr(a, ':') + 1));
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct timeval tv = {.tv_sec = 0, .tv_usec = 20000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    assert_int_equal(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    return fd;
}

static void raw_frame(int fd, tp_tcp_hdr_t h, const void *payload)
{
    uint8_t b[TP_TCP_HDR_LEN + 512];
    tp_tcp_hdr_encode(&h, b);
    memcpy(b + TP_TCP_HDR_LEN, payload, h.len);
    /* One send: with Nagle a second one could wait for a delayed ACK. */
    assert_int_equal(send(fd, b, TP_TCP_HDR_LEN + h.len, MSG_NOSIGNAL),
                     TP_TCP_HDR_LEN + h.len);
}

/* Reads one frame from the server, progressing it meanwhile. 0 on EOF. */
static int raw_recv(fixture_t *f, int fd, tp_tcp_hdr_t *h, uint8_t *payload)
{
    uint8_t b[TP_TCP_HDR_LEN + 512];
    size_t got = 0, need = TP_TCP_HDR_LEN;
    for (int tries = 0; got < need && tries < 200; tries++) {
        pump(f, 1);
        ssize_t n = recv(fd, b + got, need - got, 0);
        if (n == 0)
            return 0;
        if (n < 0)
            continue;
        got += (size_t)n;
        if (got == TP_TCP_HDR_LEN) {
            const char *why;
            assert_int_equal(tp_tcp_hdr_decode(b, h, &why), STRATA_OK);
            need += h->len;
        }
    }
    assert_int_equal(got, need);
    memcpy(payload, b + TP_TCP_HDR_LEN, h->len);
    return 1;
}

/* The client side of the auth.h exchange over raw frames. */
static tp_ep_t *raw_auth(fixture_t *f, int fd)
{
    tp_params_t params = {.secret = SECRET};
    tp_auth_secret_t secret;
    assert_int_equal(tp_auth_secret_load(&params, &secret), STRATA_OK);
    tp_auth_t auth;
    tp_auth_init(&auth, &secret, TP_AUTH_CLIENT);
    uint8_t in[512], out[TP_AUTH_MSG_MAX];
    size_t in_len = 0, out_len;
    bool done = false;
    while (!done) {
        assert_int_equal(tp_auth_step(&auth, in_len ? in : NULL, in_len, out,
                                      &out_len, &done),
                         STRATA_OK);
        if (out_len)
            raw_frame(
                fd,
                (tp_tcp_hdr_t){.type = TP_TCP_AUTH, .len = (uint32_t)out_len},
                out);
        tp_tcp_hdr_t h;
        if (!done) {
            assert_int_equal(raw_recv(f, fd, &h, in), 1);
            assert_int_equal(h.type, TP_TCP_AUTH);
            in_len = h.len;
        }
    }
    pump(f, 5);
    assert_int_equal(f->nev, 1);
    assert_int_equal(f->ev[0].type, TP_EV_ACCEPTED);
    f->nev = 0;
    return f->ev[0].ep;
}

/* A server and a raw peer authenticated to it, the region exported to the
 * peer: the start of each test of what an authenticated peer writes. */
static tp_ep_t *authed_peer(fixture_t *f, bool crc, int *fd_out,
                            tp_rdesc_t *desc_out)
{
    open_server(f, crc);
    *fd_out = raw_connect(f);
    tp_ep_t *ep = raw_auth(f, *fd_out);
    assert_int_equal(tp_mr_export(f->mr, ep, desc_out), STRATA_OK);
    return ep;
}

/* The server refuses: says why in a REFUSE frame, then closes. */
static void expect_refusal(fixture_t *f, int fd, const char *reason)
{
    tp_tcp_hdr_t h;
    uint8_t why[512];
    assert_int_equal(raw_recv(f, fd, &h, why), 1);
    assert_int_equal(h.type, TP_TCP_REFUSE);
    why[h.len] = '\0';
    if (!strstr((char *)why, reason))
        fail_msg("refused with '%s', expected '%s'", (char *)why, reason);
    assert_int_equal(raw_recv(f, fd, &h, why), 0); /* then EOF */
}

static void untouched(const fixture_t *f)
{
    for (int i = 0; i < REGION; i++)
        assert_int_equal(f->buf[i], 0xa5);
}

static void close_server(fixture_t *f)
{
    tp_close(f->ctx);
}

static void garbage_is_refused(void **state)
{
    (void)state;
    fixture_t f;
    open_server(&f, false);
    int fd = raw_connect(&f);
    uint8_t junk[TP_TCP_HDR_LEN];
    memset(junk, 0xff, sizeof(junk));
    assert_int_equal(send(fd, junk, sizeof(junk), 0), sizeof(junk));
    expect_refusal(&f, fd, "unknown frame type");
    assert_int_equal(f.nev, 0); /* never reported */
    close(fd);
    close_server(&f);
}

static void silent_peer_is_dropped(void **state)
{
    (void)state;
    fixture_t f;
    open_server(&f, false);
    int fd = raw_connect(&f);
    pump(&f, TIMEOUT_MS + 200);
    uint8_t b[8];
    assert_int_equal(recv(fd, b, sizeof(b), 0), 0); /* closed */
    assert_int_equal(f.nev, 0);
    close(fd);
    close_server(&f);
}

static void data_before_auth_is_refused(void **state)
{
    (void)state;
    fixture_t f;
    open_server(&f, false);
    int fd = raw_connect(&f);
    raw_frame(fd, (tp_tcp_hdr_t){.type = TP_TCP_WRITE, .len = 4, .key = 1},
              "abcd");
    expect_refusal(&f, fd, "data before authentication");
    untouched(&f);
    close(fd);
    close_server(&f);
}

static void out_of_range_write_is_refused(void **state)
{
    (void)state;
    fixture_t f;
    int fd;
    tp_rdesc_t d;
    tp_ep_t *ep = authed_peer(&f, false, &fd, &d);
    uint8_t payload[200];
    memset(payload, 0x11, sizeof(payload));
    /* A valid write first: the framing is right. */
    raw_frame(fd,
              (tp_tcp_hdr_t){.type = TP_TCP_WRITE,
                             .flags = TP_TCP_F_IMM,
                             .len = 8,
                             .key = d.key,
                             .off = 8,
                             .imm = 77},
              payload);
    pump(&f, 20);
    assert_int_equal(f.nev, 1);
    assert_int_equal(f.ev[0].type, TP_EV_WRITE_IMM);
    assert_int_equal(f.ev[0].imm, 77);
    assert_int_equal(f.buf[8], 0x11);
    memset(f.buf, 0xa5, REGION);
    f.nev = 0;
    raw_frame(fd,
              (tp_tcp_hdr_t){.type = TP_TCP_WRITE,
                             .len = 200,
                             .key = d.key,
                             .off = REGION - 100},
              payload);
    expect_refusal(&f, fd, "which has 4096 bytes");
    untouched(&f);
    assert_int_equal(f.nev, 1);
    assert_int_equal(f.ev[0].type, TP_EV_DISCONNECTED);
    assert_int_equal(f.ev[0].status, STRATA_ERR_RANGE);
    tp_ep_close(ep);
    close(fd);
    close_server(&f);
}

static void crc_mismatch_fails_the_endpoint(void **state)
{
    (void)state;
    for (int missing = 0; missing < 2; missing++) {
        fixture_t f;
        int fd;
        tp_rdesc_t d;
        tp_ep_t *ep = authed_peer(&f, true, &fd, &d);
        tp_tcp_hdr_t h = {.type = TP_TCP_WRITE,
                          .flags = missing ? 0 : TP_TCP_F_CRC,
                          .len = 16,
                          .key = d.key,
                          .crc = missing ? 0 : 0x1234};
        raw_frame(fd, h, "sixteen bytes!!!");
        pump(&f, 20);
        assert_int_equal(f.nev, 1);
        assert_int_equal(f.ev[0].type, TP_EV_DISCONNECTED);
        assert_int_equal(f.ev[0].status,
                         missing ? STRATA_ERR_CONFIG : STRATA_ERR_IO);
        tp_ep_close(ep);
        close(fd);
        close_server(&f);
    }
}

/* A peer that writes and closes at once: both arrive before the server
 * looks, announced by one edge; the write lands and the close is seen (it
 * was missed when the short read that took the write counted as drained:
 * a worker then never saw an aggregator die). */
static void close_right_after_a_write_is_seen(void **state)
{
    (void)state;
    fixture_t f;
    int fd;
    tp_rdesc_t d;
    tp_ep_t *ep = authed_peer(&f, false, &fd, &d);
    raw_frame(fd,
              (tp_tcp_hdr_t){.type = TP_TCP_WRITE,
                             .flags = TP_TCP_F_IMM,
                             .len = 8,
                             .key = d.key,
                             .imm = 5},
              "eight b!");
    close(fd);
    pump(&f, 50);
    assert_int_equal(f.nev, 2);
    assert_int_equal(f.ev[0].type, TP_EV_WRITE_IMM);
    assert_int_equal(f.ev[0].imm, 5);
    assert_memory_equal(f.buf, "eight b!", 8);
    assert_int_equal(f.ev[1].type, TP_EV_DISCONNECTED);
    assert_int_equal(f.ev[1].status, STRATA_ERR_PEER);
    tp_ep_close(ep);
    close_server(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(garbage_is_refused),
        cmocka_unit_test(silent_peer_is_dropped),
        cmocka_unit_test(data_before_auth_is_refused),
        cmocka_unit_test(out_of_range_write_is_refused),
        cmocka_unit_test(crc_mismatch_fails_the_endpoint),
        cmocka_unit_test(close_right_after_a_write_is_seen),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
