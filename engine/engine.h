/*
 * The engine's context (struct strata_ctx) and the services its modules share:
 * the progress thread and its event dispatch, the command queue from the
 * application thread, failure propagation and metrics counters.
 *
 * Threads. A context runs one progress thread (loop.c). It alone drives the
 * transport contexts and owns the state of the coordinator, worker and
 * aggregator modules. Application threads reach it through commands
 * (eng_cmd_submit) and wait on gates and requests it raises; queries and
 * metrics read atomics.
 *
 * Modules (docs/engine.md, "Structure", says who reaches whom how):
 *   loop.c        progress thread, commands, event dispatch, timers
 *   fail.c        the job's failure, and asking the coordinator for it
 *   live.c        liveness: beats, and who is stalled (engine/live.h)
 *   msg.c         peers and their handler tables, control messages, names
 *   req.c         requests: the pool, waiting, completion
 *   boot.c        joining the job: the coordinator's address, HELLO, roster
 *   coord*.c      the coordinator (rank 0): roster, layout check, exits, and
 *                 its part of the policies (coord.h)
 *   worker*.c     the worker: connecting, pushes, model arrivals, commit,
 *                 memory, the application thread's side (worker.h); with
 *                 gssp.c and rounds.c, its part of the policies
 *   aggregator.c, agg_*.c  the aggregator: slots, reductions, model writes,
 *                 its part of the policies (aggregator.h)
 *   ctx.c         a context: settings, place in the job, roles; teardown
 *   api.c         the public API
 *   metrics.c     counters and their JSON
 * Loop, boot and failure reach the roles only through the tables below
 * (eng_role_ops_t, eng_timer_t) and the peers' (msg.h).
 */
#ifndef STRATA_ENGINE_ENGINE_H
#define STRATA_ENGINE_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <strata/strata.h>

#include "engine/config.h"
#include "engine/launch.h"
#include "engine/layout.h"
#include "engine/live.h"
#include "engine/msg.h"
#include "engine/policy.h"
#include "engine/wire.h"
#include "transport/transport.h"
#include "util/clock.h"
#include "util/ring.h"
#include "util/waitq.h"

/* Data providers, indexed as eng_prov_names. */
enum { ENG_PROV_VERBS, ENG_PROV_TCP, ENG_PROV_SHM, ENG_NPROV };
extern const char *const eng_prov_names[ENG_NPROV];
/* Index of a provider name, -1 if unknown. */
int eng_prov_index(const char *name);

#define ENG_HOST_ID_MAX 128

typedef struct eng_coord eng_coord_t;
typedef struct eng_worker eng_worker_t;
typedef struct eng_agg eng_agg_t;
typedef struct eng_rounds eng_rounds_t;

typedef struct eng_cmd eng_cmd_t;

/* What the progress thread and the join call in a role, set when the role
 * is created, so that neither names a role. A rank has one role, worker or
 * aggregator (role_ops), and rank 0 also the coordinator's (coord_ops).
 * NULL: the role has no such part. */
typedef struct eng_role_ops {
    const char *name; /* "worker", "aggregator", "coordinator" */
    /* A connection its listener accepted. */
    void (*on_accept)(strata_ctx_t *ctx, tp_ep_t *ep, tp_ctx_t *tp);
    /* A command from the application thread. */
    void (*cmd)(strata_ctx_t *ctx, eng_cmd_t *cmd);
    /* Every turn of the loop: retry posts a full queue refused, move
     * finalizing on. */
    void (*flush)(strata_ctx_t *ctx);
    /* The job failed (msg: why): fail what waits, tell who must know. */
    void (*fail)(strata_ctx_t *ctx, strata_status_t status, const char *msg);
    /* WELCOME: every rank joined and the roster is complete. */
    void (*on_welcome)(strata_ctx_t *ctx);
    /* The deadline to join passed with the roster in: say which of its
     * connections are not up (optional). */
    void (*pending)(strata_ctx_t *ctx, char *buf, size_t len);
    /* A message from the coordinator that joining does not take. */
    void (*on_coord_msg)(strata_ctx_t *ctx, unsigned type, eng_rbuf_t *r);
    /* Group g's clock on the rank's shard; any thread. */
    int64_t (*group_clock)(strata_ctx_t *ctx, uint32_t g);
    /* Staleness histogram of the updates applied; any thread. */
    void (*staleness)(strata_ctx_t *ctx, uint64_t *hist, size_t nbuckets);
    /* Liveness (live.h), the coordinator's part: say BEAT to every rank it
     * watches; rank r has been silent for silent_ns (no longer watched). */
    void (*beat)(strata_ctx_t *ctx);
    void (*stalled)(strata_ctx_t *ctx, int r, uint64_t silent_ns);
} eng_role_ops_t;

