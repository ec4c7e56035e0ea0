/*
 * tp_peer_map: on a provider with TP_CAP_PEER_MAP (shm), a region the peer
 * exported is read in place: what the peer stored before announcing it is
 * there, stored again after our answer, it is there again at the same
 * address; a range outside the region or a region never exported is
 * STRATA_ERR_RANGE; and a peer killed after announcing leaves what it
 * announced readable until we close the endpoint (an aggregator reducing a
 * dead worker's last push). Elsewhere the call is STRATA_ERR_UNSUPPORTED.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "harness.h"

#define T_MS tpt_ms(20000)
#define REGION ((1u << 20) + 3)
#define ROUNDS 3

/* Fills its region with round r's content and says so, ROUNDS times, each
 * after the answer to the last; then waits to be killed or told to go. */
static int filling_server(tp_ctx_t *ctx, tp_listener_t *l, int ctl, void *arg)
{
    (void)l, (void)arg;
    tpt_event_t e = tpt_expect(ctx, TP_EV_ACCEPTED, 0, T_MS);
    tpt_region_peer_t r;
    tpt_serve_region(ctx, e.ev.ep, REGION, &r);
    for (uint32_t round = 0; round < ROUNDS; round++) {
        tpt_fill(r.buf, REGION, 100 + round);
        tpt_send(ctx, r.ep, &round, sizeof(round));
        if (round + 1 < ROUNDS) /* the answer: we may store again */
            tpt_expect(ctx, TP_EV_RECV, 1u << TP_EV_SEND_DONE, T_MS);
    }
    while (!tpt_signalled(ctl))
        tpt_next(ctx, &e, 10);
    tp_ep_close(r.ep);
    tp_mr_dereg(r.mr);
    return 0;
}

static uint32_t expect_round(tp_ctx_t *ctx)
{
    tpt_event_t e = tpt_expect(ctx, TP_EV_RECV, 1u << TP_EV_SEND_DONE, T_MS);
    uint32_t round;
    assert_int_equal(e.ev.len, sizeof(round));
    memcpy(&round, e.data, sizeof(round));
    return round;
}

/* A connection to a filling server and the region it exported. */
typedef struct mapping {
    tpt_peer_t srv;
    tp_ctx_t *ctx;
    tp_ep_t *ep;
    tp_rdesc_t d;
} mapping_t;

/* Connects to a filling server; false (and nothing to test) when the
 * provider cannot map a peer's memory, which it must then refuse. */
static bool connect_mapping(mapping_t *m)
{
    m->srv = tpt_spawn_server("peer-map", T_MS, filling_server, NULL);
    m->ctx = tpt_open("peer-map", T_MS);
    assert_int_equal(tpt_connect(m->ctx, m->srv.addr, &m->ep, T_MS), STRATA_OK);
    m->d = tpt_recv_rdesc(m->ctx, T_MS);
    if (tp_caps(m->ctx) & TP_CAP_PEER_MAP)
        return true;
    const void *p = NULL;
    assert_int_equal(tp_peer_map(m->ep, &m->d, 0, 1, &p),
                     STRATA_ERR_UNSUPPORTED);
    print_message("%s cannot map a peer's memory: refused\n", tpt_provider());
    tpt_kill(&m->srv); /* it waits for an answer to round 0 */
    assert_int_equal(tpt_join(&m->srv, T_MS), -1);
    tp_ep_close(m->ep);
    tp_close(m->ctx);
    return false;
}

static void reads_what_the_peer_announced(void **state)
{
    (void)state;
    mapping_t m;
    if (!connect_mapping(&m))
        return;
    const void *all = NULL, *tail = NULL;
    for (uint32_t round = 0; round < ROUNDS; round++) {
        assert_int_equal(expect_round(m.ctx), round);
        if (round == 0) {
            assert_int_equal(tp_peer_map(m.ep, &m.d, 0, REGION, &all),
                             STRATA_OK);
            assert_int_equal(tp_peer_map(m.ep, &m.d, REGION - 3, 3, &tail),
                             STRATA_OK);
            assert_ptr_equal(tail, (const char *)all + REGION - 3);
        }
        assert_int_equal(tpt_check(all, REGION, 100 + round), -1);
        if (round + 1 < ROUNDS)
            tpt_send(m.ctx, m.ep, &round, sizeof(round));
    }

    const void *p = NULL;
    assert_int_equal(tp_peer_map(m.ep, &m.d, REGION - 3, 4, &p),
                     STRATA_ERR_RANGE);
    assert_int_equal(tp_peer_map(m.ep, &m.d, REGION + 1, 0, &p),
                     STRATA_ERR_RANGE);
    tp_rdesc_t other = m.d;
    other.key ^= 0x5a5a00;
    assert_int_equal(tp_peer_map(m.ep, &other, 0, 1, &p), STRATA_ERR_RANGE);
    assert_null(p);

    tpt_signal(&m.srv);
    assert_int_equal(tpt_join(&m.srv, T_MS), 0);
    tpt_expect(m.ctx, TP_EV_DISCONNECTED, 1u << TP_EV_SEND_DONE, T_MS);
    tp_ep_close(m.ep);
    tp_close(m.ctx);
}

static void a_dead_peer_stays_readable_until_closed(void **state)
{
    (void)state;
    mapping_t m;
    if (!connect_mapping(&m))
        return;
    assert_int_equal(expect_round(m.ctx), 0);
    const void *all = NULL;
    assert_int_equal(tp_peer_map(m.ep, &m.d, 0, REGION, &all), STRATA_OK);
    tpt_kill(&m.srv);
    assert_int_equal(tpt_join(&m.srv, T_MS), -1);
    tpt_event_t e =
        tpt_expect(m.ctx, TP_EV_DISCONNECTED, 1u << TP_EV_SEND_DONE, T_MS);
    assert_int_not_equal(e.ev.status, STRATA_OK);
    for (int i = 0; i < 3; i++) /* progress after the failure unmaps nothing */
        tpt_next(m.ctx, &e, 1);
    assert_int_equal(tpt_check(all, REGION, 100), -1);
    const void *again = NULL;
    assert_int_equal(tp_peer_map(m.ep, &m.d, 0, REGION, &again), STRATA_OK);
    assert_ptr_equal(again, all);
    tp_ep_close(m.ep);
    tp_close(m.ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_what_the_peer_announced),
        cmocka_unit_test(a_dead_peer_stays_readable_until_closed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
