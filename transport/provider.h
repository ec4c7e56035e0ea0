/*
 * What a transport provider implements: the ops table behind transport.h.
 * Private to the transport module (transport.c and the providers).
 *
 * A provider embeds the base structs below as the FIRST member of its own
 * context, endpoint, region and listener structs, and casts back with
 * container_of-style helpers. transport.c validates arguments common to all
 * providers (NULLs, ranges against the region lengths it can see, message
 * sizes) before dispatching, so providers check only what is theirs.
 */
#ifndef STRATA_TRANSPORT_PROVIDER_H
#define STRATA_TRANSPORT_PROVIDER_H

#include "transport/transport.h"

typedef struct tp_ops tp_ops_t;

struct tp_ctx {
    const tp_ops_t *ops;
    unsigned caps;
    int timeout_ms; /* STRATA_TIMEOUT_MS */
};

struct tp_mr {
    tp_ctx_t *ctx;
    void *addr;
    size_t len;
    unsigned access;
};

struct tp_listener {
    tp_ctx_t *ctx;
    char addr[128]; /* what peers pass to tp_connect() */
};

struct tp_ep {
    tp_ctx_t *ctx;
    void *user;     /* tp_ep_ctx() */
    char peer[128]; /* tp_ep_peer() */
    char why[256];  /* tp_ep_error() */
};

struct tp_ops {
    const char *name;
    /* Quiet probe: compiled in and a usable device present. */
    bool (*available)(void);
    /* Fills the base struct (ops, caps, timeout_ms) of its own context. */
    strata_status_t (*open)(const tp_params_t *params, tp_ctx_t **ctx_out);
    void (*close)(tp_ctx_t *ctx);

    strata_status_t (*mr_reg)(tp_ctx_t *ctx, void *addr, size_t len,
                              unsigned access, tp_mr_t **mr_out);
    strata_status_t (*mem_alloc)(tp_ctx_t *ctx, size_t len, unsigned access,
                                 void **addr_out, tp_mr_t **mr_out);
    void (*mr_dereg)(tp_mr_t *mr);
    strata_status_t (*mr_export)(tp_mr_t *mr, tp_ep_t *ep,
                                 tp_rdesc_t *desc_out);
    /* NULL without TP_CAP_PEER_MAP; the range is checked against desc. */
    strata_status_t (*peer_map)(tp_ep_t *ep, const tp_rdesc_t *desc,
                                uint64_t off, size_t len,
                                const void **addr_out);

    strata_status_t (*listen)(tp_ctx_t *ctx, const char *bind,
                              tp_listener_t **listener_out);
    void (*listener_close)(tp_listener_t *listener);
    strata_status_t (*connect)(tp_ctx_t *ctx, const char *addr,
                               tp_ep_t **ep_out);
    void (*ep_close)(tp_ep_t *ep);

    strata_status_t (*write)(tp_ep_t *ep, tp_mr_t *mr, size_t off,
                             const tp_rdesc_t *dst, uint64_t dst_off,
                             size_t len, uint32_t imm, unsigned flags,
                             void *op_ctx);
    strata_status_t (*send)(tp_ep_t *ep, const void *buf, size_t len,
                            void *op_ctx);
    strata_status_t (*progress)(tp_ctx_t *ctx, tp_event_t *events, int max,
                                int *n_out);
    int (*wait_fd)(const tp_ctx_t *ctx);
    strata_status_t (*wait_arm)(tp_ctx_t *ctx);
};

/* The providers, defined in their own files. A provider whose dependencies
 * were not found at build time is replaced by a file defining the same table
 * whose open() reports "not compiled in". */
extern const tp_ops_t tp_verbs_ops;
extern const tp_ops_t tp_tcp_ops;
extern const tp_ops_t tp_shm_ops;

#endif /* STRATA_TRANSPORT_PROVIDER_H */
