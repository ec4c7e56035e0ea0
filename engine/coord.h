/*
 * The coordinator's state, shared by its two files (private to them):
 *   coord.c         admission, the layout check, leaving, metrics
 *   coord_policy.c  dropping workers that died or fell silent (every
 *                   policy), and the ESync State Server's queries
 *   coord_regroup.c gssp's part: epochs, grouping by speed, regrouping
 *   coord_protect.c shard protection: the protected clock, rebuilds,
 *                   takeovers
 */
#ifndef STRATA_ENGINE_COORD_H
#define STRATA_ENGINE_COORD_H

#include "engine/engine.h"
#include "engine/layout_wire.h"
#include "engine/state_server.h"
#include "util/log.h"

typedef struct eng_member {
    eng_peer_t peer;
    struct eng_member *next; /* every accepted connection */
    bool hello, bye;
    bool refused;       /* told REFUSED: it is to close the connection */
    bool dropped;       /* a worker the job goes on without */
    bool drop_queued;   /* ... whose boundary is still to be agreed */
    int64_t drop_at;    /* ... its clocks before this one count, -1 */
    int64_t drop_from;  /* ... one fewer worker live from this clock */
    char drop_why[320]; /* why it was dropped */
    /* A new process in the place of a dropped worker (coord_rejoin.c):
     * admitted, its clock still to be agreed (queued: not asked yet); the
     * boundary of the one it replaces; lost before it was in (why). */
    bool rejoining, rejoin_queued, rejoin_lost;
    bool rejoin_waited; /* told it waits for a lagging aggregator */
    int64_t rejoin_from, rejoin_shrunk; /* the old one's drop_at, drop_from */
    int pid;
    char host_id[ENG_HOST_ID_MAX];
    eng_agg_info_t info;
    eng_layout_rx_t layout;
    bool layout_checked;
    char *metrics; /* JSON from BYE */
    /* Shard protection (coord_protect.c): the named clock an aggregator
     * said its part of done (0: not yet), its snapshot's CRC32C then, and
     * at the agreed clock. */
    int64_t prot_said;
    uint32_t prot_crc, agreed_crc;
    /* A worker's LOSTs: per aggregator rank, the first clock it cannot
     * push without it (-1: its link there did not break; NULL: none did). */
    int64_t *lost_first;
    /* An aggregator lost once a clock was agreed: its shard is being
     * rebuilt by aggregator rank rebuild_by (rebuilt once REBUILT said
     * so), or was taken over; and how it was lost. */
    bool rebuilding, rebuilt, taken;
    int rebuild_by;
    bool took; /* took a shard over: its room for one more is used */
    char lost_why[384];
    char name[ENG_PEER_NAME_MAX]; /* eng_member_name's, after HELLO */
} eng_member_t;

struct eng_coord {
    eng_member_t *members;
    eng_member_t **by_rank; /* [size], after HELLO */
    int nhello, nbye, nlayouts;
    uint64_t last_hello_ns; /* when the latest rank joined */
    bool spans_hosts;       /* the ranks that joined first: on >1 host */
    char misfit[320];       /* the last HELLO refused as not fitting, "" */
    bool layout_sent;
    eng_state_server_t *ss; /* esync */
    struct eng_regroup *rg; /* gssp */
    /* Dropping workers, one at a time (coord_policy.c): the worker whose
     * boundary the aggregators are asked for (-1: none), their answers so
     * far and the newest clocks in them. */
    int dropping, drop_answers, ndropped;
    int64_t drop_pushed, drop_reached;
    /* Shard protection (coord_protect.c): the clock agreed (0: none yet),
     * the one named next, STRATA_PROTECT_EVERY, the newest clock the
     * aggregators said they reached since the last naming. Rebuilds (the
     * lost aggregators' own state is in their members): how many are
     * under way, when the first started and by when all must be done. */
    int64_t protected_clock, prot_next, prot_every, prot_reached;
    int nrebuilding;
    uint64_t rebuild_start_ns, rebuild_deadline_ns;
    /* Takeovers by the rebuilders: the first failure a takeover does not
     * mend ("": none), the shards taken over (nothing is protected after
     * them). */
    char unmended[TP_MSG_MAX + 64];
    int ntaken;
    bool prot_over; /* a takeover by an aggregator with a shard ended it */
    uint64_t held_until_ns; /* a failure held (0: none), and its words */
    char held_why[TP_MSG_MAX + 64];
    /* Rejoining, one at a time and never during a drop (coord_rejoin.c):
     * the worker being agreed (-1: none), answers, the newest clock. */
    int joining, join_answers;
    int64_t join_reached, join_any; /* its group's (gssp), any group's */
    bool join_lags; /* an aggregator still takes it back from before */
    eng_member_t *layout_ref; /* the first worker's, once accepted */
    bool ending;              /* a rank said BYE: nobody rejoins now */
};

