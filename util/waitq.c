/* Lock-free parking on a futex word, and monotone gates built on it. */
#include "util/waitq.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"

/* Polls of the condition before parking: a few microseconds, enough to catch
 * a wake-up that is already on its way without a system call. */
#define UTIL_WAITQ_SPINS 256

/* Sleeps while *word == expect, until woken or the absolute CLOCK_MONOTONIC
 * deadline. Returns 0, or ETIMEDOUT; EAGAIN/EINTR count as spurious. */
static int util_futex_wait(_Atomic uint32_t *word, uint32_t expect,
                           const struct timespec *deadline)
{
    long rc = syscall(SYS_futex, (uint32_t *)word,
                      FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, expect, deadline,
                      NULL, FUTEX_BITSET_MATCH_ANY);
    return rc == 0 || errno != ETIMEDOUT ? 0 : ETIMEDOUT;
}

static void util_futex_wake_all(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE | FUTEX_PRIVATE_FLAG,
            INT_MAX, NULL, NULL, 0);
}

void util_waitq_init(util_waitq_t *q)
{
    atomic_init(&q->seq, 0);
    atomic_init(&q->waiters, 0);
}

void util_waitq_wake(util_waitq_t *q)
{
    atomic_fetch_add(&q->seq, 1);
    if (atomic_load(&q->waiters) != 0)
        util_futex_wake_all(&q->seq);
}

static struct timespec util_deadline_after(int64_t timeout_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(timeout_ms / 1000);
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* The parked part of util_waitq_wait: the protocol the header describes. */
static strata_status_t util_waitq_park(util_waitq_t *q, util_waitq_cond_fn cond,
                                       void *arg, int64_t timeout_ms)
{
    struct timespec deadline = util_deadline_after(timeout_ms);
    strata_status_t st;

    atomic_fetch_add(&q->waiters, 1);
    for (;;) {
        uint32_t seq = atomic_load(&q->seq);
        st = cond(arg);
        if (st != STRATA_ERR_AGAIN)
            break;
        if (util_futex_wait(&q->seq, seq, &deadline) == ETIMEDOUT) {
            st = cond(arg);
            if (st == STRATA_ERR_AGAIN)
                st = STRATA_ERR_TIMEOUT;
            break;
        }
    }
    atomic_fetch_sub(&q->waiters, 1);
    return st;
}

strata_status_t util_waitq_wait_spin(util_waitq_t *q, util_waitq_cond_fn cond,
                                     void *arg, int64_t timeout_ms,
                                     uint64_t spin_ns, util_waitq_poll_fn poll,
                                     void *poll_arg)
{
    strata_status_t st = cond(arg);
    if (st != STRATA_ERR_AGAIN)
        return st;
    if (timeout_ms <= 0)
        return STRATA_ERR_TIMEOUT;
    for (int i = 0; i < UTIL_WAITQ_SPINS; i++) {
        util_waitq_cpu_relax();
        st = cond(arg);
        if (st != STRATA_ERR_AGAIN)
            return st;
    }
    if (spin_ns) {
        uint64_t start = util_now_ns(), bound = (uint64_t)timeout_ms * 1000000u;
        uint64_t until = start + (spin_ns < bound ? spin_ns : bound);
        do {
            if (poll)
                poll(poll_arg);
            else
                sched_yield();
            st = cond(arg);
            if (st != STRATA_ERR_AGAIN)
                return st;
        } while (util_now_ns() < until);
        uint64_t spent_ms = (util_now_ns() - start) / 1000000u;
        timeout_ms = spent_ms < (uint64_t)timeout_ms
                         ? timeout_ms - (int64_t)spent_ms
                         : 1;
    }
    return util_waitq_park(q, cond, arg, timeout_ms);
}

strata_status_t util_waitq_wait(util_waitq_t *q, util_waitq_cond_fn cond,
                                void *arg, int64_t timeout_ms)
{
    return util_waitq_wait_spin(q, cond, arg, timeout_ms, 0, NULL, NULL);
}

/* ---- gates ---- */

void util_gate_init(util_gate_t *g, int64_t value)
{
    atomic_init(&g->value, value);
    atomic_init(&g->status, STRATA_OK);
    util_waitq_init(&g->q);
}

int64_t util_gate_raise(util_gate_t *g, int64_t v)
{
    int64_t cur = atomic_load(&g->value);
    while (cur < v)
        if (atomic_compare_exchange_weak(&g->value, &cur, v)) {
            util_waitq_wake(&g->q);
            return v;
        }
    return cur;
}

void util_gate_fail(util_gate_t *g, strata_status_t status)
{
    atomic_store(&g->status, (int)status);
    util_waitq_wake(&g->q);
}

typedef struct util_gate_wait_arg {
    util_gate_t *g;
    int64_t target;
} util_gate_wait_arg_t;

static strata_status_t util_gate_reached(void *arg)
{
    util_gate_wait_arg_t *a = arg;
    if (atomic_load(&a->g->value) >= a->target)
        return STRATA_OK;
    strata_status_t st = (strata_status_t)atomic_load(&a->g->status);
    return st != STRATA_OK ? st : STRATA_ERR_AGAIN;
}

strata_status_t util_gate_wait_spin(util_gate_t *g, int64_t target,
                                    int64_t timeout_ms, uint64_t spin_ns,
                                    util_waitq_poll_fn poll, void *poll_arg)
{
    util_gate_wait_arg_t a = {g, target};
    return util_waitq_wait_spin(&g->q, util_gate_reached, &a, timeout_ms,
                                spin_ns, poll, poll_arg);
}

strata_status_t util_gate_wait(util_gate_t *g, int64_t target,
                               int64_t timeout_ms)
{
    return util_gate_wait_spin(g, target, timeout_ms, 0, NULL, NULL);
}
