/*
 * The coordinator's state, shared by its two files (private to them):
 *   coord.c         admission, the layout check, leaving, metrics
 *   coord_policy.c  the policies' part: the ESync State Server's queries,
 *                   dropping workers that died or fell silent
 *   coord_regroup.c GSSP: epochs, grouping by speed, regrouping
 */
#ifndef STRATA_ENGINE_COORD_H
#define STRATA_ENGINE_COORD_H

#include "engine/engine.h"
#include "engine/layout_wire.h"
#include "engine/state_server.h"

typedef struct eng_member {
    eng_peer_t peer;
    struct eng_member *next; /* every accepted connection */
    bool hello, bye;
    bool dropped;         /* a worker the job goes on without (esync, fedavg) */
    const char *drop_why; /* a static string: why it was dropped */
    int pid;
    char host_id[ENG_HOST_ID_MAX];
    eng_agg_info_t info;
    eng_layout_rx_t layout;
    bool layout_checked;
    char *metrics;                /* JSON from BYE */
    char name[ENG_PEER_NAME_MAX]; /* eng_member_name's, after HELLO */
} eng_member_t;

struct eng_coord {
    eng_member_t *members;
    eng_member_t **by_rank; /* [size], after HELLO */
    int nhello, nbye, nlayouts;
    bool layout_sent;
    eng_state_server_t *ss; /* esync */
    struct eng_regroup *rg; /* gssp */
};

/* "rank 5 (pid 123 on host)" once it said HELLO, else its peer's name. */
const char *eng_member_name(eng_member_t *m);

/* ---- coord_policy.c ---- */

strata_status_t eng_coord_policy_create(strata_ctx_t *ctx);
void eng_coord_policy_free(strata_ctx_t *ctx);
/* Every worker committed: training starts (the State Server's round 0). */
void eng_coord_policy_start(strata_ctx_t *ctx);
/* A worker's QUERY to the State Server. */
void eng_coord_on_query(strata_ctx_t *ctx, eng_member_t *m, eng_rbuf_t *r);
/* Whether a lost member is dropped (the job goes on) rather than fatal. */
bool eng_coord_drop_lost(strata_ctx_t *ctx, eng_member_t *m, const char *why);

/* ---- coord_regroup.c ---- */

typedef struct eng_regroup eng_regroup_t;
strata_status_t eng_coord_regroup_create(strata_ctx_t *ctx);
void eng_coord_regroup_free(strata_ctx_t *ctx);
void eng_coord_on_epoch(strata_ctx_t *ctx, eng_member_t *m, eng_rbuf_t *r);
void eng_coord_on_frozen(strata_ctx_t *ctx, eng_member_t *m, eng_rbuf_t *r);
void eng_coord_on_planned(strata_ctx_t *ctx, eng_member_t *m, eng_rbuf_t *r);
/* A worker's last clock, before its BYE. */
void eng_coord_on_final(strata_ctx_t *ctx, eng_member_t *m, eng_rbuf_t *r);
/* A worker finalized: it no longer takes part in groupings. */
void eng_coord_regroup_left(strata_ctx_t *ctx, eng_member_t *m);

#endif /* STRATA_ENGINE_COORD_H */