/* Work the progress thread runs at a time: fn, once at_ns has passed. */
typedef struct eng_timer {
    uint64_t at_ns; /* 0: not armed */
    void (*fn)(strata_ctx_t *ctx);
} eng_timer_t;

/* Commands from the application thread. */
typedef enum eng_cmd_type {
    ENG_CMD_COMMIT,
    ENG_CMD_PUSH,
    ENG_CMD_ALLOC,
    ENG_CMD_FREE,
    ENG_CMD_FINALIZE,
    ENG_CMD_QUERY, /* rounds: ask the State Server (no request) */
    ENG_CMD_ROUND, /* rounds: local steps of a round, to the aggregators */
    ENG_CMD_EPOCH, /* gssp: an epoch ended (GDTopK's schedule) */
    ENG_CMD_LR,    /* a learning rate from a clock on, to the aggregators */
    /* zero copy: the application waits on a push of a clock not pushed
     * whole (no request) */
    ENG_CMD_RELEASE,
} eng_cmd_type_t;

struct eng_cmd {
    eng_cmd_type_t type;
    strata_request_t *req; /* completed when the command is done */
    union {
        struct {
            size_t bytes;
            void **ptr_out;
        } alloc;
        void *free_ptr;
        struct {
            uint32_t seq, steps;
            uint64_t round;
            double step_s, rtt_s;
            bool syncing; /* no question: the worker aggregates */
        } query;
        struct {
            int64_t clock;
            uint32_t steps;
        } round;
        struct {
            uint32_t epoch;
        } epoch;
        struct {
            int64_t clock;
            double lr;
        } lr;
        int64_t release_clock;
    } u;
};

#define ENG_CMDQ_CAP 64 /* a power of two */

/* Single producer (the application thread, whose calls are serialised),
 * single consumer (the progress thread). */
typedef struct eng_cmdq {
    eng_cmd_t slots[ENG_CMDQ_CAP];
    _Atomic uint32_t head; /* next to consume */
    _Atomic uint32_t tail; /* next to fill */
} eng_cmdq_t;

/* Requests, from a pool in the context. */
typedef enum eng_req_kind {
    ENG_REQ_PUSH,
    ENG_REQ_PULL,
    ENG_REQ_CMD, /* a command the application waits for */
} eng_req_kind_t;

struct strata_request {
    strata_ctx_t *ctx;
    eng_req_kind_t kind;
    _Atomic int done;
    strata_status_t status;
    int64_t clock;        /* PULL: the clock awaited; PUSH: its clock */
    util_gate_t *gate;    /* PULL: raised to the clock every buffer holds */
    uint32_t outstanding; /* PUSH: tensors not yet fully written */
    uint32_t ntensors;    /* PUSH: the tensors, in tensors[] */
    uint64_t pushed_ns;   /* PUSH: when the application pushed */
    uint32_t *tensors;
    /* PUSH: handed over and not yet complete. The progress thread alone
     * reads and writes it: it looks for open pushes over the whole pool,
     * where the application may be filling a request meanwhile. */
    bool pushing;
    bool abandoned; /* application thread: free it once done */
    strata_request_t *next_free;
};

/* The pool grows by chunks: requests never move, so their addresses are
 * handles (the worker's writes carry them), and there is no cap but memory
 * on how many are outstanding (per-tensor pushes of a large model). */
#define ENG_REQ_CHUNK 256

typedef struct eng_req_chunk {
    _Atomic(struct eng_req_chunk *) next; /* appended by the application */
    strata_request_t reqs[ENG_REQ_CHUNK];
} eng_req_chunk_t;

