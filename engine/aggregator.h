/*
 * The aggregator's state, shared by its files (private to them):
 *   aggregator.c  joining, the shard, arrivals, model writes, messages,
 *                 drops, finalizing, metrics
 *   agg_reduce.c  when a group's clock (or, applied on arrival, a worker's
 *                 push) is complete, the reduction and update, the tracker's
 *                 advance, regrouping moves, and which pulls may be served
 *   agg_policy.c  the policies' part: gssp's regroup plans, the rounds of
 *                 esync and fedavg
 *   agg_drop.c    workers dropped (DROP_ASK, DROP from the coordinator)
 *                 while the others go on, under every policy
 *   agg_ckpt.c    checkpoints of the shard to disk
 *   agg_protect.c the shard's protection by parity other aggregators hold
 *   agg_rejoin.c  a dropped worker's new process back in (REJOIN_ASK,
 *                 REJOIN)
 *   agg_stage.c   staged models: a clock reduced before it is known to
 *                 count, its model written ahead, committed after PUSHED
 *   agg_zcopy.c   zero copy: workers' gradients read in place, CONSUMED,
 *                 RELEASE
 *   agg_takeover.c a lost aggregator's shard, rebuilt here, taken over
 *                 (TAKEOVER, TAKEN)
 */
#ifndef STRATA_ENGINE_AGGREGATOR_H
#define STRATA_ENGINE_AGGREGATOR_H

#include "engine/engine.h"
#include "engine/layout_wire.h"
#include "engine/members.h"
#include "engine/tracker.h"
#include "engine/update.h"
#include "util/ring.h"

typedef struct eng_apart {
    const eng_partition_t *part;
    uint32_t index; /* in the model */
    eng_tracker_t *tracker;
    uint32_t inflight; /* model writes out of it not completed */
    bool initialized;
    uint32_t unserved;     /* live workers not yet given the initial model */
    int64_t *arrived;      /* [nworkers]: last clock landed, -1 */
    int64_t *want;         /* [nworkers]: newest clock asked for, -1 */
    int64_t *served;       /* [nworkers]: newest clock written, -1 */
    uint32_t *nsparse;     /* [nworkers * 2]: per clock parity, the entries
                              of a sparse push, or ENG_SRC_DENSE */
    uint32_t *seg_at;      /* [nworkers]: the membership segment the
                              tracker has each worker in */
    uint32_t moves;        /* workers whose tracker move is still due */
    int64_t *applied;      /* [nworkers]: newest own clock applied, -1 */
    bool *retired;         /* [nworkers]: a dropped worker off the tracker,
                              its every counted push applied */
    bool *rejoin;          /* [nworkers]: ... back once retired here */
    uint32_t unretired;    /* dropped workers not retired yet */
    _Atomic int64_t *done; /* [ngroups]: clocks completed, for metrics
                              (the tracker forgets groups that left) */
    uint64_t arrived_ns;   /* when a push last landed */
    float *momentum;
    uint64_t state_off; /* its momentum in a checkpoint's payload */
    int64_t ckpt_at;    /* the checkpoint clock it was copied for, -1 */
    float *master;      /* [count]: an fp16 or bf16 model's fp32 copy (sgd) */
    uint64_t prot_off;  /* its momentum and master in a protected snapshot */
    int64_t prot_at;    /* the protected clock it was copied for, -1 */
    bool fresh;         /* taken over, no clock applied since */
    /* Staged (agg_stage.c): the group clock reduced into the stage before
     * every source said PUSHED (-1: none), what it was reduced from and
     * with, and per worker the clock whose model it holds from there
     * without its immediate (-1). The momentum and master the stage's
     * update left; a committed stage swaps them with momentum and master,
     * and its model buffer with the model's (flip). */
    int64_t stage_clock;
    uint32_t stage_n;
    double stage_scale, stage_lr;
    uint32_t *stage_w;  /* [nworkers] */
    int64_t *stage_wc;  /* [nworkers] */
    int64_t *staged;    /* [nworkers] */
    uint32_t sinflight; /* writes out of the stage not completed */
    float *stage_momentum, *stage_master; /* [count], as momentum, master */
    bool flip; /* the model is in a->stage, the stage in a->out */
} eng_apart_t;

