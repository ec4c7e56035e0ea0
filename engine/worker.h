/*
 * The worker's state, shared by its files (private to them):
 *   worker.c         connecting, posting writes, pushing, model arrivals,
 *                    messages, commands, finalizing
 *   worker_commit.c  the commit: layout, registrations, SLOTS and PARAMS,
 *                    the initial model
 *   worker_mem.c     strata_alloc's blocks, writable by every transport
 *   worker_takeover.c a lost aggregator's shard held by a survivor (TAKEOVER)
 *   worker_api.c     the application thread's side: tensors, commit, push
 *                    and pull requests, the clock it counts
 *
 * Commit: the worker lays its tensors out, registers their buffers with every
 * transport it uses and sends the layout to the coordinator. Once accepted,
 * each aggregator describes the worker's receive slots (SLOTS); the worker
 * answers with where each piece of the aggregator's partitions lands in its
 * parameter buffers (PARAMS), and the first worker uploads its parameters as
 * the initial model (INIT writes). The commit completes when the initial
 * model has landed.
 *
 * Push: a partition leaves once every tensor in it has been pushed in the
 * current clock: one write per piece, straight from the gradient buffer into
 * the slot of the clock's parity, the last carrying the immediate. A push for
 * clock c is taken only once the model for c - 1 has landed, which proves
 * the aggregators consumed clock c - 2 and freed that parity's slot.
 *
 * Zero copy on one host: where the link's transport maps the worker's
 * memory into the aggregator (shm) and a partition's gradients lie
 * contiguous in one strata_alloc block, the aggregator reduces them where
 * they are (GRADS at the commit says which). The push is then a zero-length
 * write carrying the immediate, counted for PUSHED like any write; its
 * pieces complete only when the aggregator says it reduced them, so the
 * application cannot write the gradients before they were read: the model
 * write of the next clock says so (the aggregator serves it only after that
 * reduction), or CONSUMED where no model write follows at once. The
 * reduction waits for the whole clock (PUSHED): once the application waits
 * on a push before its clock is whole, that clock's pushes are released
 * (RELEASE: the aggregator copies each into its slot, then says CONSUMED).
 *
 * Pull: the aggregators write the model into the parameter buffers (or, where
 * a transport cannot reach the user's memory, into a staging buffer copied on
 * arrival). The pull gate holds the least clock every partition has reached.
 */
#ifndef STRATA_ENGINE_WORKER_H
#define STRATA_ENGINE_WORKER_H

#include "engine/engine.h"
#include "engine/steptime.h"
#include "engine/topk_push.h"
#include "util/keymap.h"
#include "util/ring.h"

_Static_assert(sizeof(uintptr_t) >= 8, "op contexts pack 64-bit values");

/* What a write carries: gradient pieces, the initial model, or a GDTopK
 * push (one write of a partition from the send buffer). */
/* A write's context: the kind in the low two bits, the parity of a push's
 * clock in the third (ENG_OP_ODD), the request of a GRAD write above them
 * (requests are aligned to 8). A TOPK context also stands for a zero-copy
 * notice: both are one write of a partition that completes no piece (the
 * pieces of a GDTopK push are done when it is prepared, those of a push
 * read in place when the aggregator says CONSUMED). */
enum {
    ENG_OP_GRAD = 1,
    ENG_OP_INIT = 2,
    ENG_OP_TOPK = 3,
    ENG_OP_MASK = 3,
    ENG_OP_ODD = 4,
    ENG_OP_BITS = 7
};

/* A tensor's registrations with one transport. */
typedef struct eng_treg {
    tp_mr_t *grad;      /* source of gradient writes */
    tp_mr_t *param;     /* target of model writes; NULL: staged */
    uint64_t param_off; /* of the tensor within param */
    tp_mr_t *src;       /* source of the initial model */
    uint64_t src_off;
    bool param_owned, src_owned;
} eng_treg_t;

typedef struct eng_wtensor {
    eng_tensor_desc_t desc;
    void *param, *grad;
    int64_t pushed_at;             /* last clock it was pushed in, -1 */
    strata_request_t *push_req[2]; /* request of each clock parity */
    eng_treg_t reg[ENG_NPROV];
} eng_wtensor_t;

/* What a link still has to post, oldest first. */
typedef struct eng_post {
    uint32_t part;
    uint8_t kind;
    int64_t clock;
    eng_topk_write_t topk; /* ENG_OP_TOPK */
} eng_post_t;