/* "rank 5 (pid 123 on host)" once it said HELLO, else its peer's name. */
const char *eng_member_name(eng_member_t *m);

/* Tell a worker dropped from the job why: when it notices, or at once if
 * it is silent but connected (it reads it when it wakes). */
void eng_coord_send_dropped(eng_member_t *m);

/* A worker lost without BYE (why: how): once training started, and while
 * at least STRATA_MIN_WORKERS remain, it is dropped and the job goes on
 * (true). An aggregator, or a worker lost before, is false: the caller
 * fails the job. Below STRATA_MIN_WORKERS the job fails here (true). */
bool eng_coord_drop_lost(strata_ctx_t *ctx, eng_member_t *m, const char *why);
/* DROP_AT: an aggregator's answer to DROP_ASK. */
void eng_coord_on_drop_at(strata_ctx_t *ctx, eng_member_t *m, eng_rbuf_t *r);
/* Ask the aggregators about the next worker whose boundary is due. */
void eng_coord_drop_next(strata_ctx_t *ctx);
/* Send a message to every aggregator (what: its name, for errors). */
void eng_coord_tell_aggs(strata_ctx_t *ctx, eng_wbuf_t *msg, const char *what);
/* A lost aggregator's shard taken over from clock `from` on: each
 * worker's resume clock in at[] (the policy's, eng_coord_policy_t
 * takeover), the least and the latest of the live workers'; false: not
 * yet (a regroup under way ends first). */
bool eng_coord_resume_clocks(strata_ctx_t *ctx, int64_t from, int64_t *at,
                             int64_t *lo_out, int64_t *hi_out);

/* ---- coord_protect.c ---- */

void eng_coord_protect_init(strata_ctx_t *ctx);
/* PROTECTED: an aggregator's part of the named clock done, or missed. */
void eng_coord_on_protected(strata_ctx_t *ctx, eng_member_t *m, eng_rbuf_t *r);
/* A rank lost (msg: how and why). An aggregator once a clock is agreed:
 * its shard's rebuild starts (true), alongside those under way while the
 * fragments left allow it. A worker during a rebuild, or an aggregator
 * the protection cannot cover: the job fails (true). Otherwise false. */
bool eng_coord_protect_lost(strata_ctx_t *ctx, eng_member_t *m,
                            const char *msg);
/* FAILED from m: held (true) while a rebuild is under way (its end
 * decides) and, once a clock is agreed, a lost connection for a quarter of
 * STRATA_TIMEOUT_MS (the aggregator lost may be seen here after); the
 * first one held fails the job then, unless a rebuild started. A worker's
 * that said LOST is mended by the takeover; any other ends the job once
 * the shard is rebuilt. */
bool eng_coord_protect_hold(strata_ctx_t *ctx, eng_member_t *m,
                            strata_status_t st, const char *reason);
/* REBUILT: the rebuilder's outcome. */
void eng_coord_on_rebuilt(strata_ctx_t *ctx, eng_member_t *m, eng_rbuf_t *r);
/* LOST: a worker's link to an aggregator broke; the takeover follows once
 * the shard is rebuilt and every worker said so. */
