/* The event queue of the tcp and shm providers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "transport/evq.h"

static int released;

static void done(void *arg, tp_evq_item_t *it)
{
    (void)arg;
    (void)it;
    released++;
}

static void arrivals_are_bounded_and_payloads_live_one_call(void **state)
{
    (void)state;
    tp_evq_t q;
    assert_int_equal(tp_evq_init(&q, 4, 256), STRATA_OK);
    tp_ep_t *ep = (tp_ep_t *)&q; /* any address names an endpoint */
    char msg[100];
    memset(msg, 'x', sizeof(msg));
    assert_non_null(tp_evq_push_arrival(&q, false, TP_EV_RECV, ep, msg, 100));
    assert_non_null(tp_evq_push_arrival(&q, false, TP_EV_RECV, ep, msg, 100));
    /* The 256-byte FIFO holds two such messages. */
    assert_false(tp_evq_arrival_room(&q, 100));
    assert_null(tp_evq_push_arrival(&q, false, TP_EV_RECV, ep, msg, 100));
    assert_true(tp_evq_arrival_take(&q));
    assert_non_null(
        tp_evq_push_arrival(&q, true, TP_EV_WRITE_IMM, ep, NULL, 64));
    assert_true(tp_evq_arrival_take(&q));
    assert_false(tp_evq_arrival_take(&q)); /* budget of 4 */
    tp_evq_arrival_cancel(&q);

    tp_event_t ev[8];
    released = 0;
    tp_evq_begin(&q);
    assert_int_equal(tp_evq_report(&q, ev, 8, done, NULL), 3);
    assert_int_equal(released, 3);
    assert_int_equal(ev[0].type, TP_EV_RECV);
    assert_memory_equal(ev[1].data, msg, 100);
    assert_int_equal(ev[2].len, 64);
    /* Still valid until the next call begins... */
    assert_false(tp_evq_arrival_room(&q, 100));
    tp_evq_begin(&q);
    assert_true(tp_evq_arrival_room(&q, 100));
    tp_evq_fini(&q);
}

static void reserve_grows_and_keeps_order(void **state)
{
    (void)state;
    tp_evq_t q;
    assert_int_equal(tp_evq_init(&q, 8, 64), STRATA_OK);
    static char two[2];
    tp_ep_t *a = (tp_ep_t *)&two[0], *b = (tp_ep_t *)&two[1];
    assert_int_equal(tp_evq_reserve(&q, 60), STRATA_OK);
    for (int i = 0; i < 60; i++) {
        tp_evq_item_t *it = tp_evq_push(&q);
        it->ev.type = TP_EV_WRITE_DONE;
        it->ev.ep = i % 2 ? a : b;
        it->slot = (uint32_t)i;
    }
    assert_int_equal(tp_evq_reserve(&q, 1000), STRATA_OK); /* grows */
    assert_true(q.cap >= 1068);
    tp_evq_item_t *it = tp_evq_push(&q);
    it->ev.type = TP_EV_DISCONNECTED;
    it->ev.ep = a;
    tp_evq_drop_ep(&q, a); /* completions stay, the state event goes */
    tp_event_t ev[100];
    released = 0;
    assert_int_equal(tp_evq_report(&q, ev, 100, done, NULL), 60);
    assert_int_equal(released, 61);
    for (int i = 0; i < 60; i++)
        assert_int_equal(ev[i].type, TP_EV_WRITE_DONE);
    assert_true(tp_evq_empty(&q));
    tp_evq_unreserve(&q, 1060);
    assert_int_equal(q.reserved, 0);
    tp_evq_fini(&q);
}

static void closed_listener_is_forgotten(void **state)
{
    (void)state;
    tp_evq_t q;
    assert_int_equal(tp_evq_init(&q, 8, 64), STRATA_OK);
    assert_int_equal(tp_evq_reserve(&q, 2), STRATA_OK);
    tp_listener_t *l = (tp_listener_t *)&q;
    tp_evq_item_t *it = tp_evq_push(&q);
    it->ev.type = TP_EV_ACCEPTED;
    it->ev.listener = l;
    it->ev.ep = (tp_ep_t *)&q;
    tp_evq_forget_listener(&q, l);
    tp_event_t ev;
    assert_int_equal(tp_evq_report(&q, &ev, 1, done, NULL), 1);
    assert_null(ev.listener);
    tp_evq_fini(&q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(arrivals_are_bounded_and_payloads_live_one_call),
        cmocka_unit_test(reserve_grows_and_keeps_order),
        cmocka_unit_test(closed_listener_is_forgotten),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