typedef struct eng_dst {
    tp_rdesc_t d;
    uint64_t off;
} eng_dst_t;

/* What a queued model write carries: the model from out with its
 * immediate, a staged model from stage without it, or that immediate
 * alone (a zero-length write: the staged model it announces landed). */
typedef enum eng_send_kind {
    ENG_SEND_MODEL,
    ENG_SEND_STAGED,
    ENG_SEND_COMMIT,
} eng_send_kind_t;

typedef struct eng_send_item {
    uint32_t part; /* in the shard */
    eng_send_kind_t kind;
    bool from_stage; /* read from a->stage (else a->out), fixed when queued:
                        a commit may swap the two before it is posted */
    int64_t clock;
} eng_send_item_t;

typedef struct eng_wlink {
    eng_peer_t peer;
    struct eng_wlink *next; /* every accepted connection */
    int widx;
    void *slots;
    tp_mr_t *slots_mr;
    eng_dst_t *dst; /* [shard pieces] */
    uint32_t ndst;
    bool params_ready, left, slots_sent;
    util_ring_t q;          /* of eng_send_item_t */
    uint32_t qpiece;        /* next piece of the head */
    int64_t round_clock[2]; /* ROUND: the clock of each parity, -1 */
    uint32_t round_steps[2];
    /* Zero copy (GRADS, agg_zcopy.c): per partition of the shard, where
     * the worker's gradients are mapped here (NULL: they are written into
     * the slots), and per clock parity p, whether the push there is read
     * in place and not reduced yet (bit p) and whether the worker asked
     * for it to be released before it landed (bit 2 + p). */
    const void **in_place;
    uint8_t *held;
    /* Shards taken over (agg_takeover.c): the worker's receive slots of
     * each region past the commit's ([region - 1], nrslots of them), the
     * region whose PARAMS are coming (0: none), and the newest one whose
     * PARAMS_END came (its partitions may be written to the worker). */
    void **rslots;
    tp_mr_t **rslots_mr;
    uint32_t nrslots, taking, ready;
} eng_wlink_t;

/* A region of a shard taken over: the model of its partitions. */
typedef struct eng_region {
    uint32_t shard;
    uint64_t bytes;
    void *out;
    tp_mr_t *out_mr[ENG_NPROV];
} eng_region_t;

/* The learning rates the workers announced (STRATA_OPTIMIZER=sgd), in
 * clock order: from clock[i] on, lr[i]; before the first, the job's. */
typedef struct eng_lr_sched {
    int64_t *clock;
    double *lr;
    uint32_t n, cap;
} eng_lr_sched_t;

