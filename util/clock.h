/* Monotonic time and the timerfd that wakes a provider at a deadline. */
#ifndef STRATA_UTIL_CLOCK_H
#define STRATA_UTIL_CLOCK_H

#include <stdint.h>
#include <sys/timerfd.h>
#include <time.h>

static inline uint64_t util_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Arms tfd (CLOCK_MONOTONIC) for deadline_ns; 0 disarms it. */
static inline int util_timer_arm(int tfd, uint64_t deadline_ns)
{
    struct itimerspec its = {0};
    if (deadline_ns) {
        its.it_value.tv_sec = (time_t)(deadline_ns / 1000000000u);
        its.it_value.tv_nsec = (long)(deadline_ns % 1000000000u);
    }
    return timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

#endif /* STRATA_UTIL_CLOCK_H */
