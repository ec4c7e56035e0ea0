/*
 * A listener whose accept() runs out of descriptors (EMFILE) leaves the
 * connections in the backlog and pauses, warning once, instead of failing
 * and warning on every progress call (300 connections under ulimit -n 128
 * once made a progress thread log 464,439 warnings in 7 s); once
 * descriptors are free again, it accepts them all. Over tcp and shm.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "transport/transport.h"
#include "util/log.h"

#define NCONN 8

static int warnings, accepting_again;

static void count_lines(void *arg, util_log_level_t level, const char *line)
{
    (void)arg;
    warnings += level <= UTIL_LOG_WARN;
    accepting_again += strstr(line, "accepting connections") != NULL;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static tp_ctx_t *open_ctx(const char *prov)
{
    tp_params_t params = {.timeout_ms = 10000, .secret = "nofile"};
    tp_ctx_t *ctx = NULL;
    assert_int_equal(tp_open(prov, &params, &ctx), STRATA_OK);
    return ctx;
}

/* Progresses both contexts for up to s seconds or until the server
 * accepted every connection; returns how many it accepted. */
static int pump(tp_ctx_t *srv, tp_ctx_t *cli, double s, int *accepted)
{
    tp_event_t ev[16];
    double end = now_s() + s;
    while (now_s() < end && *accepted < NCONN) {
        int n = 0;
        assert_int_equal(tp_progress(srv, ev, 16, &n), STRATA_OK);
        for (int i = 0; i < n; i++)
            *accepted += ev[i].type == TP_EV_ACCEPTED;
        if (cli)
            assert_int_equal(tp_progress(cli, ev, 16, &n), STRATA_OK);
        usleep(100);
    }
    return *accepted;
}

static void backlog_waits_out_the_shortage(const char *prov)
{
    tp_ctx_t *srv = open_ctx(prov), *cli = open_ctx(prov);
    tp_listener_t *l;
    assert_int_equal(
        tp_listen(srv, strcmp(prov, "tcp") == 0 ? "127.0.0.1:0" : NULL, &l),
        STRATA_OK);
    tp_ep_t *eps[NCONN];
    for (int i = 0; i < NCONN; i++)
        assert_int_equal(tp_connect(cli, tp_listener_addr(l), NULL, &eps[i]),
                         STRATA_OK);

    /* No descriptor left for accept(): the lowest free one is the limit. */
    struct rlimit saved, low;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &saved), 0);
    int lowest = dup(0);
    assert_true(lowest >= 0);
    close(lowest);
    low =
        (struct rlimit){.rlim_cur = (rlim_t)lowest, .rlim_max = saved.rlim_max};
    warnings = accepting_again = 0;
    util_log_level_t level = util_log_get_level();
    util_log_set_level(UTIL_LOG_INFO);
    util_log_set_sink(count_lines, NULL);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    int accepted = 0;
    pump(srv, NULL, 0.5, &accepted); /* only the server: nothing to answer */
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved), 0);
    int during = warnings;
    assert_int_equal(accepted, 0);
    /* Descriptors again: every connection waited in the backlog. */
    pump(srv, cli, 5.0, &accepted);
    util_log_set_sink(NULL, NULL);
    util_log_set_level(level);
    printf("%s: %d warnings during the shortage, %d accepted after it\n", prov,
           during, accepted);
    assert_in_range(during, 1, 1);
    assert_int_equal(accepted, NCONN);
    assert_int_equal(accepting_again, 1);
    tp_close(cli);
    tp_close(srv);
}

static void tcp_backlog_waits(void **state)
{
    (void)state;
    backlog_waits_out_the_shortage("tcp");
}

static void shm_backlog_waits(void **state)
{
    (void)state;
    backlog_waits_out_the_shortage("shm");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tcp_backlog_waits),
        cmocka_unit_test(shm_backlog_waits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