/* A region of an aggregator's arrays it took over at run time (layout.h):
 * its receive slots (TAKEN: len 0 until then) and, if a tensor is staged,
 * the staging of its model. */
typedef struct eng_lregion {
    tp_rdesc_t slots;
    void *stage;
    tp_mr_t *stage_mr;
    tp_rdesc_t stage_desc;
} eng_lregion_t;

/* A TAKEN that came before its TAKEOVER (another connection). */
typedef struct eng_taken {
    uint32_t shard, region;
    int64_t resume;
    tp_rdesc_t slots;
} eng_taken_t;

typedef struct eng_link {
    eng_peer_t peer;
    int prov;
    uint32_t agg; /* its aggregator: the partitions it holds go here */
    tp_rdesc_t slots;
    bool have_slots;
    bool slots_early; /* a rejoiner's SLOTS, before its layout */
    bool acked;       /* finalizing: its LEFT (or its disconnect) was counted */
    tp_rdesc_t *tdesc; /* [ntensors]: param regions exported to the peer */
    void *stage;       /* staging for model writes, if a tensor needs it */
    tp_mr_t *stage_mr;
    tp_rdesc_t stage_desc;
    util_ring_t q;   /* of eng_post_t */
    uint32_t qpiece; /* next piece of the head */
    /* The head is entry fuse_at of a run of fuse_n small pushes from held
     * index fuse_first on, whose last write alone carries an immediate
     * (ENG_IMM_GRADS); fuse_n 0: no run. */
    uint32_t fuse_first, fuse_n, fuse_at;
    /* Zero copy (STRATA_ZERO_COPY, a provider with TP_CAP_PEER_MAP): per
     * partition the aggregator holds (its held_index), whether the aggregator
     * reads its gradients in place (GRADS), then the clock of its last push
     * queued and of the last one the aggregator consumed; NULL: none is. */
    bool *in_place;
    int64_t *zc_queued, *zc_consumed;
    /* Takeover (issue 16): the aggregator was lost (nothing more is written
     * to it); a write to it failed or it was lost, and no takeover came
     * yet (PUSHED is held meanwhile). */
    bool lost, broken;
    eng_lregion_t *regions; /* [held_nregions - 1]: its regions 1.. */
    bool taken_early;
    eng_taken_t early;
    bool taken_held; /* TAKEN answered once the policy allows (take_now) */
} eng_link_t;

typedef struct eng_block {
    struct eng_block *next;
    void *addr;
    size_t len;
    int owner; /* provider whose tp_mem_alloc made it; -1: util_malloc */
    tp_mr_t *mr[ENG_NPROV];
    bool read_in_place; /* an aggregator reads gradients in it (GRADS) */
} eng_block_t;

/* The worker as the application thread sees it (that thread alone). */
typedef struct eng_worker_api {
    int64_t clock;      /* pushes counted: strata_clock() */
    uint32_t npushed;   /* tensors pushed in that clock */
    bool committed;     /* the layout is */
    int64_t *pushed_at; /* [ntensors]: last clock pushed in */
    int64_t released;   /* the last clock RELEASE was asked for, -1 */
    uint32_t epochs;    /* strata_epoch_end calls */
} eng_worker_api_t;

struct eng_worker {
    eng_wtensor_t *tensors;
    uint32_t ntensors, tcap;
    util_keymap_t names; /* eng_tensor_name_key -> tensor index + 1 */
    eng_layout_t *layout;
    eng_link_t *links;
    int nconnected, nslots;
    bool uses[ENG_NPROV];
    eng_block_t *blocks;

    int64_t clock; /* pushes completed */
    /* PUSHED: writes of each clock parity not completed yet, the newest
     * clock announced complete to every aggregator (-1), and whether a
     * write failed (then nothing more is announced). */
    uint32_t unlanded[2];
    /* Zero copy: per clock parity, partition pushes read in place and not
     * consumed yet; a push of clock c waits for those of c - 2 (it takes
     * their requests' places). */
    uint32_t in_place_out[2];
    bool reads_in_place;   /* some partition is (set by the commit) */
    int64_t release_clock; /* pushes of this clock are released (-1) */
    int64_t announced;
    bool announces;    /* PUSHED: the commit's layout spread the model */
    uint32_t nbroken;  /* links broken and not taken over: no PUSHED */
    uint32_t npushed;  /* tensors pushed in the current clock */
    uint32_t *pending; /* [nparts]: pieces not pushed yet this clock */
    int64_t *pulled;   /* [nparts]: clock of the model last landed */
    int64_t pull_min;
    uint32_t at_min; /* partitions whose pulled == pull_min */
    util_gate_t pull_gate;
    /* Takeover: per partition, the first clock whose push is written (a
     * moved partition's pushes before the resume clock R are not), and
     * the clock of the first model write its taker makes (R; -1 once it
     * landed, or for a partition that did not move). NULL until a
     * takeover. */
    int64_t *push_from, *model_from;
    uint64_t posted_ns[2]; /* per clock parity: its last push posted */

