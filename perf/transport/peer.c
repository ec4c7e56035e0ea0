/* The benchmark's two sides: the answering server and the client's setup. */
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "perf/transport/bench.h"

static double perf_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

bool perf_tp_block; /* --poll block: sleep on the wait fd when idle */

/* Events are taken in batches, as a busy application would; a message's
 * data stays valid because progress is called again only once the batch is
 * used up. One context per process. */
bool perf_tp_next(tp_ctx_t *ctx, tp_event_t *ev, int timeout_ms)
{
    static tp_event_t batch[64];
    static int have, next;
    double deadline = 0;
    for (unsigned spins = 0; next == have; spins++) {
        next = have = 0;
        if (tp_progress(ctx, batch, 64, &have) != STRATA_OK)
            return false;
        /* Spinning, look at the clock once in 1024 empty polls (not on the
         * first: it may cost a system call, see measure.c). */
        if (have > 0 || (!perf_tp_block && spins % 1024 != 1023))
            continue;
        double now = perf_now_ms();
        if (deadline == 0)
            deadline = now + timeout_ms;
        else if (now > deadline)
            return false;
        if (perf_tp_block && tp_wait_arm(ctx) == STRATA_OK) {
            struct pollfd pfd = {.fd = tp_wait_fd(ctx), .events = POLLIN};
            poll(&pfd, 1, (int)(deadline - now) + 1);
        }
    }
    *ev = batch[next++];
    return true;
}

tp_ctx_t *perf_tp_open(const char *provider, const eng_config_t *cfg)
{
    tp_ctx_t *ctx = NULL;
    tp_params_t params;
    if (eng_config_tp_params(cfg, &params) != STRATA_OK ||
        tp_open(provider, &params, &ctx) != STRATA_OK)
        return NULL; /* logged */
    return ctx;
}

/* A region of size bytes peers may write, exported to ep and described to
 * it in a message. */
static int perf_tp_offer(tp_ctx_t *ctx, tp_ep_t *ep, size_t size,
                         tp_mr_t **mr_out)
{
    void *addr;
    tp_rdesc_t d;
    if (tp_mem_alloc(ctx, size, TP_ACCESS_REMOTE_WRITE, &addr, mr_out) !=
        STRATA_OK)
        return -1;
    memset(addr, 0, size); /* touch every page before measuring */
    if (tp_mr_export(*mr_out, ep, &d) != STRATA_OK ||
        tp_send(ep, &d, sizeof(d), NULL) != STRATA_OK)
        return -1;
    return 0;
}

/* One event of the server's loop; 1 when the client left. */
static int perf_tp_answer(perf_tp_conn_t *c, const tp_event_t *ev)
{
    static const char ack[8] = "done";
    switch (ev->type) {
    case TP_EV_RECV:
        if (ev->len != sizeof(c->peer))
            return -1;
        memcpy(&c->peer, ev->data, sizeof(c->peer));
        return 0;
    case TP_EV_WRITE_IMM:
        if (ev->imm & PERF_IMM_LAT) {
            strata_status_t st;
            while ((st = tp_write(c->ep, c->mr, 0, &c->peer, 0, ev->len,
                                  ev->imm, TP_WRITE_IMM, NULL)) ==
                   STRATA_ERR_AGAIN) {
                int n;
                tp_progress(c->ctx, NULL, 0, &n);
            }
            return st == STRATA_OK ? 0 : -1;
        }
        if (ev->imm & PERF_IMM_BW_LAST)
            return tp_send(c->ep, ack, sizeof(ack), NULL) == STRATA_OK ? 0 : -1;
        return 0;
    case TP_EV_DISCONNECTED:
        return 1;
    default:
        return 0; /* our own completions */
    }
}

int perf_tp_serve(const perf_tp_opts_t *o, const eng_config_t *cfg, int addr_fd)
{
    perf_tp_conn_t c = {.ctx = perf_tp_open(o->provider, cfg)};
    tp_listener_t *l = NULL;
    if (!c.ctx || tp_listen(c.ctx, o->bind, &l) != STRATA_OK)
        return 1;
    const char *addr = tp_listener_addr(l);
    if (addr_fd >= 0) {
        if (write(addr_fd, addr, strlen(addr) + 1) < 0)
            return 1;
        close(addr_fd);
    } else {
        printf("listening on %s (provider %s)\n", addr, o->provider);
        fflush(stdout);
    }
    tp_event_t ev;
    while (perf_tp_next(c.ctx, &ev, 3600 * 1000) && ev.type != TP_EV_ACCEPTED)
        ;
    c.ep = ev.ep;
    if (ev.type != TP_EV_ACCEPTED ||
        perf_tp_offer(c.ctx, c.ep, o->max_size, &c.mr) != 0)
        return 1;
    int rc = 0;
    while (rc == 0 && perf_tp_next(c.ctx, &ev, 3600 * 1000))
        rc = perf_tp_answer(&c, &ev);
    tp_close(c.ctx);
    return rc < 0;
}

int perf_tp_client_open(const perf_tp_opts_t *o, const eng_config_t *cfg,
                        perf_tp_conn_t *c)
{
    int timeout = (int)eng_config_int(cfg, ENG_CFG_TIMEOUT_MS);
    memset(c, 0, sizeof(*c));
    if (!(c->ctx = perf_tp_open(o->provider, cfg)) ||
        tp_connect(c->ctx, o->connect, NULL, &c->ep) != STRATA_OK)
        return -1;
    tp_event_t ev;
    if (!perf_tp_next(c->ctx, &ev, timeout)) {
        fprintf(stderr, "cannot connect to %s: no answer within %d ms\n",
                o->connect, timeout);
        return -1;
    }
    if (ev.type != TP_EV_CONNECTED || ev.status != STRATA_OK) {
        fprintf(stderr, "cannot connect to %s: %s\n", o->connect,
                tp_ep_error(c->ep)[0] ? tp_ep_error(c->ep)
                                      : strata_strerror(ev.status));
        return -1;
    }
    if (perf_tp_offer(c->ctx, c->ep, o->max_size, &c->mr) != 0)
        return -1;
    while (perf_tp_next(c->ctx, &ev, timeout))
        if (ev.type == TP_EV_RECV && ev.len == sizeof(c->peer)) {
            memcpy(&c->peer, ev.data, sizeof(c->peer));
            return 0;
        }
    fprintf(stderr, "the server sent no region descriptor\n");
    return -1;
}

void perf_tp_client_close(perf_tp_conn_t *c)
{
    if (c->ctx)
        tp_close(c->ctx);
}
