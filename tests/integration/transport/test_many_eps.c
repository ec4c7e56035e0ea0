/*
 * Many endpoints at once: one client connects 32 endpoints to one server
 * concurrently, and interleaved writes on all of them land in each
 * endpoint's own region.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

#define T_MS tpt_ms(20000)
#define NEPS 32
#define NWRITES 4
#define WBYTES (64 * 1024 + 1)
#define REGION (NWRITES * WBYTES)

static int many_server(tp_ctx_t *ctx, tp_listener_t *l, int ctl, void *arg)
{
    (void)l, (void)ctl, (void)arg;
    tpt_region_peer_t r[NEPS];
    int arrived[NEPS] = {0};
    for (int i = 0; i < NEPS; i++) {
        tpt_event_t e =
            tpt_expect(ctx, TP_EV_ACCEPTED, 1u << TP_EV_SEND_DONE, T_MS);
        tpt_serve_region(ctx, e.ev.ep, REGION, &r[i]);
        tp_ep_set_ctx(e.ev.ep, &r[i]);
    }
    int gone = 0;
    while (gone < NEPS) {
        tpt_event_t e;
        TPT_CHECK(tpt_next(ctx, &e, T_MS), "stalled, %d gone", gone);
        tpt_region_peer_t *p = tp_ep_ctx(e.ev.ep);
        if (e.ev.type == TP_EV_SEND_DONE)
            continue;
        if (e.ev.type == TP_EV_DISCONNECTED) {
            gone++;
            tp_ep_close(e.ev.ep);
            continue;
        }
        /* imm: the client's endpoint index and the write's number. */
        uint32_t who = e.ev.imm >> 8, n = e.ev.imm & 0xff;
        long long bad = tpt_check(p->buf + n * WBYTES, WBYTES, e.ev.imm);
        const char *verdict = bad < 0 && e.ev.len == WBYTES ? "ok" : "bad";
        TPT_CHECK(who < NEPS && n == (uint32_t)arrived[p - r]++,
                  "imm %#x out of order", e.ev.imm);
        tpt_send(ctx, e.ev.ep, verdict, 3);
    }
    return 0;
}

static void endpoints_at_once(void **state)
{
    (void)state;
    tpt_peer_t srv = tpt_spawn_server("many", T_MS, many_server, NULL);
    tp_ctx_t *ctx = tpt_open("many", T_MS);
    tp_ep_t *eps[NEPS];
    tp_rdesc_t dst[NEPS];
    int oks[NEPS] = {0}, connected = 0, descs = 0, done = 0;
    for (int i = 0; i < NEPS; i++)
        assert_int_equal(tp_connect(ctx, srv.addr, &dst[i], &eps[i]),
                         STRATA_OK);
    while (connected < NEPS || descs < NEPS) {
        tpt_event_t e;
        assert_true(tpt_next(ctx, &e, T_MS));
        if (e.ev.type == TP_EV_CONNECTED) {
            assert_int_equal(e.ev.status, STRATA_OK);
            connected++;
        } else {
            assert_int_equal(e.ev.type, TP_EV_RECV);
            memcpy(tp_ep_ctx(e.ev.ep), e.data, sizeof(tp_rdesc_t));
            descs++;
        }
    }
    char *src = NULL;
    tp_mr_t *mr = NULL;
    assert_int_equal(
        tp_mem_alloc(ctx, (size_t)NEPS * REGION, 0, (void **)&src, &mr),
        STRATA_OK);
    for (uint32_t n = 0; n < NWRITES; n++)
        for (uint32_t i = 0; i < NEPS; i++) {
            size_t off = ((size_t)i * NWRITES + n) * WBYTES;
            tpt_fill(src + off, WBYTES, i << 8 | n);
            tpt_write(ctx, eps[i], mr, off, &dst[i], n * WBYTES, WBYTES,
                      i << 8 | n, TP_WRITE_IMM, NULL);
        }
    while (done < NEPS * NWRITES) {
        tpt_event_t e;
        assert_true(tpt_next(ctx, &e, T_MS));
        if (e.ev.type == TP_EV_WRITE_DONE) {
            assert_int_equal(e.ev.status, STRATA_OK);
            done++;
        } else {
            assert_int_equal(e.ev.type, TP_EV_RECV);
            assert_string_equal((char *)e.data, "ok");
            oks[(tp_rdesc_t *)tp_ep_ctx(e.ev.ep) - dst]++;
        }
    }
    for (int got = 0; got < NEPS * NWRITES;) {
        got = 0;
        for (int i = 0; i < NEPS; i++)
            got += oks[i];
        tpt_event_t e;
        if (got < NEPS * NWRITES) {
            e = tpt_expect(ctx, TP_EV_RECV, 0, T_MS);
            assert_string_equal((char *)e.data, "ok");
            oks[(tp_rdesc_t *)tp_ep_ctx(e.ev.ep) - dst]++;
        }
    }
    for (int i = 0; i < NEPS; i++) {
        assert_int_equal(oks[i], NWRITES);
        tp_ep_close(eps[i]);
    }
    tp_mr_dereg(mr);
    tp_close(ctx);
    assert_int_equal(tpt_join(&srv, T_MS), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(endpoints_at_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