    strata_request_t *commit_req, *finish_req;
    bool layout_ok;
    strata_request_t *parked[ENG_CMDQ_CAP]; /* pushes waiting for a pull */
    uint32_t nparked;
    uint32_t sends_pending;
    uint32_t acks_pending; /* LEFT answers awaited */
    bool leaving, left;
    eng_topk_push_t *topk; /* GDTopK (STRATA_GDTOPK=1) */
    void **grads;          /* [ntensors]: gradient buffers, for topk */
    bool frozen;           /* gssp regrouping: no push of freeze_at or later */
    int64_t freeze_at;     /* ... until GO */
    eng_steptime_t steptime;   /* gssp: this worker's own step times */
    uint64_t steptime_sent_ns; /* ... last reported then */
    eng_worker_api_t api;
};

/* The worker's part of a policy (policy.h): what it does beyond pushing
 * gradients and pulling the model. NULL: nothing. */
struct eng_worker_policy {
    /* Application thread: the commit completed; strata_epoch_end. */
    strata_status_t (*committed)(strata_ctx_t *ctx);
    strata_status_t (*epoch_end)(strata_ctx_t *ctx, double iteration_seconds);
    /* Progress thread: the policy's commands (ENG_CMD_QUERY, _ROUND,
     * _EPOCH). */
    void (*cmd)(strata_ctx_t *ctx, const eng_cmd_t *cmd);
    /* Progress thread: every partition holds the model of `clock` now; the
     * push of `clock`'s last tensor, made by the application at pushed_ns,
     * was taken. */
    void (*landed)(strata_ctx_t *ctx, int64_t clock);
    void (*pushed)(strata_ctx_t *ctx, int64_t clock, uint64_t pushed_ns);
    /* A message from the coordinator that the worker does not take itself;
     * false: the policy does not either. */
    bool (*on_coord_msg)(strata_ctx_t *ctx, unsigned type, eng_rbuf_t *r);
    /* Progress thread: whether a taker's first model write may land in
     * the parameters now, the application being at most in the round of
     * clock `stuck` (the least clock pulled of the moved partitions); true:
     * it is asked for at once (PARAMS), false: eng_worker_takeover_release
     * asks for it later. NULL: at once. */
    bool (*take_now)(strata_ctx_t *ctx, int64_t stuck);
    /* Finalizing, before BYE. */
    strata_status_t (*leave)(strata_ctx_t *ctx);
    /* The job failed: fail what the policy's callers wait on. */
    void (*fail)(strata_ctx_t *ctx, strata_status_t status);
    void (*free)(strata_ctx_t *ctx);
};

static inline const eng_worker_policy_t *eng_worker_policy(strata_ctx_t *ctx)
{
    static const eng_worker_policy_t none;
    const eng_worker_policy_t *p = ctx->policy->ops->worker;
    return p ? p : &none;
}

/* ---- worker.c ---- */

/* A piece of a push request is done with its gradient buffer. */
void eng_piece_done(strata_ctx_t *ctx, strata_request_t *req,
                    strata_status_t status);
/* Partition si of link l: its push of clock c, read in place, was reduced
 * (or copied), or will never be: its pieces are done. */
void eng_zc_consume(strata_ctx_t *ctx, eng_link_t *l, uint32_t si, int64_t c);
/* Say PUSHED of every clock whose writes all landed. */
void eng_worker_announce(strata_ctx_t *ctx);

/* Take the pushes a pull or a regroup held back, as far as allowed now. */
void eng_worker_unpark(strata_ctx_t *ctx);

/* Queue a partition's writes of a clock on its link (cannot overflow: a
 * partition is queued at most once per clock, for two clocks at a time,
 * plus once for the initial model; else the job fails naming the link). */
/* Posts a link's queue must hold for n partitions: a partition is queued
 * at most once per clock, for two clocks at a time, plus once for the
 * initial model. */
