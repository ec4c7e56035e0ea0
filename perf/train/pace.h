/*
 * Heterogeneity without stealing CPU: each step of a worker with slowdown
 * factor f is padded by sleeping until f x base (x 1 +- jitter) after it
 * began. The base sits above the real compute time, so every worker's pace
 * is set by its factor, not by how the cores happen to be shared.
 */
#ifndef STRATA_PERF_TRAIN_PACE_H
#define STRATA_PERF_TRAIN_PACE_H

#include <stdint.h>

#include "perf/train/rng.h"

typedef struct perf_pace {
    double step_s; /* factor x base */
    double jitter;
    perf_rng_t rng;
    int64_t begin_ns;
    uint64_t steps;
    uint64_t overruns; /* steps whose compute alone exceeded the padding */
    double compute_s;  /* summed compute time, before padding */
    double last_s;     /* the last step, padding included */
    double paced_s;    /* summed step time, padding included */
} perf_pace_t;

void perf_pace_init(perf_pace_t *p, double factor, double base_s, double jitter,
                    uint64_t seed);
void perf_pace_begin(perf_pace_t *p);
/* Sleep until this step's padded duration has passed since begin. */
void perf_pace_end(perf_pace_t *p);
/* From the next step on, steps take `factor` times as long. */
void perf_pace_slow_down(perf_pace_t *p, double factor);

/* CLOCK_MONOTONIC, the clock every process on the host shares. */
int64_t perf_now_ns(void);

#endif /* STRATA_PERF_TRAIN_PACE_H */