struct eng_agg {
    eng_layout_rx_t lrx;
    eng_layout_t *layout;
    /* shard: its index among the aggregators, and its shard's (checkpoints
     * and protection: one shard each). Its partitions are those of every
     * shard it holds (layout.h), numbered as the layout's held_index. */
    uint32_t shard, nparts, npieces;
    eng_apart_t *parts;
    int32_t *piece_local; /* [model pieces]: index in the shard, -1 */
    void *out;
    tp_mr_t *out_mr[ENG_NPROV];
    /* Staged models (agg_stage.c; NULL: none are): a second buffer laid
     * out as out. Per partition one holds the model, the other the stage
     * (eng_agg_model, eng_agg_stage_buf). */
    void *stage;
    tp_mr_t *stage_mr[ENG_NPROV];
    uint64_t staged_clocks, unstaged_clocks; /* committed, discarded */
    eng_update_t upd;
    double base_lr;        /* STRATA_LR */
    eng_lr_sched_t lrs;    /* strata_set_lr's announcements */
    eng_wlink_t **links;   /* [nworkers], after JOIN */
    eng_wlink_t *accepted; /* every connection, identified or not */
    /* The partitions a thread reading metrics may look at (parts[0..n)):
     * none until the commit, then the shard's; a takeover adds each once it
     * is whole. Stored with release, loaded with acquire: the progress
     * thread alone writes nparts and parts. */
    _Atomic uint32_t nparts_shown;
    int njoined, ngone; /* gone: left or dropped */
    uint32_t ninit;
    eng_members_t *members;
    bool *dropped; /* [nworkers]: left, or dropped */
    /* Shrinking. A worker's push of clock c is reduced once it said that
     * every write of c landed everywhere (PUSHED): pushed[w] is the newest
     * clock it said so of. A worker out of the job counts with its clocks
     * before until[w] (INT64_MAX while it is in): the same boundary at
     * every aggregator (the coordinator's, for a dropped one). From group
     * clock shrink_at[k] on, one fewer worker is live: the gradient scale
     * (policy.h). While a drop is being agreed (held > 0) nothing is
     * reduced. A job that cannot go on without a worker
     * (STRATA_MIN_WORKERS >= workers) never drops one, so it reduces each
     * partition as soon as it landed (drops false): waiting for PUSHED
     * would keep a clock's pulls from overlapping its pushes. */
    bool drops;
    int64_t *pushed, *until;
    int64_t *shrink_at;
    uint32_t nshrink, shrink_cap;
    uint32_t held;
    /* Rejoining (agg_rejoin.c). A dropped worker whose new process is back
     * from clock J counts again from J: its clocks in [gap_lo[w], gap_hi[w])
     * (its old boundary to J) never count. From group clock grow_at[k] on,
     * one more worker is live. prev[w] is its old process's connection,
     * whose slots hold its pushes before the gap; early[w] a new process's
     * JOIN that came before the coordinator's REJOIN. */
    int64_t *gap_lo, *gap_hi;
    int64_t *grow_at;
    uint32_t ngrow, grow_cap;
    struct eng_wlink **prev, **early;
    eng_src_t *srcs;     /* [nworkers]: a reduction's sources */
    uint32_t *src_w;     /* [nworkers]: ... their workers */
    int64_t *src_wc;     /* [nworkers]: ... and those workers' clocks */
    const void **dense;  /* [nworkers]: the update's dense sources */
    uint32_t plan_gen;   /* regrouping: the plan being received */
    uint32_t plan_moves; /* ... and its moves so far */
    strata_request_t *finish_req;
    uint32_t sends_pending;
    bool leaving, bye_sent;
    _Atomic uint64_t regroups, dropped_workers; /* metrics */
    struct eng_ckpt *ckpt;         /* STRATA_CHECKPOINT_DIR; NULL: none */
    int64_t ckpt_every, ckpt_next; /* clocks, of this job */
    int64_t ckpt_base;             /* the clock resumed from, else 0 */
    uint32_t ckpt_ncopied;         /* partitions copied for ckpt_next */
    uint64_t ckpt_skipped;
    bool restored; /* the model came from a checkpoint, not worker 0 */
    struct eng_agg_protect *prot; /* STRATA_PROTECT_EVERY; NULL: off */
    /* Shards taken over (agg_takeover.c): room in parts for their
     * partitions (reserved at the commit), the regions past the commit's
     * ([region - 1]); the resume clock (each worker's from it on:
     * eng_members_resume), when TAKEOVER came, and moved partitions that
     * have not applied a clock yet. */
    uint32_t parts_cap, nregions;
    eng_region_t *regions;
    int64_t taken_resume;
    uint64_t taken_ns;
    uint32_t taken_left;
    bool one_holder; /* the layout at the commit: no PUSHED (agg_drop.c) */
};

/* The aggregator's part of a policy (policy.h): what it does beyond
 * reducing groups' clocks and serving pulls. NULL: nothing. */
struct eng_agg_policy {
    /* A message from the coordinator that the aggregator does not take
     * itself; STRATA_ERR_PROTO: the policy does not either. */
    strata_status_t (*on_coord_msg)(strata_ctx_t *ctx, unsigned type,
                                    eng_rbuf_t *r);
    /* A message from a joined worker that the aggregator does not take
     * itself; false: the policy does not either (or it is malformed). */
    bool (*on_worker_msg)(strata_ctx_t *ctx, eng_wlink_t *l, unsigned type,
                          eng_rbuf_t *r);
};

static inline const eng_agg_policy_t *eng_agg_policy(strata_ctx_t *ctx)
{
    static const eng_agg_policy_t none;
    const eng_agg_policy_t *p = ctx->policy->ops->agg;
    return p ? p : &none;
}

/* ---- agg_reduce.c ---- */

/* Apply every group clock (or push, applied on arrival) of the partition
 * that is complete, unless model writes are still reading it or a worker
 * has not had the initial model yet; serve what that allows. */
