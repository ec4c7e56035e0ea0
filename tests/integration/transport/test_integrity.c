/*
 * Data integrity: writes of 0, 1, 7, 4 KiB, 1 MiB + 3 and 64 MiB of random
 * content from odd source offsets to odd target offsets land intact, with
 * the bytes around them untouched, and their immediates say which write.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

#define T_MS tpt_ms(20000)
#define SRC_OFF 5
static const size_t sizes[] = {0, 1, 7, 4096, (1u << 20) + 3, 64u << 20};
#define NCASES (sizeof(sizes) / sizeof(sizes[0]))
#define REGION ((64u << 20) + 64)

static uint64_t dst_off(size_t i)
{
    return 3 + 2 * i; /* odd */
}

static int integrity_server(tp_ctx_t *ctx, tp_listener_t *l, int ctl, void *arg)
{
    (void)l, (void)ctl, (void)arg;
    tpt_event_t e = tpt_expect(ctx, TP_EV_ACCEPTED, 0, T_MS);
    tpt_region_peer_t r;
    tpt_serve_region(ctx, e.ev.ep, REGION, &r);
    for (size_t i = 0; i < NCASES; i++) {
        e = tpt_expect(ctx, TP_EV_WRITE_IMM, 1u << TP_EV_SEND_DONE, T_MS);
        char verdict[128] = "ok";
        uint64_t off = dst_off(i);
        long long bad = tpt_check(r.buf + off, sizes[i], 1000 + i);
        if (e.ev.imm != i || e.ev.len != sizes[i])
            snprintf(verdict, sizeof(verdict), "imm %u len %u, want %zu %zu",
                     e.ev.imm, e.ev.len, i, sizes[i]);
        else if (bad >= 0)
            snprintf(verdict, sizeof(verdict), "byte %lld of %zu differs", bad,
                     sizes[i]);
        else if (r.buf[off - 1] != TPT_GUARD ||
                 r.buf[off + sizes[i]] != TPT_GUARD)
            snprintf(verdict, sizeof(verdict), "bytes around %zu touched",
                     sizes[i]);
        memset(r.buf + off, TPT_GUARD, sizes[i]);
        tpt_send(ctx, r.ep, verdict, strlen(verdict) + 1);
    }
    e = tpt_expect(ctx, TP_EV_DISCONNECTED, 1u << TP_EV_SEND_DONE, T_MS);
    tp_ep_close(r.ep);
    tp_mr_dereg(r.mr);
    return 0;
}

static void sizes_at_odd_offsets_land_intact(void **state)
{
    (void)state;
    tpt_peer_t srv =
        tpt_spawn_server("integrity", T_MS, integrity_server, NULL);
    tp_ctx_t *ctx = tpt_open("integrity", T_MS);
    tp_ep_t *ep = NULL;
    assert_int_equal(tpt_connect(ctx, srv.addr, &ep, T_MS), STRATA_OK);
    tp_rdesc_t dst = tpt_recv_rdesc(ctx, T_MS);
    assert_int_equal(dst.len, REGION);

    void *src = NULL;
    tp_mr_t *mr = NULL;
    assert_int_equal(tp_mem_alloc(ctx, REGION, 0, &src, &mr), STRATA_OK);
    for (size_t i = 0; i < NCASES; i++) {
        tpt_fill((char *)src + SRC_OFF, sizes[i], 1000 + i);
        tpt_write(ctx, ep, mr, SRC_OFF, &dst, dst_off(i), sizes[i], (uint32_t)i,
                  TP_WRITE_IMM, (void *)&sizes[i]);
        /* The write's completion and the server's verdict on it come in
         * either order: verbs may see the verdict before the ACK. */
        for (int got = 0; got < 2; got++) {
            tpt_event_t e;
            assert_true(tpt_next(ctx, &e, T_MS));
            if (e.ev.type == TP_EV_RECV) {
                if (strcmp((char *)e.data, "ok") != 0)
                    fail_msg("write of %zu bytes: %s", sizes[i],
                             (char *)e.data);
                continue;
            }
            assert_int_equal(e.ev.type, TP_EV_WRITE_DONE);
            assert_int_equal(e.ev.status, STRATA_OK);
            assert_ptr_equal(e.ev.op_ctx, &sizes[i]);
        }
    }
    tp_ep_close(ep);
    tp_mr_dereg(mr);
    tp_close(ctx);
    assert_int_equal(tpt_join(&srv, T_MS), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sizes_at_odd_offsets_land_intact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