static inline uint32_t eng_link_qroom(uint32_t n)
{
    return 3 * n + 1;
}
void eng_link_enqueue(strata_ctx_t *ctx, eng_link_t *l, const eng_post_t *e);
/* Post what the link's queue holds until the transport's queue is full. */
void eng_link_post(strata_ctx_t *ctx, eng_link_t *l);

/* Where partition p's pushes land on its link l, and where its model is
 * staged on this worker: in the region it lies in. */
static inline const tp_rdesc_t *eng_link_slots(const eng_link_t *l,
                                               const eng_partition_t *p)
{
    return p->region ? &l->regions[p->region - 1].slots : &l->slots;
}
static inline char *eng_link_stage(const eng_link_t *l,
                                   const eng_partition_t *p)
{
    return p->region ? (char *)l->regions[p->region - 1].stage
                     : (char *)l->stage;
}
static inline const tp_rdesc_t *eng_link_stage_desc(const eng_link_t *l,
                                                    const eng_partition_t *p)
{
    return p->region ? &l->regions[p->region - 1].stage_desc : &l->stage_desc;
}

/* ---- worker_takeover.c ---- */

/* Whether a lost aggregator's shard may be taken over (its shards are
 * protected): then the worker outlives the broken link until the
 * coordinator says TAKEOVER, or fails after STRATA_TIMEOUT_MS. */
bool eng_worker_outlives(const strata_ctx_t *ctx);
/* Link l broke (its disconnect): what was queued for it is dropped and
 * counted done, the coordinator told how far this worker can push (LOST). */
void eng_link_lose(strata_ctx_t *ctx, eng_link_t *l);
/* Whether partition p's push of clock c is not written: its aggregator
 * was lost, or it moved and c is before the resume clock. */
static inline bool eng_push_dropped(const eng_worker_t *w, uint32_t p,
                                    int64_t c)
{
    return w->links[w->layout->parts[p].holder].lost ||
           (w->push_from && c < w->push_from[p]);
}
/* TAKEOVER from the coordinator; TAKEN from the taker on link l. */
void eng_worker_on_takeover(strata_ctx_t *ctx, eng_rbuf_t *r);
void eng_worker_on_taken(strata_ctx_t *ctx, eng_link_t *l, eng_rbuf_t *r);
/* Answer a TAKEN held for the policy (take_now), if it allows now. */
void eng_worker_takeover_release(strata_ctx_t *ctx);
/* The clock of the model write of partition p expected next. */
static inline int64_t eng_model_next(const eng_worker_t *w, uint32_t p)
{
    return w->model_from && w->model_from[p] >= 0 ? w->model_from[p]
                                                  : w->pulled[p] + 1;
}
/* Free what takeovers made. */
void eng_takeover_free(strata_ctx_t *ctx);

/* ---- worker_commit.c ---- */

/* ENG_CMD_COMMIT: lay the tensors out, register them, send the layout. */
strata_status_t eng_commit_start(strata_ctx_t *ctx);
/* Complete the commit if the layout is accepted, every aggregator described
 * its slots and (unless aggregators only sum) the initial model landed. */
void eng_commit_check(strata_ctx_t *ctx);
/* SLOTS: an aggregator's receive slots. */
void eng_worker_on_slots(strata_ctx_t *ctx, eng_link_t *l, eng_rbuf_t *r);
/* Release what the commit made: registrations, layout, link queues. */
void eng_commit_free(strata_ctx_t *ctx);
/* PARAMS for the partitions link l's aggregator holds from index `from`
 * on (their pieces, where each lands here). */
strata_status_t eng_send_params_from(strata_ctx_t *ctx, eng_link_t *l,
                                     uint32_t from);
/* A staging region of `bytes` for link l's model writes, exported to its
 * aggregator. */
strata_status_t eng_stage_alloc(eng_link_t *l, uint64_t bytes, void **stage_out,
                                tp_mr_t **mr_out, tp_rdesc_t *desc_out);

/* ---- worker_mem.c ---- */

/* The block holding [p, p + len), or NULL. */
eng_block_t *eng_block_find(eng_worker_t *w, const void *p, size_t len);
/* ENG_CMD_ALLOC and ENG_CMD_FREE. */
strata_status_t eng_block_alloc(strata_ctx_t *ctx, size_t len, void **ptr_out);
strata_status_t eng_block_release(strata_ctx_t *ctx, void *ptr);
void eng_blocks_free(eng_worker_t *w);

#endif /* STRATA_ENGINE_WORKER_H */