/* Metrics every module counts into; any thread reads them. */
typedef struct eng_counters {
    _Atomic uint64_t bytes_pushed, bytes_pulled;
    _Atomic uint64_t pushes, pulls;
    _Atomic uint64_t staging_copies, staging_bytes;
    _Atomic uint64_t reductions, reduce_ns, updates;
    /* the stages of strata_metrics_t, same names */
    _Atomic uint64_t rounds, push_handoff_ns, push_post_ns, round_trip_ns;
    _Atomic uint64_t pull_wakeup_ns, reduce_wait_ns, serve_ns;
    _Atomic uint64_t pull_raised_ns; /* when the pull gate last rose */
    _Atomic uint64_t in_place_pushes, in_place_bytes;
    _Atomic uint64_t push_imms; /* aggregator: immediates pushes ended with */
    /* shard protection and a takeover (strata_metrics_t's takeover_*) */
    _Atomic int64_t protected_clock;
    _Atomic uint64_t takeovers;
    _Atomic int64_t tk_lost, tk_taker, tk_protected, tk_resume;
    _Atomic uint64_t tk_loss_ns, tk_rebuilt_ns, tk_told_ns, tk_installed_ns,
        tk_resumed_ns;
} eng_counters_t;

struct strata_ctx {
    eng_config_t *cfg;
    tp_params_t tp_params; /* from cfg: every tp_open() of the context */
    eng_launch_t launch;
    strata_role_t role;
    int rank, size, nworkers, naggs;
    uint32_t nshards; /* the model's: STRATA_SHARDS, or one per aggregator */
    _Atomic int local_rank;
    int worker_index; /* -1 for aggregators */
    int timeout_ms;
    uint64_t spin_ns;        /* STRATA_SPIN_US: polling before a sleep */
    uint64_t pull_waited_ns; /* application thread: its last pull's wait */
    char host_id[ENG_HOST_ID_MAX];
    bool spans_hosts;   /* WELCOME: the job's ranks are on several hosts */
    char transport[32]; /* strata_transport(), set once joined */
    eng_policy_t *policy;
    const eng_role_ops_t *role_ops;  /* the worker's or the aggregator's */
    const eng_role_ops_t *coord_ops; /* rank 0: the coordinator's */

    /* progress thread */
    pthread_t thread;
    bool thread_started;
    int epfd, cmd_efd;
    eng_cmdq_t cmdq;
    /* The thread sleeps, or is about to: a command wakes it (cmd_efd). */
    _Atomic bool sleeping;
    /* A thread turns the loop (eng_loop_once): the progress thread, or the
     * application's while it polls for a pull (eng_loop_assist). */
    _Atomic bool turning;
    bool assisted; /* the application's turns did work (read while turning) */
    _Atomic bool stop;
    eng_timer_t join_timer;   /* boot: retry connecting, the join deadline */
    eng_timer_t tick_timer;   /* coordinator: the policies' periodic work */
    eng_timer_t live_timer;   /* beats, and looking for silent peers */
    eng_timer_t rejoin_timer; /* coordinator: a rejoin asked again */
    eng_live_t live;
    struct {            /* eng_fail_soon */
        uint64_t at_ns; /* 0: none pending; else when to stop waiting */
        strata_status_t status;
        const char *file;
        int line;
        char msg[512];
    } soon;
    eng_msgq_t msgs; /* control messages a full send queue refused */

    /* transports */
    tp_ctx_t *coord_tp;                      /* tcp, for the rendezvous */
    tp_listener_t *coord_listener;           /* rank 0 */
    tp_ctx_t *data_tp[ENG_NPROV];            /* opened on demand */
    tp_listener_t *data_listener[ENG_NPROV]; /* aggregators */
    char listen_host[ENG_ADDR_MAX]; /* STRATA_HOST, or loopback: boot.c */

    /* joining */
    eng_peer_t coord_peer;
    char coord_addr[ENG_ADDR_MAX];
    char coord_bind[ENG_ADDR_MAX + 8]; /* rank 0: where it listens */
    uint64_t join_deadline_ns;
    strata_status_t join_last_error;
    char join_last_why[256]; /* the transport's reason, for the deadline */
    int join_timeout_ms;     /* STRATA_JOIN_TIMEOUT_MS, or STRATA_TIMEOUT_MS */
    const char *join_timeout_name; /* which, for messages */
    unsigned join_backoff_ms;
    eng_coord_t *coord; /* rank 0 */
    struct eng_roster *roster;