void eng_try_reduce(strata_ctx_t *ctx, uint32_t i);
/* Whether worker w may be written the partition's model for its clock c
 * (the push of clock c - 1 asked for it). */
bool eng_may_serve(strata_ctx_t *ctx, const eng_apart_t *ap, uint32_t w,
                   int64_t c);
/* Tracker moves a regroup made due on the partition. */
strata_status_t eng_agg_moves(strata_ctx_t *ctx, eng_apart_t *ap);
/* Workers live at a group clock: all but those dropped before it. */
uint32_t eng_agg_live_at(const strata_ctx_t *ctx, int64_t clock);
/* The newest clock any partition's tracker reached (DROP_ASK's answer). */
int64_t eng_agg_reached(strata_ctx_t *ctx);

/* ---- agg_lr.c ---- */

/* An announcement (LR) of worker `who`: the rate from `clock` on. A clock
 * already announced keeps its first rate. */
strata_status_t eng_agg_lr_announce(strata_ctx_t *ctx, int64_t clock, double lr,
                                    const char *who);
/* The rate of an update of `clock`. */
double eng_agg_lr_at(const eng_agg_t *a, int64_t clock);
void eng_agg_lr_free(eng_agg_t *a);

/* ---- agg_ckpt.c ---- */

/* STRATA_CHECKPOINT_DIR, once the shard is laid out: the newest complete
 * checkpoint becomes the shard's model and optimizer state (worker 0's
 * initial model is then ignored). */
strata_status_t eng_agg_ckpt_setup(strata_ctx_t *ctx);
/* After an update of partition i: copied if it reached the next
 * checkpoint's clock; the checkpoint written once every partition is. */
void eng_agg_ckpt_note(strata_ctx_t *ctx, uint32_t i);
void eng_agg_ckpt_free(eng_agg_t *a);

/* ---- agg_protect.c ---- */

/* STRATA_PROTECT_EVERY, once the shard is laid out: the geometry, the
 * snapshot and the parity fragments this aggregator holds. */
strata_status_t eng_agg_protect_setup(strata_ctx_t *ctx);
/* After an update of partition i: copied into the snapshot if it reached
 * the next protected clock; its pieces go out once every partition is. */
void eng_agg_protect_note(strata_ctx_t *ctx, uint32_t i);
/* Every turn of the loop: send the snapshot's pieces while the control
 * backlog is empty. */
void eng_agg_protect_flush(strata_ctx_t *ctx);
/* From the coordinator: PIECE (relayed: a chunk of another aggregator's
 * snapshot for a parity fragment held here), PROTECT (the clock agreed and
 * the next named), REBUILD (send this one's fragments of a lost shard to
 * its rebuilder), FRAG (relayed: a chunk of such a fragment, for the shard
 * rebuilt here). */
strata_status_t eng_agg_protect_msg(strata_ctx_t *ctx, unsigned type,
                                    eng_rbuf_t *r);
/* Checks the fragments held one last time, frees them. */
void eng_agg_protect_free(eng_agg_t *a);
/* The shard of aggregator `lost` rebuilt here at `clock` and found intact
 * (its snapshot: model, then each partition's momentum and fp32 master),
 * or NULL. */
const unsigned char *eng_agg_protect_rebuilt(const eng_agg_t *a, uint32_t lost,
                                             int64_t clock);
/* TAKEOVER of shard `lost` by aggregator `taker`, after the taker
 * installed it: by a spare, the taker holds the lost shard's place in the
 * protection from then on, which resumes at the next clock named; by any
 * other, nothing more is protected (one shard each no longer holds). A
 * rebuild's memory is freed unless its own takeover is still to come. */
strata_status_t eng_agg_protect_moved(strata_ctx_t *ctx, uint32_t lost,
                                      uint32_t taker);

/* ---- agg_takeover.c ---- */

/* TAKEOVER from the coordinator: the shard moves (here, if this aggregator
 * is the taker: installed from its rebuild, TAKEN to every worker). */
strata_status_t eng_agg_takeover_msg(strata_ctx_t *ctx, eng_rbuf_t *r);
/* The worker's PARAMS_END for the region it was told of (TAKEN): the
 * region's partitions are written to it from now on. */
