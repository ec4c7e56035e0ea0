/* One line per failure and recovery of a job (events.h). */
#include "perf/train/events.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The coordinator's lines of an aggregator lost and its shard taken over
 * (engine/coord_protect.c):
 *   aggregator rank A (...) ...; its shard is rebuilt at clock P by
 *     aggregator rank T, which takes it over
 *   aggregator rank A (...) ...; shard A taken over by aggregator rank T,
 *     resumed at clock R (protected at P: ...), X ms after the loss
 * True if the line was one of them. */
static bool perf_agg_event(perf_events_t *e, const char *line, double t)
{
    const char *a = strstr(line, "aggregator rank ");
    const char *rb = strstr(line, "; its shard is rebuilt at clock ");
    const char *tk = strstr(line, " taken over by aggregator rank ");
    int rank, taker;
    long long p, r;
    double ms;
    if (!a || sscanf(a, "aggregator rank %d", &rank) != 1)
        return false;
    if (rb && sscanf(rb,
                     "; its shard is rebuilt at clock %lld by aggregator "
                     "rank %d",
                     &p, &taker) == 2) {
        e->failures++;
        printf("%-12s %7.2f s  failure: aggregator rank %d lost, its shard "
               "rebuilt at clock %lld by aggregator rank %d\n",
               e->policy, t, rank, p, taker);
    } else if (tk &&
               sscanf(tk,
                      " taken over by aggregator rank %d, resumed "
                      "at clock %lld (protected at %lld",
                      &taker, &r, &p) == 3 &&
               (a = strstr(tk, "), ")) && sscanf(a, "), %lf ms", &ms) == 1) {
        e->recoveries++;
        printf("%-12s %7.2f s  recovery: aggregator rank %d's shard taken "
               "over by aggregator rank %d at clock %lld, %lld of its clocks "
               "lost (%lld to %lld), %.0f ms after the loss\n",
               e->policy, t, rank, taker, r, r - p, p, r - 1, ms);
    } else {
        return false;
    }
    fflush(stdout);
    return true;
}

/* The coordinator's lines (engine/coord_policy.c, engine/coord_rejoin.c):
 *   worker rank R (...) dropped: its first B clocks count, none from clock
 *     B on (lost); N workers train on, ...
 *   worker rank R (...) rejoined: it trains from clock J; clocks B to J-1
 *     of its rank were lost; N workers train on, ... */
static void perf_event(perf_events_t *e, const char *line, double t)
{
    if (perf_agg_event(e, line, t))
        return;
    const char *w = strstr(line, "worker rank ");
    int rank, live;
    long long b, j;
    if (!w || sscanf(w, "worker rank %d", &rank) != 1)
        return;
    const char *d = strstr(w, ") dropped: its first ");
    const char *r = strstr(w, ") rejoined: it trains from clock ");
    const char *n = strstr(w, "; ");
    if (d && sscanf(d, ") dropped: its first %lld clocks count", &b) == 1 &&
        (n = strstr(d, "(lost); ")) &&
        sscanf(n, "(lost); %d workers train on", &live) == 1) {
        e->failures++;
        printf("%-12s %7.2f s  failure: worker rank %d lost, its clocks "
               "from %lld on do not count; %d workers train on\n",
               e->policy, t, rank, b, live);
    } else if (r &&
               sscanf(r, ") rejoined: it trains from clock %lld", &j) == 1 &&
               (n = strstr(r, "; clocks ")) &&
               sscanf(n, "; clocks %lld to", &b) == 1 &&
               (n = strstr(n, "were lost; ")) &&
               sscanf(n, "were lost; %d workers train on", &live) == 1) {
        e->recoveries++;
        printf("%-12s %7.2f s  recovery: worker rank %d back at clock %lld, "
               "%lld of its clocks lost (%lld to %lld); %d workers train "
               "on\n",
               e->policy, t, rank, j, j - b, b, j - 1, live);
    } else {
        return;
    }
    fflush(stdout);
}

void perf_events_drain(perf_events_t *e, double t)
{
    if (e->fd < 0)
        return;
    for (;;) {
        ssize_t n = read(e->fd, e->buf + e->len, sizeof(e->buf) - 1 - e->len);
        if (n <= 0)
            return;
        e->len += (size_t)n;
        char *start = e->buf, *nl;
        while ((nl = memchr(start, '\n', e->len - (size_t)(start - e->buf)))) {
            *nl = '\0';
            fprintf(stderr, "%s\n", start); /* passed on as it was */
            perf_event(e, start, t);
            start = nl + 1;
        }
        e->len -= (size_t)(start - e->buf);
        memmove(e->buf, start, e->len);
        if (e->len == sizeof(e->buf) - 1) { /* a line too long: as it is */
            fwrite(e->buf, 1, e->len, stderr);
            e->len = 0;
        }
    }
}