    eng_worker_t *worker;
    eng_rounds_t *rounds; /* esync, fedavg workers, once committed */
    eng_agg_t *agg;

    /* what application threads wait on */
    util_gate_t joined;    /* 1: every rank joined, data connections up */
    util_gate_t committed; /* 1: layout accepted (worker: model received) */
    util_gate_t served;    /* aggregator: 1 when every worker left */
    util_gate_t flushed;   /* coordinator: 1 once its ABORTs are sent */
    uint32_t abort_pending;
    util_waitq_t reqq; /* requests completing */
    _Atomic int fatal; /* the first failure, or STRATA_OK */
    /* its message, for strata_last_error: written once, before fatal_text
     * is set */
    char fatal_msg[1024];
    _Atomic bool fatal_text;
    bool bye_sent;
    _Atomic(char *) report; /* strata_report's JSON, sent with BYE */

    /* request pool: the application thread allocates and frees */
    eng_req_chunk_t *req_chunks, *req_last;
    strata_request_t *req_free;

    eng_counters_t cnt;
    /* The worker's clock as the application thread counts pushes, published
     * for queries from any thread. */
    _Atomic int64_t clock;
    /* A worker that rejoined a running job in the place of a dropped one:
     * its first clock (WELCOME), else 0. */
    int64_t start_clock;
    /* The layout's partition size, once known (the worker's commit, the
     * aggregator's layout), for strata_partition_bytes(). */
    _Atomic uint64_t partition_bytes;
    /* gssp: the worker's group, and its speed rank in [0, 1] (0 fastest) as
     * the coordinator last said */
    _Atomic int group;
    _Atomic uint64_t group_rank_bits;
};

/* One aggregator as the roster describes it. */
typedef struct eng_agg_info {
    int rank;
    char host_id[ENG_HOST_ID_MAX];
    char addr[ENG_NPROV][ENG_ADDR_MAX]; /* empty: not offered */
    bool spare; /* strata-agg --spare: holds no shard until a takeover */
} eng_agg_info_t;

typedef struct eng_roster {
    int naggs, nreceived;
    eng_agg_info_t *aggs;
    /* From WELCOME on: the spare aggregators, whose shards the layout gives
     * no partition (a spare is refused unless shards are one per
     * aggregator, so [naggs] is [nshards]). */
    int nspares;
    bool *spare; /* [naggs] */
} eng_roster_t;

/* The shards the layout gives no partition (eng_layout_adopt), or NULL. */
static inline const bool *eng_spare_shards(const strata_ctx_t *ctx)
{
    return ctx->roster->nspares && ctx->nshards == (uint32_t)ctx->naggs
               ? ctx->roster->spare
               : NULL;
}

/* ---- ctx.c ---- */

/* A context from the settings (KEY=VALUE, over the environment's), its
 * place in the job and its roles; not joined yet, no thread. */
strata_status_t eng_ctx_create(const char *const *settings,
                               strata_ctx_t **ctx_out);
/* Stops the thread, frees the roles, closes the transports. */
void eng_ctx_free(strata_ctx_t *ctx);

/* ---- loop.c ---- */

/* The coordinator's context (tcp, control messages only) has its sockets
 * polled this often while the progress thread polls, and at once after it
 * slept (tp_params_t's poll_us): a message to a polling thread is handled
 * within this bound plus a turn, and a turn that finds nothing makes no
 * system call for that context. */
#define ENG_COORD_POLL_US 50

/* The thread's epoll set and command eventfd, the transports watched. */
strata_status_t eng_loop_init(strata_ctx_t *ctx);
/* eng_loop_init, then the thread, which turns eng_loop_once and sleeps when
 * nothing is to be done. */
strata_status_t eng_loop_start(strata_ctx_t *ctx);
/* One turn of the progress thread: commands, every transport's events,
 * the backlog, the role's flush, timers; whether anything was done. Tests
 * turn it themselves, with no thread. */