void eng_coord_on_lost(strata_ctx_t *ctx, eng_member_t *m, eng_rbuf_t *r);
/* Aggregators in the job: all but those whose shard was taken over. */
static inline int eng_coord_naggs(const strata_ctx_t *ctx)
{
    return ctx->naggs - ctx->coord->ntaken;
}
/* The rebuilt shards go to their takers together once every lost one is
 * rebuilt, every worker still in the job said LOST of each, and no
 * regroup is under way (TAKEOVER); else later (asked again on each of
 * those). */
void eng_coord_takeover_try(strata_ctx_t *ctx);
/* Every beat: a rebuild past its deadline fails the job. */
void eng_coord_protect_check(strata_ctx_t *ctx);

/* ---- coord_rejoin.c ---- */

/* A HELLO of a rank already in the job, once every rank joined: admitted
 * in the place of a worker the job dropped, else refused naming why. */
void eng_coord_rejoin_hello(strata_ctx_t *ctx, eng_member_t *m, int rank,
                            eng_rbuf_t *r);
/* A worker was dropped: the coordinator listens again for its new
 * process. */
void eng_coord_rejoin_open(strata_ctx_t *ctx);
/* It stops once the job ends (a rank said BYE), or no dropped worker is
 * left to come back. */
void eng_coord_rejoin_close(strata_ctx_t *ctx, bool ending);
/* Agree the next rejoiner's clock with the aggregators, if none is. */
void eng_coord_rejoin_next(strata_ctx_t *ctx);
/* REJOIN_AT: an aggregator's answer to REJOIN_ASK. */
void eng_coord_on_rejoin_at(strata_ctx_t *ctx, eng_member_t *m, eng_rbuf_t *r);

/* ---- coord.c, for the files above ---- */

/* The settings every rank shares, as HELLO gives them: false with why. */
bool eng_coord_settings_match(strata_ctx_t *ctx, eng_member_t *m, eng_rbuf_t *r,
                              char *why, size_t cap);
/* The aggregators' addresses and WELCOME (a rejoiner's first clock, else
 * 0). */
void eng_coord_send_roster(strata_ctx_t *ctx, eng_member_t *m, int64_t start);
/* Tell a connection that is no member of the job why, and close it. */
void eng_coord_refuse(eng_member_t *m, util_log_level_t level, const char *why);

/* The coordinator's part of a policy (policy.h): what it does beyond
 * admitting ranks, checking the layout and collecting BYEs. NULL: nothing. */
struct eng_coord_policy {
    strata_status_t (*create)(strata_ctx_t *ctx); /* logs its failure */
    void (*free)(strata_ctx_t *ctx);
    /* Every worker committed: training starts. */
    void (*start)(strata_ctx_t *ctx);
    /* A message from a rank that the coordinator does not take itself;
     * false: the policy does not either. */
    bool (*on_msg)(strata_ctx_t *ctx, eng_member_t *m, unsigned type,
                   eng_rbuf_t *r);
    /* A worker said BYE, or was dropped (its boundary agreed): it no
     * longer takes part. */
    void (*left)(strata_ctx_t *ctx, eng_member_t *m);
    /* Whether a rejoin must wait (the policy is changing the workers'
     * membership); it asks for eng_coord_rejoin_next once it may not. */
    bool (*holds_rejoin)(strata_ctx_t *ctx);
    /* A dropped worker's new process is back (its first clock agreed and
     * its WELCOME sent): it takes part again. */
    void (*rejoined)(strata_ctx_t *ctx, eng_member_t *m);
    /* A lost aggregator's shard is taken over from clock `from` on (no
     * earlier than any live worker's first clock without it): each
     * worker's own resume clock (room for every worker), as the taker
     * finds it (eng_members_resume). STRATA_ERR_AGAIN: not yet (the
     * policy asks eng_coord_takeover_try again). NULL: every worker
     * resumes at `from`. */
    strata_status_t (*takeover)(strata_ctx_t *ctx, int64_t from,
                                int64_t *resume_out);
};

static inline const eng_coord_policy_t *eng_coord_policy(strata_ctx_t *ctx)
{
    static const eng_coord_policy_t none;
    const eng_coord_policy_t *p = ctx->policy->ops->coord;
    return p ? p : &none;
}

#endif /* STRATA_ENGINE_COORD_H */
