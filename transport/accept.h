/*
 * A listener whose accept() runs out of descriptors (EMFILE, ENFILE) or
 * memory leaves the connection in the backlog and stops polling for a
 * while, rather than being woken, and failing, on every progress call. The
 * pause doubles from 10 ms to 1 s while the shortage lasts; it is logged
 * once per shortage. Shared by the tcp and shm providers.
 */
#ifndef STRATA_TRANSPORT_ACCEPT_H
#define STRATA_TRANSPORT_ACCEPT_H

#include <stdbool.h>
#include <stdint.h>

typedef struct tp_accept_pause {
    uint64_t resume_ns; /* 0: polled */
    unsigned pause_ms;  /* 0: no shortage */
} tp_accept_pause_t;

/* accept() on the listener of provider prov at addr failed with err (not
 * EAGAIN, EINTR or ECONNABORTED): true when the caller must stop polling it
 * until p->resume_ns; false when err is not a shortage (logged as a warning).
 */
bool tp_accept_failed(tp_accept_pause_t *p, const char *prov, const char *addr,
                      int err);
/* A connection was accepted: a shortage, if any, is over. */
void tp_accept_ok(tp_accept_pause_t *p, const char *prov, const char *addr);
/* Whether a paused listener is due to be polled again at now_ns; clears
 * resume_ns when it is. */
bool tp_accept_due(tp_accept_pause_t *p, uint64_t now_ns);
/* The earlier of a deadline (0: none) and p's resume time (0: none). */
uint64_t tp_accept_first(const tp_accept_pause_t *p, uint64_t first);

#endif /* STRATA_TRANSPORT_ACCEPT_H */
