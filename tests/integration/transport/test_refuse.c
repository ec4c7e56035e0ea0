/*
 * A write outside what the peer exported is refused and writes nothing:
 * past the end of an exported region (the descriptor's length forged), and
 * into a region exported to another endpoint of the same client but not to
 * the one writing. Where the refusal happens is the provider's (tcp: the
 * receiver closes the connection; shm: the sender has no mapping for it; verbs:
 * a remote access error), but the writer always sees an error.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

#define T_MS tpt_ms(20000)
#define RBYTES 4096
#define NCONN 3

/* Every connection gets its own region, exported to it alone; when all
 * three are gone, none of the regions may have changed. */
static int refuse_server(tp_ctx_t *ctx, tp_listener_t *l, int ctl, void *arg)
{
    (void)l, (void)ctl, (void)arg;
    tpt_region_peer_t r[NCONN];
    for (int c = 0; c < NCONN; c++) {
        tpt_event_t e =
            tpt_expect(ctx, TP_EV_ACCEPTED, 1u << TP_EV_SEND_DONE, T_MS);
        tpt_serve_region(ctx, e.ev.ep, RBYTES, &r[c]);
    }
    for (int gone = 0; gone < NCONN;) {
        tpt_event_t e =
            tpt_expect(ctx, TP_EV_DISCONNECTED, 1u << TP_EV_SEND_DONE, T_MS);
        tp_ep_close(e.ev.ep);
        gone++;
    }
    for (int c = 0; c < NCONN; c++) {
        for (int i = 0; i < RBYTES; i++)
            TPT_CHECK(r[c].buf[i] == TPT_GUARD, "region %d byte %d written", c,
                      i);
        tp_mr_dereg(r[c].mr);
    }
    return 0;
}

/* Posts the forged write and waits for the error it must produce. */
static void expect_refused(tp_ctx_t *ctx, tp_ep_t *ep, tp_mr_t *mr,
                           const tp_rdesc_t *dst, uint64_t off, size_t len)
{
    strata_status_t st =
        tp_write(ep, mr, 0, dst, off, len, 7, TP_WRITE_IMM, NULL);
    if (st != STRATA_OK) { /* refused at the sender */
        assert_int_equal(st, STRATA_ERR_RANGE);
        return;
    }
    for (;;) {
        tpt_event_t e;
        assert_true(tpt_next(ctx, &e, T_MS));
        assert_ptr_equal(e.ev.ep, ep);
        if (e.ev.type == TP_EV_WRITE_DONE && e.ev.status == STRATA_OK)
            continue; /* handed over; the refusal follows */
        assert_true(e.ev.type == TP_EV_WRITE_DONE ||
                    e.ev.type == TP_EV_DISCONNECTED);
        assert_int_not_equal(e.ev.status, STRATA_OK);
        if (e.ev.type == TP_EV_DISCONNECTED)
            return;
    }
}

static void forged_writes_are_refused(void **state)
{
    (void)state;
    tpt_peer_t srv = tpt_spawn_server("refuse", T_MS, refuse_server, NULL);
    tp_ctx_t *ctx = tpt_open("refuse", T_MS);
    void *src = NULL;
    tp_mr_t *mr = NULL;
    assert_int_equal(tp_mem_alloc(ctx, RBYTES, 0, &src, &mr), STRATA_OK);
    memset(src, 0x11, RBYTES);
    tp_ep_t *ep[NCONN];
    tp_rdesc_t d[NCONN];
    for (int c = 0; c < NCONN; c++) {
        assert_int_equal(tpt_connect(ctx, srv.addr, &ep[c], T_MS), STRATA_OK);
        d[c] = tpt_recv_rdesc(ctx, T_MS);
    }
    tp_rdesc_t past_end = d[0];
    past_end.len = 1u << 20; /* forged: the region has RBYTES */
    expect_refused(ctx, ep[0], mr, &past_end, RBYTES - 100, 200);
    /* d[1] is exported to ep[1] only. */
    expect_refused(ctx, ep[2], mr, &d[1], 0, 64);
    for (int c = 0; c < NCONN; c++)
        tp_ep_close(ep[c]);
    tp_mr_dereg(mr);
    tp_close(ctx);
    assert_int_equal(tpt_join(&srv, T_MS), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(forged_writes_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