void eng_agg_takeover_ready(strata_ctx_t *ctx, eng_wlink_t *l);
/* Partition ap applied `clock`: logs once every moved partition applied
 * its first clock since the takeover (the recovery's end). */
void eng_agg_takeover_applied(strata_ctx_t *ctx, eng_apart_t *ap,
                              int64_t clock);
void eng_agg_takeover_free(eng_agg_t *a);

/* ---- agg_drop.c ---- */

/* DROP_ASK, DROP. STRATA_ERR_PROTO: neither. */
strata_status_t eng_agg_drop_msg(strata_ctx_t *ctx, unsigned type,
                                 eng_rbuf_t *r);
/* PUSHED from a worker; false: malformed or out of order. */
bool eng_agg_on_pushed(strata_ctx_t *ctx, eng_wlink_t *l, eng_rbuf_t *r);
/* Worker w's push of clock c landed here: where the layout puts every
 * partition on this shard, that says it landed everywhere (no PUSHED
 * comes). True: it did, and every partition was tried for a reduction. */
bool eng_agg_landed(strata_ctx_t *ctx, uint32_t w, int64_t c);
/* A worker's connection broke before it left: the coordinator decides
 * whether the job goes on (DROP) or fails. */
void eng_agg_lost(strata_ctx_t *ctx, eng_wlink_t *l, const char *why);
/* The group clock from which worker w, out from its own clock `until`,
 * is no longer live: the coordinator's `from`, or past the group clock of
 * its last counted push if that is later (under gssp a group's clocks run
 * ahead of its members' own by their segment's offset). */
int64_t eng_agg_shrink_clock(const eng_agg_t *a, uint32_t w, int64_t until,
                             int64_t from);

/* ---- agg_stage.c ---- */

/* Once the shard is laid out: whether this aggregator stages models
 * (STRATA_STAGE_MODEL, workers may be dropped, bsp), and the stage: a
 * buffer as out, and a momentum and master per partition that has them. */
strata_status_t eng_agg_stage_setup(strata_ctx_t *ctx);
void eng_agg_stage_free(eng_agg_t *a);
/* Whether worker w's model writes may be staged (not over shm, where a
 * push lands at once and nothing is gained). */
bool eng_agg_stage_worker(const strata_ctx_t *ctx, uint32_t w);
/* The group's clock c landed from every source in a->srcs (n of them) but
 * is not known to count yet: reduce it into the stage with `scale` and
 * write its model to the sources that wait for it, without the immediate. */
void eng_agg_stage(strata_ctx_t *ctx, eng_apart_t *ap, int64_t c, uint32_t n,
                   double scale);
/* The group's clock c is applied from a->src_w/src_wc (n) with `scale` at
 * a->upd.lr: true if the stage holds exactly that, now the model (with its
 * momentum and master); the workers it was written to get the immediate
 * alone. Otherwise the stage is
 * discarded (false): apply as usual. */
bool eng_agg_stage_take(strata_ctx_t *ctx, eng_apart_t *ap, int64_t c,
                        uint32_t n, double scale);

/* ---- agg_rejoin.c ---- */

/* REJOIN_ASK, REJOIN. STRATA_ERR_PROTO: neither. */
strata_status_t eng_agg_rejoin_msg(strata_ctx_t *ctx, unsigned type,
                                   eng_rbuf_t *r);
/* A JOIN for worker w, which is out of the job: kept for its REJOIN if the
 * coordinator dropped it (true), else false (refused). */
bool eng_agg_rejoin_early(strata_ctx_t *ctx, eng_wlink_t *l, int w);
/* Partition ap retired worker w, which is back: it rejoins the tracker. */
strata_status_t eng_agg_rejoin_part(strata_ctx_t *ctx, eng_apart_t *ap,
                                    uint32_t w);
/* One more group clock from which the live count changes (grow: one more,
 * else one fewer). */
strata_status_t eng_agg_live_note(eng_agg_t *a, int64_t clock, bool grow);

/* The connection whose slots (or mapping) hold worker w's push of its
 * clock wc: before a rejoin's gap, its old process's. */
static inline eng_wlink_t *eng_agg_src_link(const eng_agg_t *a, uint32_t w,
                                            int64_t wc)
{
    return a->prev[w] && wc < a->gap_lo[w] ? a->prev[w] : a->links[w];
}

