/*
 * Failures and recoveries of a job, as the engine's coordinator reports
 * them in its messages (a worker dropped, a worker back): the driver reads
 * the job's standard error, passes every line on, and prints one line of
 * its own per event beside the progress lines.
 */
#ifndef STRATA_PERF_TRAIN_EVENTS_H
#define STRATA_PERF_TRAIN_EVENTS_H

#include <stddef.h>

typedef struct perf_events {
    int fd; /* the job's standard error, non-blocking; -1: none */
    const char *policy;
    char buf[8192];
    size_t len;
    int failures, recoveries;
} perf_events_t;

/* Read what the job wrote; t: seconds of training so far (its events'
 * time). */
void perf_events_drain(perf_events_t *e, double t);

#endif /* STRATA_PERF_TRAIN_EVENTS_H */
