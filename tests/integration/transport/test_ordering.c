/*
 * 10,000 small writes with immediates arrive exactly once and in the order
 * posted, each after its data landed; control messages between them keep
 * their place in that order; every post completes exactly once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

#define T_MS tpt_ms(20000)
#define NWRITES 10000
#define MSG_EVERY 100
#define SLOTS 1024

static int ordering_server(tp_ctx_t *ctx, tp_listener_t *l, int ctl, void *arg)
{
    (void)l, (void)ctl, (void)arg;
    tpt_event_t e = tpt_expect(ctx, TP_EV_ACCEPTED, 0, T_MS);
    tpt_region_peer_t r;
    tpt_serve_region(ctx, e.ev.ep, SLOTS * 8, &r);
    uint32_t writes = 0, msgs = 0;
    char verdict[160] = "ok";
    while (writes < NWRITES || msgs < NWRITES / MSG_EVERY) {
        TPT_CHECK(tpt_next(ctx, &e, T_MS), "stalled after %u writes", writes);
        if (e.ev.type == TP_EV_SEND_DONE)
            continue;
        if (e.ev.type == TP_EV_RECV) {
            uint32_t before;
            memcpy(&before, e.data, sizeof(before));
            if (before != writes && strcmp(verdict, "ok") == 0)
                snprintf(verdict, sizeof(verdict),
                         "message %u came after %u writes, sent after %u", msgs,
                         writes, before);
            msgs++;
            continue;
        }
        uint64_t v;
        memcpy(&v, r.buf + (e.ev.imm % SLOTS) * 8, 8);
        if ((e.ev.imm != writes || e.ev.len != 8 || v < e.ev.imm ||
             v % SLOTS != e.ev.imm % SLOTS) &&
            strcmp(verdict, "ok") == 0)
            snprintf(verdict, sizeof(verdict),
                     "arrival %u: imm %u len %u data %llu", writes, e.ev.imm,
                     e.ev.len, (unsigned long long)v);
        writes++;
    }
    tpt_send(ctx, r.ep, verdict, strlen(verdict) + 1);
    tpt_expect(ctx, TP_EV_DISCONNECTED, 1u << TP_EV_SEND_DONE, T_MS);
    tp_ep_close(r.ep);
    return 0;
}

typedef struct client {
    unsigned char done[NWRITES];
    uint32_t completed, sends_done;
    char verdict[160];
} client_t;

static void client_event(client_t *c, const tpt_event_t *e)
{
    if (e->ev.type == TP_EV_SEND_DONE) {
        c->sends_done++;
    } else if (e->ev.type == TP_EV_RECV) {
        snprintf(c->verdict, sizeof(c->verdict), "%.150s",
                 (const char *)e->data);
    } else {
        assert_int_equal(e->ev.type, TP_EV_WRITE_DONE);
        assert_int_equal(e->ev.status, STRATA_OK);
        uintptr_t id = (uintptr_t)e->ev.op_ctx - 1;
        assert_true(id < NWRITES && !c->done[id]);
        assert_int_equal(id, c->completed); /* in order on one endpoint */
        c->done[id] = 1;
        c->completed++;
    }
}

/* Posts with op, taking events while the queue is full. */
#define POST(c, ctx, op)                                                       \
    do {                                                                       \
        strata_status_t st_;                                                   \
        tpt_event_t e_;                                                        \
        while ((st_ = (op)) == STRATA_ERR_AGAIN) {                             \
            assert_true(tpt_next(ctx, &e_, T_MS));                             \
            client_event(c, &e_);                                              \
        }                                                                      \
        assert_int_equal(st_, STRATA_OK);                                      \
    } while (0)

static void writes_arrive_once_in_order(void **state)
{
    (void)state;
    tpt_peer_t srv = tpt_spawn_server("order", T_MS, ordering_server, NULL);
    tp_ctx_t *ctx = tpt_open("order", T_MS);
    tp_ep_t *ep = NULL;
    assert_int_equal(tpt_connect(ctx, srv.addr, &ep, T_MS), STRATA_OK);
    tp_rdesc_t dst = tpt_recv_rdesc(ctx, T_MS);

    uint64_t *src = NULL;
    tp_mr_t *mr = NULL;
    assert_int_equal(tp_mem_alloc(ctx, NWRITES * 8, 0, (void **)&src, &mr),
                     STRATA_OK);
    static client_t c;
    memset(&c, 0, sizeof(c));
    for (uint32_t i = 0; i < NWRITES; i++) {
        src[i] = i;
        POST(&c, ctx,
             tp_write(ep, mr, i * 8, &dst, (i % SLOTS) * 8, 8, i, TP_WRITE_IMM,
                      (void *)(uintptr_t)(i + 1)));
        uint32_t before = i + 1;
        if (before % MSG_EVERY == 0)
            POST(&c, ctx, tp_send(ep, &before, sizeof(before), NULL));
    }
    while (c.completed < NWRITES || c.sends_done < NWRITES / MSG_EVERY ||
           !c.verdict[0]) {
        tpt_event_t e;
        assert_true(tpt_next(ctx, &e, T_MS));
        client_event(&c, &e);
    }
    assert_string_equal(c.verdict, "ok");
    tp_ep_close(ep);
    tp_mr_dereg(mr);
    tp_close(ctx);
    assert_int_equal(tpt_join(&srv, T_MS), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(writes_arrive_once_in_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
