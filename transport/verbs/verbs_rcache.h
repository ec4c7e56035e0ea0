/*
 * Registration cache: memory registrations over whole pages, shared and
 * reference counted. A request inside a page range already registered with
 * at least the access it needs takes a reference on that registration
 * instead of registering again; the registration is released when its last
 * reference goes. Nothing stays registered without a reference, so freed and
 * reused memory can never hit a stale registration.
 *
 * The device calls are behind two function pointers, so that the logic is
 * tested without a device. Not thread-safe: a context is driven by one
 * thread (transport.h).
 */
#ifndef STRATA_TRANSPORT_VERBS_RCACHE_H
#define STRATA_TRANSPORT_VERBS_RCACHE_H

#include <stddef.h>
#include <stdint.h>

#include <strata/strata.h>

typedef struct tp_verbs_reg {
    uintptr_t start, end; /* page-aligned [start, end) */
    unsigned access;      /* TP_ACCESS_* */
    unsigned refs;
    void *handle; /* struct ibv_mr * */
    uint32_t lkey, rkey;
} tp_verbs_reg_t;

typedef struct tp_verbs_rcache_ops {
    /* Register [addr, addr + len) (page-aligned) with access; fill the
     * handle and keys of reg. Logs its own errors. */
    strata_status_t (*reg)(void *arg, void *addr, size_t len, unsigned access,
                           tp_verbs_reg_t *reg);
    void (*dereg)(void *arg, tp_verbs_reg_t *reg);
    void *arg;
} tp_verbs_rcache_ops_t;

typedef struct tp_verbs_rcache {
    tp_verbs_rcache_ops_t ops;
    size_t page;
    tp_verbs_reg_t **regs; /* sorted by start */
    size_t n, cap;
} tp_verbs_rcache_t;

void tp_verbs_rcache_init(tp_verbs_rcache_t *rc,
                          const tp_verbs_rcache_ops_t *ops, size_t page);
/* Releases whatever is still registered (logging each as a leak). */
void tp_verbs_rcache_fini(tp_verbs_rcache_t *rc);

/* A registration covering [addr, addr + len) with at least access, with one
 * more reference. */
strata_status_t tp_verbs_rcache_get(tp_verbs_rcache_t *rc, void *addr,
                                    size_t len, unsigned access,
                                    tp_verbs_reg_t **reg_out);
void tp_verbs_rcache_put(tp_verbs_rcache_t *rc, tp_verbs_reg_t *reg);

/* The registration covering [addr, addr + len) with at least access, without
 * taking a reference; NULL if none. */
tp_verbs_reg_t *tp_verbs_rcache_lookup(const tp_verbs_rcache_t *rc,
                                       const void *addr, size_t len,
                                       unsigned access);

#endif /* STRATA_TRANSPORT_VERBS_RCACHE_H */
