/*
 * A context opened with poll_us (the engine's coordinator context) polls
 * its sockets at most that often while progress is called in a loop, so
 * that a polling thread makes no system call for it on most turns: a
 * message that arrived is reported by the first progress call once the
 * interval has passed since the last poll, or by the first one after
 * tp_wait_arm() (the caller is about to sleep on the wait fd), and not
 * before. Over tcp, the provider of that context.
 */
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "transport/transport.h"
#include "util/clock.h"

#define T_MS 20000
#define POLL_US 2000000u /* long: no hiccup of a loaded machine reaches it */

static tp_ctx_t *open_ctx(uint32_t poll_us)
{
    tp_params_t params = {
        .timeout_ms = T_MS, .secret = "poll", .poll_us = poll_us};
    tp_ctx_t *ctx = NULL;
    assert_int_equal(tp_open("tcp", &params, &ctx), STRATA_OK);
    return ctx;
}

/* Progresses ctx once; the number of events of type seen. */
static int progress(tp_ctx_t *ctx, tp_event_type_t type, tp_ep_t **ep_out)
{
    tp_event_t ev[16];
    int n = 0, seen = 0;
    assert_int_equal(tp_progress(ctx, ev, 16, &n), STRATA_OK);
    for (int i = 0; i < n; i++)
        if (ev[i].type == type) {
            seen++;
            if (ep_out)
                *ep_out = ev[i].ep;
        }
    return seen;
}

/* Progresses both until cli sees an event of type: as a progress thread
 * would, arming cli and sleeping on its wait fd (1 ms) when it has
 * nothing. */
static tp_ep_t *pump_until(tp_ctx_t *srv, tp_ctx_t *cli, tp_event_type_t type,
                           tp_ep_t **srv_ep)
{
    uint64_t end = util_now_ns() + (uint64_t)T_MS * 1000000u;
    tp_ep_t *ep = NULL;
    while (util_now_ns() < end) {
        progress(srv, TP_EV_ACCEPTED, srv_ep);
        if (progress(cli, type, &ep) > 0)
            return ep;
        if (tp_wait_arm(cli) == STRATA_OK) {
            struct pollfd p = {.fd = tp_wait_fd(cli), .events = POLLIN};
            poll(&p, 1, 1);
        }
    }
    fail_msg("no event %d within %d ms", (int)type, T_MS);
    return NULL;
}

static void sockets_polled_at_most_every_interval(void **state)
{
    (void)state;
    tp_ctx_t *srv = open_ctx(0), *cli = open_ctx(POLL_US);
    tp_listener_t *l;
    assert_int_equal(tp_listen(srv, "127.0.0.1:0", &l), STRATA_OK);
    tp_ep_t *ep, *srv_ep = NULL;
    assert_int_equal(tp_connect(cli, tp_listener_addr(l), NULL, &ep),
                     STRATA_OK);
    pump_until(srv, cli, TP_EV_CONNECTED, &srv_ep);
    while (!srv_ep)
        progress(srv, TP_EV_ACCEPTED, &srv_ep);

    for (int round = 0; round < 2; round++) {
        /* A poll now (after an arm), then the server's message lands in
         * cli's socket buffer (loopback: once the kernel took it). */
        assert_int_equal(tp_wait_arm(cli), STRATA_OK);
        assert_int_equal(progress(cli, TP_EV_RECV, NULL), 0);
        uint64_t polled = util_now_ns();
        assert_int_equal(tp_send(srv_ep, "hi", 3, NULL), STRATA_OK);
        while (progress(srv, TP_EV_SEND_DONE, NULL) == 0)
            ;
        /* Not polled again within the interval: not reported yet. */
        int seen = progress(cli, TP_EV_RECV, NULL);
        if (util_now_ns() - polled < POLL_US * 1000ull)
            assert_int_equal(seen, 0);
        if (round == 0) {
            /* Once the interval passed, the next call polls. */
            while (util_now_ns() - polled < POLL_US * 1000ull)
                poll(NULL, 0, 10);
        } else {
            /* About to sleep: the next call polls at once. */
            assert_int_equal(tp_wait_arm(cli), STRATA_OK);
        }
        if (seen == 0)
            assert_int_equal(progress(cli, TP_EV_RECV, NULL), 1);
    }
    tp_close(cli);
    tp_close(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sockets_polled_at_most_every_interval),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
