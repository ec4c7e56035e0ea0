/* Padding of every step to its worker's pace by an absolute-deadline sleep. */
#include <errno.h>
#include <time.h>

#include "perf/train/pace.h"

int64_t perf_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void perf_pace_init(perf_pace_t *p, double factor, double base_s, double jitter,
                    uint64_t seed)
{
    *p = (perf_pace_t){.step_s = factor * base_s, .jitter = jitter};
    perf_rng_seed(&p->rng, seed);
}

void perf_pace_slow_down(perf_pace_t *p, double factor)
{
    p->step_s *= factor;
}

void perf_pace_begin(perf_pace_t *p)
{
    p->begin_ns = perf_now_ns();
}

void perf_pace_end(perf_pace_t *p)
{
    double scale = 1.0 + p->jitter * (2.0 * perf_rng_uniform(&p->rng) - 1.0);
    int64_t deadline = p->begin_ns + (int64_t)(p->step_s * scale * 1e9);
    int64_t now = perf_now_ns();
    p->steps++;
    p->compute_s += (double)(now - p->begin_ns) * 1e-9;
    if (now >= deadline) {
        p->overruns++;
    } else {
        /* An absolute deadline: a signal that interrupts the sleep does
         * not stretch the step. */
        struct timespec ts = {deadline / 1000000000, deadline % 1000000000};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
               EINTR)
            ;
    }
    p->last_s = (double)(perf_now_ns() - p->begin_ns) * 1e-9;
    p->paced_s += p->last_s;
}