bool eng_loop_once(strata_ctx_t *ctx);
/* The progress thread's idle spells: since when it has found nothing to
 * do (0: it is working), and how long its previous spell lasted. */
typedef struct eng_idle {
    uint64_t since_ns, last_ns;
} eng_idle_t;
/* What the thread does after each turn (busy: it did something), the one
 * keeper of *idle. A busy turn ends the idle spell and keeps its length.
 * An idle turn starts or continues the spell; while both this spell and
 * the previous one are within STRATA_SPIN_US the thread yields the core
 * and returns false, to turn again; else it sleeps until an event, a
 * command or a timer, and returns true. The thread's turn ends here (once
 * its contexts are armed, when it sleeps). */
bool eng_loop_after_turn(strata_ctx_t *ctx, eng_idle_t *idle, bool busy);
/* A turn of the loop on the calling thread, which polls for what a turn
 * delivers (the model write of its pull): taken when no other thread turns
 * and the progress thread is awake (asleep, it armed its contexts, whose
 * doorbells wake it); the core is yielded when the turn did nothing. */
void eng_loop_assist(strata_ctx_t *ctx);
/* Asks the thread to stop and joins it. */
void eng_loop_stop(strata_ctx_t *ctx);
/* Queue a command (waiting while the queue is full, up to the timeout) and
 * wake the thread if it sleeps; a busy one takes it on its next turn. */
strata_status_t eng_cmd_submit(strata_ctx_t *ctx, const eng_cmd_t *cmd);
/* Add a transport context's wait fd to the thread's epoll set. */
strata_status_t eng_loop_watch(strata_ctx_t *ctx, tp_ctx_t *tp);
/* Open the data provider idx once (and watch it). */
strata_status_t eng_data_tp(strata_ctx_t *ctx, int idx, tp_ctx_t **tp_out);

/* The job failed: remember the first status, fail every gate and pending
 * request. Logs msg (printf-style) when this is the first failure; later
 * failures are consequences and logged at debug level. The coordinator also
 * tells every rank (ABORT). */
#define eng_fail(ctx, status, ...)                                             \
    eng_fail_at(ctx, status, __FILE__, __LINE__, __VA_ARGS__)
