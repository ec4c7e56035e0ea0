/*
 * A worker's own step time, measured by its engine from what it sees
 * anyway: when each clock's model landed, and when the application pushed
 * the last tensor of each clock. A step runs from the later of the previous
 * push and the newest model that had landed when it pushed, to its push:
 * the time the application computed, without the time it waited for the
 * model (in a synchronous group that wait is the slowest member's step, and
 * would make every member look as slow). The first step (clock 0) also
 * holds whatever the application did after its commit, and is not counted.
 *
 * The estimate is the median of the steps that ended in the last
 * ENG_STEPTIME_SPAN_MS, and at least of the last ENG_STEPTIME_MIN_STEPS:
 * a few steps stretched by the scheduler move nothing (a fast worker's
 * window holds a dozen steps), and a lasting change of speed shows after
 * three steps of a slow worker. Pure logic, one thread (the worker's
 * progress thread).
 */
#ifndef STRATA_ENGINE_STEPTIME_H
#define STRATA_ENGINE_STEPTIME_H

#include <stdbool.h>
#include <stdint.h>

#define ENG_STEPTIME_MIN_STEPS 5
#define ENG_STEPTIME_SPAN_MS 200
/* Steps remembered: a span of a 3 ms worker's steps. */
#define ENG_STEPTIME_RING 64
/* Models remembered: a worker pushes at most two clocks past its model. */
#define ENG_STEPTIME_LANDED 4

typedef struct eng_steptime {
    uint64_t landed_ns[ENG_STEPTIME_LANDED]; /* by clock % LANDED */
    int64_t landed;                          /* newest clock landed, -1 */
    uint64_t pushed_ns;                      /* the last clock's push */
    int64_t pushed;                          /* that clock, -1 */
    double step[ENG_STEPTIME_RING];          /* the last steps, seconds */
    uint64_t end_ns[ENG_STEPTIME_RING];      /* ... and when each ended */
    uint64_t steps;                          /* steps measured */
} eng_steptime_t;

void eng_steptime_init(eng_steptime_t *s);

/* The model of `clock` landed at ns (clocks arrive in order). */
void eng_steptime_landed(eng_steptime_t *s, int64_t clock, uint64_t ns);

/* The application pushed the last tensor of `clock` at ns (clocks in
 * order); true when that measured a step. */
bool eng_steptime_pushed(eng_steptime_t *s, int64_t clock, uint64_t ns);

/* The median of the recent steps at now_ns, in seconds (0 before the
 * first). */
double eng_steptime_estimate(const eng_steptime_t *s, uint64_t now_ns);

#endif /* STRATA_ENGINE_STEPTIME_H */
