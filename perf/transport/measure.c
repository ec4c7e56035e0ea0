/*
 * The two measurements. Bandwidth: a window of writes kept in flight, the
 * last with an immediate the server answers, timed from the first post to
 * that answer. Latency: ping-pong of writes with immediates, half the round
 * trip, median over the iterations (perftest's t_typical).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include "perf/transport/bench.h"
#include "util/alloc.h"

#define PERF_TIMEOUT_MS 60000

/* Timestamps of single ping-pongs: the TSC on x86, as perftest, since
 * clock_gettime() can be a system call reading a device (the HPET of a TCG
 * guest, whose TSC is "unstable"), slow and serialised in the emulator;
 * converted with the CLOCK_MONOTONIC time of the whole run. */
static uint64_t perf_ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return __rdtsc();
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
}

static double perf_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Iterations moving about budget bytes, within [lo, hi]. */
static uint64_t perf_iters(size_t bytes, double budget, uint64_t lo,
                           uint64_t hi, bool quick)
{
    double n = budget / (double)(bytes ? bytes : 1);
    if (quick)
        n /= 10, hi /= 10, lo = lo > 4 ? lo / 2 : lo;
    return n < (double)lo ? lo : n > (double)hi ? hi : (uint64_t)n;
}

/* iters writes of r->bytes, the last one answered; seconds taken. */
static int perf_bw_run(perf_tp_conn_t *c, size_t bytes, uint64_t iters,
                       int window, double *secs_out)
{
    uint64_t posted = 0, done = 0;
    bool acked = false;
    double t0 = perf_now_s();
    while (done < iters || !acked) {
        while (posted < iters && posted - done < (uint64_t)window) {
            bool last = posted == iters - 1;
            strata_status_t st = tp_write(c->ep, c->mr, 0, &c->peer, 0, bytes,
                                          last ? PERF_IMM_BW_LAST : 0,
                                          last ? TP_WRITE_IMM : 0, NULL);
            if (st == STRATA_ERR_AGAIN)
                break;
            if (st != STRATA_OK)
                return -1;
            posted++;
        }
        tp_event_t ev;
        if (!perf_tp_next(c->ctx, &ev, PERF_TIMEOUT_MS))
            return -1;
        if (ev.type == TP_EV_WRITE_DONE && ev.status == STRATA_OK)
            done++;
        else if (ev.type == TP_EV_RECV)
            acked = true;
        else if (ev.type != TP_EV_SEND_DONE)
            return -1;
    }
    *secs_out = perf_now_s() - t0;
    return 0;
}

int perf_tp_measure_bw(perf_tp_conn_t *c, const perf_tp_opts_t *o,
                       perf_tp_result_t *r)
{
    r->bw_iters =
        o->iters ? o->iters : perf_iters(r->bytes, 1e9, 16, 100000, o->quick);
    double secs;
    if (perf_bw_run(c, r->bytes, r->bw_iters / 8 + 1, o->window, &secs) ||
        perf_bw_run(c, r->bytes, r->bw_iters, o->window, &secs)) {
        fprintf(stderr, "bandwidth run of %zu bytes failed\n", r->bytes);
        return -1;
    }
    r->bw_gbps = (double)r->bytes * (double)r->bw_iters * 8 / secs / 1e9;
    r->mpps = (double)r->bw_iters / secs / 1e6;
    return 0;
}

/* One ping-pong; the one-way time in microseconds. */
static int perf_ping(perf_tp_conn_t *c, size_t bytes, uint32_t seq,
                     uint64_t *ticks_out)
{
    uint64_t t0 = perf_ticks();
    uint32_t imm = PERF_IMM_LAT | (seq & 0xffffff);
    if (tp_write(c->ep, c->mr, 0, &c->peer, 0, bytes, imm, TP_WRITE_IMM,
                 NULL) != STRATA_OK)
        return -1;
    for (;;) {
        tp_event_t ev;
        if (!perf_tp_next(c->ctx, &ev, PERF_TIMEOUT_MS))
            return -1;
        if (ev.type == TP_EV_WRITE_IMM && ev.imm == imm)
            break;
        /* Our own completions (the descriptor we sent may complete late). */
        if ((ev.type != TP_EV_WRITE_DONE && ev.type != TP_EV_SEND_DONE) ||
            ev.status != STRATA_OK)
            return -1;
    }
    *ticks_out = perf_ticks() - t0;
    return 0;
}

static int perf_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int perf_tp_measure_lat(perf_tp_conn_t *c, const perf_tp_opts_t *o,
                        perf_tp_result_t *r)
{
    uint64_t warm = 16;
    r->lat_iters =
        o->iters ? o->iters : perf_iters(r->bytes, 256e6, 8, 5000, o->quick);
    double *t = util_malloc(r->lat_iters * sizeof(*t)), sum = 0;
    if (!t)
        return -1;
    double s0 = perf_now_s();
    uint64_t k0 = perf_ticks();
    for (uint64_t i = 0; i < warm + r->lat_iters; i++) {
        uint64_t rt;
        if (perf_ping(c, r->bytes, (uint32_t)i, &rt) != 0) {
            fprintf(stderr, "latency run of %zu bytes failed\n", r->bytes);
            util_free(t);
            return -1;
        }
        if (i >= warm)
            sum += t[i - warm] = (double)rt;
    }
    double secs = perf_now_s() - s0;
    uint64_t ticks = perf_ticks() - k0;
    /* One-way microseconds: half a round trip. */
    double us_per_tick = secs * 1e6 / (double)(ticks ? ticks : 1) / 2;
    qsort(t, r->lat_iters, sizeof(*t), perf_cmp);
    r->lat_us = t[r->lat_iters / 2] * us_per_tick;
    r->lat_avg_us = sum / (double)r->lat_iters * us_per_tick;
    r->lat_p99_us = t[(r->lat_iters * 99) / 100] * us_per_tick;
    util_free(t);
    return 0;
}

int perf_tp_measure_memcpy(const perf_tp_opts_t *o, perf_tp_result_t *r)
{
    static char *src, *dst;
    if (!src) {
        src = util_aligned_alloc(4096, o->max_size);
        dst = util_aligned_alloc(4096, o->max_size);
        if (!src || !dst)
            return -1;
        memset(src, 1, o->max_size);
        memset(dst, 2, o->max_size);
    }
    uint64_t iters = perf_iters(r->bytes, 1e9, 16, 100000, o->quick);
    double t0 = perf_now_s();
    for (uint64_t i = 0; i < iters; i++) {
        memcpy(dst, src, r->bytes);
        /* Keep the compiler from merging or dropping the copies. */
        __asm__ volatile("" : : "r"(dst) : "memory");
    }
    double secs = perf_now_s() - t0;
    r->memcpy_gbps = (double)r->bytes * (double)iters * 8 / secs / 1e9;
    return 0;
}
