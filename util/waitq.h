/*
 * Parking without a lock: a thread waits for a condition other threads make
 * true, and sleeps in the kernel (futex) instead of spinning. Publishers pay
 * one atomic increment per wake-up and a system call only when a thread is
 * actually parked.
 *
 * util_gate_t builds on it: a 64-bit value that only grows, which one thread
 * raises (a progress thread delivering a model version or a clock) while
 * others park until it reaches a target (the application thread).
 *
 * No wake-up is lost: a waiter announces itself (waiters++), reads the
 * sequence number, then evaluates its condition; a publisher makes the
 * condition true, bumps the sequence number, then reads waiters. All four are
 * sequentially consistent, so either the waiter sees the condition, or the
 * publisher sees the waiter and the kernel's compare of the sequence number
 * refuses to sleep on a stale value (model-checked: tests/model/tracker.pml).
 */
#ifndef STRATA_UTIL_WAITQ_H
#define STRATA_UTIL_WAITQ_H

#include <stdatomic.h>
#include <stdint.h>

#include <strata/strata.h>

typedef struct util_waitq {
    _Atomic uint32_t seq;     /* the futex word: bumped by every wake */
    _Atomic uint32_t waiters; /* threads inside util_waitq_wait */
} util_waitq_t;

void util_waitq_init(util_waitq_t *q);

/* Call after making some waiter's condition true. */
void util_waitq_wake(util_waitq_t *q);

/* A waiter's condition: STRATA_ERR_AGAIN while it does not hold yet; any
 * other status ends the wait and is returned (STRATA_OK, or an error such as
 * STRATA_ERR_CANCELED when the awaited thing can no longer happen). */
typedef strata_status_t (*util_waitq_cond_fn)(void *arg);

/* A pause in a spin loop. */
static inline void util_waitq_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Waits until cond(arg) returns something other than STRATA_ERR_AGAIN, or
 * returns STRATA_ERR_TIMEOUT after timeout_ms (0: evaluate once). Spins
 * briefly before parking. Does not log: the caller knows what it waited for. */
strata_status_t util_waitq_wait(util_waitq_t *q, util_waitq_cond_fn cond,
                                void *arg, int64_t timeout_ms);
/* What a polling wait does between two looks at its condition. NULL:
 * yield the core. A waiter that can make the condition true itself (turn
 * the loop that would deliver it) passes that, yielding when it found
 * nothing to do. */
typedef void (*util_waitq_poll_fn)(void *poll_arg);

/* util_waitq_wait that, after the brief spin, polls on for up to spin_ns
 * (within the timeout; once at least), calling poll between polls, before
 * it parks: for a wait that usually ends within a few context switches on
 * a shared core, where parking would add the futex's wake-up to it. */
strata_status_t util_waitq_wait_spin(util_waitq_t *q, util_waitq_cond_fn cond,
                                     void *arg, int64_t timeout_ms,
                                     uint64_t spin_ns, util_waitq_poll_fn poll,
                                     void *poll_arg);

/* ---- gate: a monotone value one can wait on ---- */

typedef struct util_gate {
    _Atomic int64_t value;
    _Atomic int status; /* STRATA_OK, or why waiting is pointless */
    util_waitq_t q;
} util_gate_t;

void util_gate_init(util_gate_t *g, int64_t value);

static inline int64_t util_gate_load(const util_gate_t *g)
{
    return atomic_load((_Atomic int64_t *)&g->value);
}

/* value = max(value, v); wakes waiters when it grew. Returns the value after
 * the call. Any thread may raise. */
int64_t util_gate_raise(util_gate_t *g, int64_t v);

/* Every current and future wait returns status (not STRATA_OK), e.g.
 * STRATA_ERR_PEER when the peer that would raise the gate died. */
void util_gate_fail(util_gate_t *g, strata_status_t status);

/* Parks until value >= target (STRATA_OK), the gate fails (its status) or
 * timeout_ms passes (STRATA_ERR_TIMEOUT). Does not log. */
strata_status_t util_gate_wait(util_gate_t *g, int64_t target,
                               int64_t timeout_ms);
/* util_gate_wait polling up to spin_ns first (util_waitq_wait_spin). */
strata_status_t util_gate_wait_spin(util_gate_t *g, int64_t target,
                                    int64_t timeout_ms, uint64_t spin_ns,
                                    util_waitq_poll_fn poll, void *poll_arg);

#endif /* STRATA_UTIL_WAITQ_H */
