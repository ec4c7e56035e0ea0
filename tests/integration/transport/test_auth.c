/*
 * A peer with the wrong job secret is refused: its connect reports
 * STRATA_ERR_AUTH, it receives no region descriptor, the server never
 * reports it, and neither side leaks a file descriptor. A peer with the
 * right secret still gets in afterwards.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

#define T_MS tpt_ms(10000)
#define ATTEMPTS 10

/* Serves a region to whoever gets in; exits non-zero if anyone but the one
 * good client got in, or if descriptors leaked once it left. */
static int auth_server(tp_ctx_t *ctx, tp_listener_t *l, int ctl, void *arg)
{
    (void)l, (void)arg;
    int fds = tpt_count_fds();
    int accepted = 0, quiet = 0;
    bool told = false;
    tpt_region_peer_t r = {0};
    /* Until told to stop and then quiet for 100 ms, so that the provider
     * finished closing what it refused. */
    while (!told || quiet < 10) {
        told = told || tpt_signalled(ctl);
        tpt_event_t e;
        if (!tpt_next(ctx, &e, 10)) {
            quiet++;
            continue;
        }
        quiet = 0;
        if (e.ev.type == TP_EV_ACCEPTED) {
            accepted++;
            tpt_serve_region(ctx, e.ev.ep, 4096, &r);
        } else if (e.ev.type == TP_EV_DISCONNECTED) {
            tp_ep_close(e.ev.ep);
            tp_mr_dereg(r.mr);
        }
    }
    TPT_CHECK(accepted == 1, "%d peers got in, want the 1 good one", accepted);
    TPT_CHECK(tpt_count_fds() == fds, "%d descriptors open, %d before",
              tpt_count_fds(), fds);
    return 0;
}

static void wrong_secret_is_refused(void **state)
{
    (void)state;
    tpt_peer_t srv = tpt_spawn_server("the right one", T_MS, auth_server, NULL);
    tp_ctx_t *bad = tpt_open("a wrong one", T_MS);
    int fds = tpt_count_fds();
    for (int i = 0; i < ATTEMPTS; i++) {
        tp_ep_t *ep = NULL;
        assert_int_equal(tpt_connect(bad, srv.addr, &ep, T_MS),
                         STRATA_ERR_AUTH);
        tpt_event_t e;
        assert_false(tpt_next(bad, &e, 20)); /* no descriptor, nothing */
        tp_ep_close(ep);
    }
    assert_int_equal(tpt_count_fds(), fds);
    tp_close(bad);

    tp_ctx_t *anon = tpt_open(NULL, T_MS); /* no secret at all */
    tp_ep_t *ep = NULL;
    assert_int_equal(tpt_connect(anon, srv.addr, &ep, T_MS), STRATA_ERR_AUTH);
    tp_ep_close(ep);
    tp_close(anon);

    tp_ctx_t *good = tpt_open("the right one", T_MS);
    assert_int_equal(tpt_connect(good, srv.addr, &ep, T_MS), STRATA_OK);
    tp_rdesc_t d = tpt_recv_rdesc(good, T_MS);
    assert_int_equal(d.len, 4096);
    tp_ep_close(ep);
    tp_close(good);
    tpt_signal(&srv);
    assert_int_equal(tpt_join(&srv, T_MS), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(wrong_secret_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