void eng_fail_at(strata_ctx_t *ctx, strata_status_t status, const char *file,
                 int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* A failure this rank saw that may be the consequence of one elsewhere (a
 * peer lost, a connection refused: an aggregator that left on the
 * coordinator's ABORT before ours arrived). The coordinator decides what
 * the job's failure is: this rank tells it (FAILED) and waits for its
 * ABORT, which names the job's first failure, this one if it knew of none.
 * Fails with this message only when there is no coordinator to ask, it
 * leaves without answering, or STRATA_TIMEOUT_MS passes. The first such
 * message is kept. On the coordinator, the same as eng_fail. */
#define eng_fail_soon(ctx, status, ...)                                        \
    eng_fail_soon_at(ctx, status, __FILE__, __LINE__, __VA_ARGS__)
void eng_fail_soon_at(strata_ctx_t *ctx, strata_status_t status,
                      const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* A failure this rank is sure of that the coordinator may not see (the
 * coordinator's own silence, a peer breaking the protocol on a data
 * connection): fails at once, and tells the coordinator (FAILED), so that
 * it reports the same failure, naming the culprit, to every rank. */
#define eng_fail_tell(ctx, status, ...)                                        \
    eng_fail_tell_at(ctx, status, __FILE__, __LINE__, __VA_ARGS__)
void eng_fail_tell_at(strata_ctx_t *ctx, strata_status_t status,
                      const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* A new entry at the tail of q, what is still to be written to peer; NULL
 * when q is full, the job failing naming the peer (a queue is sized for
 * every write that can be due). Inline: every push and model write. */
void eng_wqueue_full(strata_ctx_t *ctx, const util_ring_t *q, eng_peer_t *peer);
static inline void *eng_wqueue_push(strata_ctx_t *ctx, util_ring_t *q,
                                    eng_peer_t *peer)
{
    void *slot = util_ring_push(q);
    if (!slot)
        eng_wqueue_full(ctx, q, peer);
    return slot;
}
/* A send to the coordinator failed (what: "cannot ..."): when it is gone
 * (STRATA_ERR_PEER or STRATA_ERR_STATE), its disconnect reports the job's
 * failure, after what it said before leaving (an ABORT naming the first
 * cause, which a failure here would hide); any other status fails the job
 * now. */
#define eng_fail_coord_send(ctx, status, what)                                 \
    eng_fail_coord_send_at(ctx, status, __FILE__, __LINE__, what)
void eng_fail_coord_send_at(strata_ctx_t *ctx, strata_status_t status,
                            const char *file, int line, const char *what);
/* The coordinator will not answer (why says so): fail with the message
 * eng_fail_soon holds, if any. */
void eng_fail_soon_now(strata_ctx_t *ctx, const char *why);
/* The progress thread, every turn: a failure eng_fail_soon holds whose
 * wait for the coordinator's word ran out. */
void eng_fail_soon_due(strata_ctx_t *ctx);
/* What eng_fail_soon held is no failure after all (a lost aggregator's
 * shard was taken over): forgotten. */
void eng_fail_soon_cancel(strata_ctx_t *ctx);
static inline strata_status_t eng_fatal(const strata_ctx_t *ctx)
{
    return (strata_status_t)atomic_load(&((strata_ctx_t *)ctx)->fatal);
}

/* ---- req.c ---- */

strata_status_t eng_req_pool_create(strata_ctx_t *ctx);
void eng_req_pool_free(strata_ctx_t *ctx);
/* Progress thread: whether a push still has pieces to write; complete every
 * such push with status. */
bool eng_req_push_pending(strata_ctx_t *ctx);
void eng_req_fail_pushes(strata_ctx_t *ctx, strata_status_t status);
/* Application thread: a request from the pool, which grows as needed;
 * NULL (logged) only when memory runs out. */
strata_request_t *eng_req_get(strata_ctx_t *ctx, eng_req_kind_t kind);
void eng_req_put(strata_request_t *req);
/* A request the application gave up waiting for: freed once complete. */
void eng_req_abandon(strata_request_t *req);
/* Waits (timeout_ms < 0: STRATA_TIMEOUT_MS), logging a timeout; the
 * request stays pending then. */
strata_status_t eng_req_wait(strata_request_t *req, int timeout_ms);
/* strata_wait and strata_test: the request is freed and *req NULL once
 * done. */
strata_status_t eng_req_wait_put(strata_request_t **req, int timeout_ms);
strata_status_t eng_req_test(strata_request_t **req, bool *done_out);
/* Submit a command with a request and wait for it. */
strata_status_t eng_run(strata_ctx_t *ctx, eng_cmd_t *cmd, int timeout_ms);
/* Progress thread: the request is done. */
void eng_req_complete(strata_ctx_t *ctx, strata_request_t *req,
                      strata_status_t status);

/* ---- fdlimit.c ---- */

/* Raise the soft RLIMIT_NOFILE to the hard limit; STRATA_ERR_NOFILE (logged,
 * naming ulimit -n) when this rank's connections cannot fit even then. Once
 * the role and the job's size are known. */
strata_status_t eng_fd_budget(const strata_ctx_t *ctx);

/* ---- boot.c ---- */

/* Application thread, before the progress thread starts: listeners, and the
 * coordinator's address. */
strata_status_t eng_boot_prepare(strata_ctx_t *ctx);
void eng_boot_free(strata_ctx_t *ctx);
/* Say BYE to the coordinator, with this rank's metrics; *pending counts it
 * until sent. */
strata_status_t eng_boot_bye(strata_ctx_t *ctx, uint32_t *pending);

/* ---- coord.c (rank 0) ---- */

strata_status_t eng_coord_create(strata_ctx_t *ctx);
void eng_coord_free(strata_ctx_t *ctx);
/* At the join deadline: fails the job naming the ranks that never said
 * HELLO, if any (true then). */
bool eng_coord_missing(strata_ctx_t *ctx);
/* Every rank said BYE. */
bool eng_coord_done(const strata_ctx_t *ctx);
/* Every rank's metrics (from their BYE) as one JSON file; after the
 * progress thread stopped. */
strata_status_t eng_coord_write_metrics(strata_ctx_t *ctx, const char *path);

/* ---- worker.c, worker_api.c ---- */

strata_status_t eng_worker_create(strata_ctx_t *ctx);
void eng_worker_free(strata_ctx_t *ctx);
/* The provider of the connection to aggregator a (after joining). */
int eng_worker_link_prov(const strata_ctx_t *ctx, int a);
/* Application thread: checked by the API already (a worker, the arguments
 * it validates, committed for push and pull). */
strata_status_t eng_worker_register(strata_ctx_t *ctx,
                                    const eng_tensor_desc_t *desc, void *param,
                                    void *grad, int *id_out);
uint32_t eng_worker_ntensors(const strata_ctx_t *ctx);
/* Tensor i's description and buffers. */
const eng_tensor_desc_t *eng_worker_tensor(const strata_ctx_t *ctx, uint32_t i,
                                           void **param, void **grad);
bool eng_worker_committed(const strata_ctx_t *ctx);
/* Commit the layout, unless it is already: start (the command submitted),
 * then end (waits for it, timeout_ms < 0: STRATA_TIMEOUT_MS). */
strata_status_t eng_worker_commit(strata_ctx_t *ctx);
strata_status_t eng_worker_commit_start(strata_ctx_t *ctx,
                                        strata_request_t **req_out);
strata_status_t eng_worker_commit_end(strata_ctx_t *ctx, strata_request_t *req,
                                      int timeout_ms);
strata_status_t eng_worker_push(strata_ctx_t *ctx, const int *tensors,
                                size_t ntensors, strata_request_t **req_out);
strata_status_t eng_worker_pull(strata_ctx_t *ctx, int64_t clock,
                                strata_request_t **req_out);
/* strata_wait or strata_test on push req: with zero copy, the pushes of a
 * clock not pushed whole are released from then on (the aggregators copy
 * their gradients: they read them in place only once the clock is whole). */
void eng_worker_waits(strata_ctx_t *ctx, const strata_request_t *req);
/* Announce the aggregators' learning rate from the first clock this worker
 * has not begun to push. */
strata_status_t eng_worker_set_lr(strata_ctx_t *ctx, double lr);
/* strata_epoch_end, its arguments checked: the policy's to take. */
strata_status_t eng_worker_epoch_end(strata_ctx_t *ctx,
                                     double iteration_seconds);
/* Send a control message to every aggregator. */
strata_status_t eng_worker_send_aggs(strata_ctx_t *ctx, const eng_wbuf_t *m);

/* ---- rounds.c (esync, fedavg workers) ---- */

/* Application thread, for strata_round_ready and strata_round_sync (their
 * arguments checked). */
strata_status_t eng_rounds_ready(strata_ctx_t *ctx, double step_seconds,
                                 bool *ready_out);
strata_status_t eng_rounds_sync(strata_ctx_t *ctx);

/* ---- gssp.c (gssp workers) ---- */

/* ---- aggregator.c ---- */

strata_status_t eng_agg_create(strata_ctx_t *ctx);
void eng_agg_free(strata_ctx_t *ctx);

/* ---- metrics.c ---- */

void eng_metrics_read(strata_ctx_t *ctx, strata_metrics_t *m);
/* This rank's metrics as one JSON object; 0 if it does not fit. */
size_t eng_metrics_json(strata_ctx_t *ctx, char *buf, size_t cap);
/* The moment of a stage of a takeover (one of ctx->cnt.tk_*_ns), the first
 * time this rank sees it: the coordinator's rank sees some stages twice. */
void eng_metrics_stamp(_Atomic uint64_t *at);
/* Every shard protected at `clock`. */
void eng_metrics_protected(strata_ctx_t *ctx, int64_t clock);
/* TAKEOVER: shard `lost` taken over by `taker`, protected at P, resumed
 * at R (stamps tk_told_ns). */
void eng_metrics_takeover(strata_ctx_t *ctx, uint32_t lost, uint32_t taker,
                          int64_t P, int64_t R);
/* A worker's whole model reached `clock`: the first one at or past a
 * takeover's R stamps tk_resumed_ns. */
void eng_metrics_pulled(strata_ctx_t *ctx, int64_t clock);

#endif /* STRATA_ENGINE_ENGINE_H */