/* Whether worker w's push of its clock wc counts: before its boundary, and
 * not between its boundary and a rejoin. */
static inline bool eng_agg_counts(const eng_agg_t *a, uint32_t w, int64_t wc)
{
    return wc < a->until[w] && !(wc >= a->gap_lo[w] && wc < a->gap_hi[w]);
}

/* Partition ap's model in the shard's buffers, and its stage (agg_stage.c):
 * each in out or stage, which a commit swaps. */
static inline void *eng_agg_model(const eng_agg_t *a, const eng_apart_t *ap)
{
    uint32_t r = ap->part->region;
    if (r) /* a shard taken over (agg_takeover.c): its region's, not staged */
        return (char *)a->regions[r - 1].out + ap->part->held_off;
    return (char *)(ap->flip ? a->stage : a->out) + ap->part->held_off;
}

static inline void *eng_agg_stage_buf(const eng_agg_t *a, const eng_apart_t *ap)
{
    return (char *)(ap->flip ? a->out : a->stage) + ap->part->held_off;
}

/* ---- aggregator.c ---- */

/* A partition's state, its pushes and pulls at clock 0 (ap->part set). */
strata_status_t eng_apart_init(strata_ctx_t *ctx, eng_apart_t *ap);

/* Queue a model write of partition i's clock `clock` to worker l, and post
 * what the connection takes. */
/* Model writes a worker's queue must hold for nparts partitions: per
 * partition the initial model, and a clock's staged model and its
 * immediate (or its model in full, a stage discarded). */
static inline uint32_t eng_wlink_qroom(uint32_t nparts)
{
    return 3 * nparts + 1;
}
void eng_wlink_queue(strata_ctx_t *ctx, eng_wlink_t *l, uint32_t i,
                     eng_send_kind_t kind, int64_t clock);
/* Serve partition i to every worker whose pull it now allows. */
void eng_serve(strata_ctx_t *ctx, uint32_t i);
/* Reduce and serve what every partition now allows (the workers changed). */
void eng_agg_progress(strata_ctx_t *ctx);
/* A worker that left gets no more writes: what was queued for it no longer
 * holds its partitions. */
void eng_wlink_forget(strata_ctx_t *ctx, eng_wlink_t *l);
/* Worker w is out of the job (it left, or it was dropped): its pushes
 * before clock `until` still count, none after. */
void eng_agg_worker_out(strata_ctx_t *ctx, int w, int64_t until);
/* The first JOIN of a worker (or of its new process): it gets its slots. */
void eng_agg_join(strata_ctx_t *ctx, eng_wlink_t *l, int widx);
/* Where worker l's push of `clock` for the partition lands. */
void *eng_slot(const eng_agg_t *a, const eng_wlink_t *l, const eng_apart_t *ap,
               int64_t clock);

/* ---- agg_zcopy.c ---- */

/* Where worker l's push of `clock` for partition i is read: in place, or
 * its slot. */
const void *eng_src_addr(const eng_agg_t *a, const eng_wlink_t *l, uint32_t i,
                         int64_t clock);
/* After the serve that followed a reduction: it read worker w's push of
 * its clock wc on partition i; if in place, the worker may have its
 * gradients back (the model write of a later clock says so, else
 * CONSUMED). */
void eng_agg_consumed(strata_ctx_t *ctx, uint32_t i, uint32_t w, int64_t wc);
/* l's push of clock c on partition i, read in place, landed. */
void eng_agg_held(strata_ctx_t *ctx, eng_wlink_t *l, uint32_t i, int64_t c);
/* RELEASE; false: malformed or unexpected. */
bool eng_agg_on_release(strata_ctx_t *ctx, eng_wlink_t *l, eng_rbuf_t *r);
/* The worker's connection closes, and its mappings with it: what it
 * announced in place and is not reduced yet is copied into its slots,
 * where a push that counts is read from then on. Its memory no longer
 * changes: the worker is gone, or waits for a CONSUMED that cannot come. */
void eng_wlink_unmap(strata_ctx_t *ctx, eng_wlink_t *l);

#endif /* STRATA_ENGINE_AGGREGATOR_H */
